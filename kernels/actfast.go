package kernels

import "math"

// actLoops are assembly versions of the activation quantizer's loops (act.go calls them
// first): the same arithmetic, bit for bit (TestActHelpers), 20-50x faster than the scalar
// loops, which otherwise cost as much as a GEMV at K = 14336 (see genActHelpers in
// _asm/misc.go).
type actLoops struct {
	absBits   func(x *float32, n int) uint32
	nonFinite func(x *float32, n int) int
	quantize  func(x *float32, n int, xs float32, dst *int8)
}

// actLoopsBy holds the loops by path (AVX-512, AVX2), set by the amd64 build where the CPU
// has the path.
var actLoopsBy [numISA]actLoops

// actAsm returns the loops of helperPath, or nil (the scalar loops run).
func actAsm() *actLoops {
	if p := helperPath(); p != noISA && actLoopsBy[p].absBits != nil {
		return &actLoopsBy[p]
	}
	return nil
}

// firstNonFinite returns the index of the first NaN or infinity in x, or -1.
func firstNonFinite(x []float32) int {
	start := 0
	if asm := actAsm(); asm != nil && len(x) >= 16 {
		n := len(x) &^ 15
		b := asm.nonFinite(&x[0], n)
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
	asm := actAsm()
	if asm == nil || len(x) < 16 {
		return false
	}
	n := len(x) &^ 15
	asm.quantize(&x[0], n, xs, &dst[0])
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
	if asm := actAsm(); asm != nil && len(x) >= 16 {
		n = len(x) &^ 15
		m = asm.absBits(&x[0], n)
	}
	for _, v := range x[n:] {
		m = max(m, math.Float32bits(v)&0x7fffffff)
	}
	return math.Float32frombits(m), m < 0x7f800000
}
