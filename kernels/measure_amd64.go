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

func readStreams() func(*byte, int) uint64 {
	switch {
	case ISAAvailable(ISAAVX512):
		return readStreamsAVX512
	case ISAAvailable(ISAAVX2):
		return readStreamsAVX2
	}
	return nil
}

func int8PeakPath() (ISA, bool) {
	switch {
	case ISAAvailable(ISAAVX512):
		return ISAAVX512, true
	case ISAAvailable(ISAAVX2):
		return ISAAVX2, true
	}
	return 0, false
}

func int8Peak(iters int) float64 {
	switch isa, ok := int8PeakPath(); {
	case !ok:
		return 0
	case isa == ISAAVX512:
		vnniPeakAVX512(iters)
		return float64(iters) * 24 * 64 * 2
	}
	int8PeakAVX2(iters)
	return float64(iters) * 8 * 32 * 2
}
