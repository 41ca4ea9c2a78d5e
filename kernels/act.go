package kernels

import (
	"fmt"
	"math"
	"slices"
	"sync/atomic"

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
	// workers is the workers RunSplit splits the call over (0: a caller of Run itself);
	// the adaptive kernel choice keeps its timings apart by it (oneSite).
	workers int
	// quant is QuantizeActsSplit's call in flight, and tmax its tokens' max |x| (ActPerTensor).
	quant quantJob
	tmax  []float32
}

// partSums are the int32 sums of a Parted call's workers: worker w's over the row blocks its
// units touched (rows[w]), none while it has run no units in the call.
type partSums struct {
	rows    []rowSums
	workers int // the call's
}

// start readies the sums for a call of workers workers: none held.
func (ps *partSums) start(workers int) {
	if len(ps.rows) < workers {
		ps.rows = append(ps.rows, make([]rowSums, workers-len(ps.rows))...)
	}
	for w := range ps.rows {
		ps.rows[w].lo, ps.rows[w].hi = 0, 0
	}
	ps.workers = workers
}

// rowSums are one worker's int32 sums over row blocks [lo, hi) of a call in parts, in
// groups of tokens (lutPasses; int1 one group, of every segment and token): a group's row
// blocks side by side, widths[g] int32s each, then the next group's. Empty (lo >= hi): none
// held (the buffer kept for the next call).
type rowSums struct {
	buf    []int32
	lo, hi int
}

// cover makes r hold row blocks [lo, hi) as well as those it holds, in groups of widths,
// the sums of row blocks new to it zero, and returns the sums.
func (r *rowSums) cover(lo, hi int, widths []int) []int32 {
	all := 0
	for _, wd := range widths {
		all += wd
	}
	if r.lo >= r.hi {
		need := (hi - lo) * all
		if cap(r.buf) < need {
			r.buf = make([]int32, need)
		}
		r.buf, r.lo, r.hi = r.buf[:need], lo, hi
		clear(r.buf)
		return r.buf
	}
	nlo, nhi := min(r.lo, lo), max(r.hi, hi)
	if nlo == r.lo && nhi == r.hi {
		return r.buf
	}
	// (A worker given ranges apart: RunSplit gives each worker one range a call.)
	buf := make([]int32, (nhi-nlo)*all)
	was, now, off := r.hi-r.lo, nhi-nlo, 0
	for _, wd := range widths {
		copy(buf[now*off+(r.lo-nlo)*wd:], r.buf[was*off:was*(off+wd)])
		off += wd
	}
	r.buf, r.lo, r.hi = buf, nlo, nhi
	return buf
}

// add adds the workers' sums of row blocks [rb0, rb1) into dst, which holds those row blocks
// alone in groups of widths, and reports whether any worker ran units.
func (ps *partSums) add(rb0, rb1 int, widths []int, dst []int32) bool {
	ran, nr := false, rb1-rb0
	for w := range ps.workers {
		r := &ps.rows[w]
		if r.lo >= r.hi {
			continue
		}
		ran = true
		lo, hi := max(rb0, r.lo), min(rb1, r.hi)
		if lo >= hi {
			continue
		}
		nh, off := r.hi-r.lo, 0
		for _, wd := range widths {
			addInt32s(dst[nr*off+(lo-rb0)*wd:nr*off+(hi-rb0)*wd], r.buf[nh*off+(lo-r.lo)*wd:])
			off += wd
		}
	}
	return ran
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
// naming the token and the input (a's contents are then undefined).
func QuantizeActs(l Layout, mode quantcfg.ActMode, x []float32, n int, a *Acts) error {
	return QuantizeActsSplit(l, mode, x, n, a, nil)
}

// QuantizeActsSplit is QuantizeActs with the tokens split over split's workers (class
// "quantize") as SplitTokens does. Each value is read twice, once for the scale and once to round it: the finite
// check rides on the first pass (absMaxFinite).
func QuantizeActsSplit(l Layout, mode quantcfg.ActMode, x []float32, n int, a *Acts, split Splitter) error {
	k := l.K
	if n < 1 {
		return fmt.Errorf("%w: %d tokens: need at least 1", ErrShape, n)
	}
	if len(x) != n*k {
		return fmt.Errorf("%w: activations have %d values, want %d tokens x %d inputs = %d", ErrShape, len(x), n, k, n*k)
	}
	if l.Format.IsFloat() {
		if i := firstNonFinite(x); i >= 0 {
			return nonFinite(x, k, i)
		}
		a.N, a.K, a.Kp, a.Mode = n, k, l.Kp, mode
		a.F = append(a.F[:0], x...)
		a.Q, a.XS = a.Q[:0], a.XS[:0]
		return nil
	}
	j := &a.quant
	j.x, j.k, j.kp, j.ng, j.g, j.perTensor, j.maxOnly = x, k, l.Kp, 1, k, false, false
	j.bad.Store(false)
	defer func() { j.x = nil }() // (a must not keep the caller's activations)
	switch mode.Kind {
	case quantcfg.ActPerTensor:
		j.perTensor = true
		a.XS = resize(a.XS, 1)
	case quantcfg.ActPerGroup:
		j.g = mode.Group
		j.ng = (k + j.g - 1) / j.g
		a.XS = resize(a.XS, n*j.ng)
	case quantcfg.ActPerToken:
		a.XS = resize(a.XS, n)
	default:
		return fmt.Errorf("%w: act mode %q cannot quantize activations for format %s", ErrShape, mode, l.Format)
	}
	a.N, a.K, a.Kp, a.Mode = n, k, l.Kp, mode
	a.F = a.F[:0]
	a.Q = resize(a.Q, n*l.Kp)
	if j.fn == nil {
		j.fn = a.quantRows
	}
	if j.perTensor { // the scale of all tokens first
		a.tmax = resize(a.tmax, n)
		j.maxOnly = true
		a.quantSplit(split, n)
		j.maxOnly = false
		if !j.bad.Load() {
			a.XS[0] = actScale(slices.Max(a.tmax))
		}
	}
	if !j.bad.Load() {
		a.quantSplit(split, n)
	}
	if j.bad.Load() {
		i := firstNonFinite(x)
		return nonFinite(x, k, i)
	}
	return nil
}

func nonFinite(x []float32, k, i int) error {
	return fmt.Errorf("%w: activation of token %d, input %d is %v", ErrNonFinite, i/k, i%k, x[i])
}

// quantJob is QuantizeActsSplit's call in flight: its activations and layout, runs (ng per
// token of g values), and what its ranges (quantRows) do.
type quantJob struct {
	x                  []float32
	k, kp, ng, g       int
	perTensor, maxOnly bool // one scale for all tokens; the pass that finds each token's max
	bad                atomic.Bool
	fn                 func(w, lo, hi int) // a.quantRows, made once
}

// quantSplit runs a.quant.fn over the n tokens (SplitTokens).
func (a *Acts) quantSplit(split Splitter, n int) {
	SplitTokens(split, "quantize", n, a.quant.k, a.quant.fn)
}

// ParallelMin is the fewest values a pass over a call's tokens (quantizing its activations,
// converting them or its outputs) splits over a runner's workers: below it one thread does
// them in less time than a fork/join takes.
const ParallelMin = 1 << 16

// SplitTokens runs fn over n tokens of per values each: through split (class, ranges of
// tokens) where split is not nil, n >= 2 and there are ParallelMin values or more, else as
// fn(0, 0, n) on this goroutine.
func SplitTokens(split Splitter, class string, n, per int, fn func(w, lo, hi int)) {
	if split == nil || n < 2 || n*per < ParallelMin {
		fn(0, 0, n)
		return
	}
	split(class, n, false, fn)
}

// quantRows quantizes tokens [lo, hi) (or, with maxOnly, sets each one's max |x| in tmax),
// zeroing their padding; a non-finite value sets bad and stops the range.
func (a *Acts) quantRows(_, lo, hi int) {
	j := &a.quant
	for t := lo; t < hi; t++ {
		row, q := j.x[t*j.k:(t+1)*j.k], a.Q[t*j.kp:(t+1)*j.kp]
		if j.maxOnly {
			m, ok := absMaxFinite(row)
			if !ok {
				j.bad.Store(true)
				return
			}
			a.tmax[t] = m
			continue
		}
		for r := 0; r < j.ng; r++ {
			run := row[r*j.g : min((r+1)*j.g, j.k)]
			var s float32
			if j.perTensor {
				s = a.XS[0]
			} else {
				m, ok := absMaxFinite(run)
				if !ok {
					j.bad.Store(true)
					return
				}
				s = actScale(m)
				a.XS[t*j.ng+r] = s
			}
			quantizeRun(run, s, q[r*j.g:])
		}
		clear(q[j.k:])
	}
}

// absMax is max |x| over finite values (absMaxFinite's pass).
func absMax(x []float32) float32 {
	m, _ := absMaxFinite(x)
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
