//go:build !amd64 || noasm

package kernels

import "unsafe"

func readBytes(_ unsafe.Pointer, _ int, buf []byte) uint64 { return readBytesGeneric(buf) }

func readStreams() func(*byte, int) uint64 { return nil }

func int8PeakPath() (ISA, bool) { return 0, false }

func int8Peak(int) float64 { return 0 }
