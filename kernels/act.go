package kernels

import (
	"fmt"
	"math"

	"bitgo/quantcfg"
)

// Acts are one call's activations, prepared once (not per thread): quantized to int8 for
// the integer formats, kept as float32 for the float formats.
type Acts struct {
	N  int // tokens
	K  int // logical inputs
	Kp int // padded inputs (the layer's Kp)
	// Q is N rows of Kp int8 values (zero over [K, Kp)), integer formats only.
	Q []int8
	// XS are the activation scales xs = 127/max(amax, 1e-5): one (per-tensor), one per token
	// (per-token), or N*ceil(K/G) (per-group:G, token-major), integer formats only.
	XS []float32
	// Mode is the act mode the scales follow.
	Mode quantcfg.ActMode
	// F is N rows of K float32 values, float formats only.
	F []float32
	// Scratch belongs to the kernel that runs the call (lookup tables, sums, ...): Prepare
	// fills it, Run reads it. It is kept across calls to avoid allocation.
	Scratch []byte
	// parts are a Parted call's per-worker sums.
	parts partSums
	// call is RunSplit's call in flight (its functions and class names, made once).
	call *splitCall
}

// partSums are the int32 sums of a Parted call's workers: worker w's at buf[w*stride:],
// stride = RowBlocks()*N*RowBlock (partStride); used[w] says whether w ran units in the
// call (its sums are cleared when it first does).
type partSums struct {
	buf  []int32
	used []bool
}

// XSIndex returns the index into XS of token t, input group containing input k.
func (a *Acts) XSIndex(t, k int) int {
	switch a.Mode.Kind {
	case quantcfg.ActPerTensor:
		return 0
	case quantcfg.ActPerGroup:
		ng := (a.K + a.Mode.Group - 1) / a.Mode.Group
		return t*ng + k/a.Mode.Group
	}
	return t
}

// actEps is the floor on amax: BitNet's clamp(min=1e-5), as a float32.
const actEps = float32(1e-5)

// QuantizeActs prepares x (n tokens of k float32 values, row-major) for a layer with layout
// l and act mode mode, reusing a's buffers. Non-finite values are refused with ErrNonFinite
// naming the token and the input.
func QuantizeActs(l Layout, mode quantcfg.ActMode, x []float32, n int, a *Acts) error {
	k := l.K
	if n < 1 {
		return fmt.Errorf("%w: %d tokens: need at least 1", ErrShape, n)
	}
	if len(x) != n*k {
		return fmt.Errorf("%w: activations have %d values, want %d tokens x %d inputs = %d", ErrShape, len(x), n, k, n*k)
	}
	if i := firstNonFinite(x); i >= 0 {
		return fmt.Errorf("%w: activation of token %d, input %d is %v", ErrNonFinite, i/k, i%k, x[i])
	}
	a.N, a.K, a.Kp, a.Mode = n, k, l.Kp, mode
	if l.Format.IsFloat() {
		a.F = append(a.F[:0], x...)
		a.Q, a.XS = a.Q[:0], a.XS[:0]
		return nil
	}
	a.F = a.F[:0]
	a.Q = resize(a.Q, n*l.Kp)
	clear(a.Q)
	switch mode.Kind {
	case quantcfg.ActPerTensor:
		a.XS = resize(a.XS, 1)
		a.XS[0] = actScale(absMax(x))
		for t := 0; t < n; t++ {
			quantizeRun(x[t*k:(t+1)*k], a.XS[0], a.Q[t*l.Kp:])
		}
	case quantcfg.ActPerGroup:
		g := mode.Group
		ng := (k + g - 1) / g
		a.XS = resize(a.XS, n*ng)
		for t := 0; t < n; t++ {
			for j := 0; j < ng; j++ {
				run := x[t*k+j*g : t*k+min((j+1)*g, k)]
				s := actScale(absMax(run))
				a.XS[t*ng+j] = s
				quantizeRun(run, s, a.Q[t*l.Kp+j*g:])
			}
		}
	case quantcfg.ActPerToken:
		a.XS = resize(a.XS, n)
		for t := 0; t < n; t++ {
			row := x[t*k : (t+1)*k]
			a.XS[t] = actScale(absMax(row))
			quantizeRun(row, a.XS[t], a.Q[t*l.Kp:])
		}
	default:
		return fmt.Errorf("%w: act mode %q cannot quantize activations for format %s", ErrShape, mode, l.Format)
	}
	return nil
}

func absMax(x []float32) float32 {
	if m, ok := absMaxFast(x); ok {
		return m
	}
	var m float32
	for _, v := range x {
		if v < 0 {
			v = -v
		}
		if v > m {
			m = v
		}
	}
	return m
}

// actScale is 127 / max(amax, 1e-5) in float32.
func actScale(amax float32) float32 {
	return float32(127) / max(amax, actEps)
}

// QuantizeAct is one activation's int8 value for scale xs: clamp(roundHalfEven(x*xs), -128, 127).
func QuantizeAct(x, xs float32) int8 {
	p := x * xs // a float32 product
	r := math.RoundToEven(float64(p))
	return int8(max(-128, min(127, r)))
}

func quantizeRun(x []float32, xs float32, dst []int8) {
	if quantizeFast(x, xs, dst) {
		return
	}
	for i, v := range x {
		dst[i] = QuantizeAct(v, xs)
	}
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
