//go:build !noasm

package kernels

import "unsafe"

func readBytes(p unsafe.Pointer, n int, buf []byte) uint64 {
	switch {
	case ISAAvailable(ISAAVX512):
		return readBytesAVX512((*byte)(p), n)
	case ISAAvailable(ISAAVX2):
		return readBytesAVX2((*byte)(p), n)
	}
	return readBytesGeneric(buf)
}

func vnniPeak(iters int) bool {
	if !ISAAvailable(ISAAVX512) {
		return false
	}
	vnniPeakAVX512(iters)
	return true
}
