package kernels

import "unsafe"

// Measurement loops for `bitd bench`: the roofline every kernel is compared with.

// ReadBytes reads buf once with the widest vector loads this CPU has (buf's length must be
// a multiple of 256; a shorter tail is ignored) and returns a checksum of it.
func ReadBytes(buf []byte) uint64 {
	n := len(buf) &^ 255
	if n == 0 {
		return 0
	}
	return readBytes(unsafe.Pointer(&buf[0]), n, buf[:n])
}

// Int8PeakOps runs the int8 peak loop of Int8PeakPath for iters iterations and returns the
// int8 operations it performed (multiply and add counted separately; 0 where no path runs or
// iters < 1).
func Int8PeakOps(iters int) float64 {
	if iters < 1 {
		return 0
	}
	return int8Peak(iters)
}

// Int8PeakPath is the path whose int8 peak Int8PeakOps measures, the widest multiply path
// this CPU has: 24 independent zmm vpdpbusd (AVX-512 VNNI), or 8 independent ymm vpmaddubsw
// each summed by a vpaddw (AVX2; also on AVX-VNNI CPUs, where it understates the peak of the
// VEX vpdpbusd kernels); false without either.
func Int8PeakPath() (ISA, bool) { return int8PeakPath() }
