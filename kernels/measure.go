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

// VNNIPeakOps runs the int8 VNNI peak loop for iters iterations and returns the number of
// int8 operations (multiply and add counted separately) it performed, or 0 when AVX-512
// VNNI is unavailable.
func VNNIPeakOps(iters int) float64 {
	if !vnniPeak(iters) {
		return 0
	}
	return float64(iters) * 24 * 64 * 2
}
