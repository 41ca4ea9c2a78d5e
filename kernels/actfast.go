package kernels

import "math"

// Assembly versions of the activation quantizer's loops (act.go calls them first): the same
// arithmetic, bit for bit (TestActHelpers), 20-50x faster than the scalar loops, which
// otherwise cost as much as a GEMV at K = 14336 (see genActHelpers in _asm/misc.go). Set by
// the amd64 build to the AVX-512 loops, or to the AVX2 ones where the CPU has AVX2 and no
// AVX-512; nil otherwise.
var (
	absBitsAsm   func(x *float32, n int) uint32
	nonFiniteAsm func(x *float32, n int) int
	quantizeAsm  func(x *float32, n int, xs float32, dst *int8)
)

func actAsm() bool { return absBitsAsm != nil && !purego.Load() }

// firstNonFinite returns the index of the first NaN or infinity in x, or -1.
func firstNonFinite(x []float32) int {
	start := 0
	if actAsm() && len(x) >= 16 {
		n := len(x) &^ 15
		b := nonFiniteAsm(&x[0], n)
		if b < 0 {
			start = n
		} else {
			start = b
		}
	}
	for i := start; i < len(x); i++ {
		if f := float64(x[i]); math.IsNaN(f) || math.IsInf(f, 0) {
			return i
		}
	}
	return -1
}

// quantizeFast quantizes x with scale xs into dst (as quantizeRun) and reports whether the
// assembly ran.
func quantizeFast(x []float32, xs float32, dst []int8) bool {
	if !actAsm() || len(x) < 16 {
		return false
	}
	n := len(x) &^ 15
	quantizeAsm(&x[0], n, xs, &dst[0])
	for i, v := range x[n:] {
		dst[n+i] = QuantizeAct(v, xs)
	}
	return true
}

// absMaxFinite returns max |x| and true, or false when x holds a NaN or an infinity: the
// finite check and the maximum in one pass, over the values' bits with the sign cleared
// (finite non-negative floats order as their bits do).
func absMaxFinite(x []float32) (float32, bool) {
	var m uint32
	n := 0
	if actAsm() && len(x) >= 16 {
		n = len(x) &^ 15
		m = absBitsAsm(&x[0], n)
	}
	for _, v := range x[n:] {
		m = max(m, math.Float32bits(v)&0x7fffffff)
	}
	return math.Float32frombits(m), m < 0x7f800000
}
