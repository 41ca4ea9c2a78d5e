//go:build !amd64 || noasm

package kernels

func amxPeak(cfg *[64]byte, n int) { panic("kernels: amxPeak without assembly") }
