//go:build !noasm

package kernels

func amxPeak(cfg *[64]byte, n int) { amxPeakLoop(&cfg[0], n) }
