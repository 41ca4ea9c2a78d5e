package kernels

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"bitgo/quantcfg"
)

// goSplitter is a Splitter on goroutines, ranges of at most 3 units (stealing-sized pieces,
// several per worker), counting its calls.
func goSplitter(calls *atomic.Int64) Splitter {
	return func(_ string, units int, _ bool, fn func(w, lo, hi int)) {
		calls.Add(1)
		var wg sync.WaitGroup
		for lo := 0; lo < units; lo += 3 {
			wg.Add(1)
			go func(lo int) {
				defer wg.Done()
				fn(lo%2, lo, min(lo+3, units))
			}(lo)
		}
		wg.Wait()
	}
}

// actsQuantizeRef is QuantizeActs as the scalar definitions say: every value's
// QuantizeAct with its run's scale (the absmax of the run, all tokens for per-tensor),
// padding zero.
func actsQuantizeRef(l Layout, mode quantcfg.ActMode, x []float32, n int) ([]int8, []float32) {
	k := l.K
	amax := func(v []float32) float32 {
		var m float32
		for _, f := range v {
			m = max(m, float32(math.Abs(float64(f))))
		}
		return m
	}
	q := make([]int8, n*l.Kp)
	var xs []float32
	g := k
	if mode.Kind == quantcfg.ActPerGroup {
		g = mode.Group
	}
	all := actScale(amax(x))
	for t := 0; t < n; t++ {
		for k0 := 0; k0 < k; k0 += g {
			run := x[t*k+k0 : t*k+min(k0+g, k)]
			s := all
			if mode.Kind != quantcfg.ActPerTensor {
				s = actScale(amax(run))
				xs = append(xs, s)
			}
			for i, v := range run {
				q[t*l.Kp+k0+i] = QuantizeAct(v, s)
			}
		}
	}
	if mode.Kind == quantcfg.ActPerTensor {
		xs = []float32{all}
	}
	return q, xs
}

// TestQuantizeActsSplit: split over workers or not, QuantizeActsSplit gives the scalar
// definitions' int8 values, scales and zero padding in every act mode (over a dirty Acts
// reused from a larger call), and a NaN or an infinity in any token is refused naming the
// first one, as the unsplit call names it.
func TestQuantizeActsSplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 12))
	var calls atomic.Int64
	split := goSplitter(&calls)
	modes := []quantcfg.ActMode{quantcfg.PerToken, quantcfg.PerTensor, {Kind: quantcfg.ActPerGroup, Group: 128}}
	var a Acts
	for _, c := range []struct{ n, k int }{{70, 1000}, {9, 8000}, {1, 70000}, {40, 2000}, {3, 17}} {
		l, err := NewLayout(quantcfg.I2S, 32, c.k)
		if err != nil {
			t.Fatal(err)
		}
		x := make([]float32, c.n*c.k)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * float64(1+i%5))
			if i%97 == 3 {
				x[i] = float32(int(x[i])) + 0.5 // ties
			}
		}
		for _, mode := range modes {
			for _, sp := range []Splitter{nil, split} {
				before := calls.Load()
				// dirty the buffers
				for i := range a.Q {
					a.Q[i] = 0x55
				}
				if err := QuantizeActsSplit(l, mode, x, c.n, &a, sp); err != nil {
					t.Fatal(err)
				}
				wantQ, wantXS := actsQuantizeRef(l, mode, x, c.n)
				if !slices.Equal(a.Q, wantQ) {
					t.Fatalf("n=%d k=%d %v split=%v: int8 values differ from the scalar definition", c.n, c.k, mode, sp != nil)
				}
				if !slices.Equal(a.XS, wantXS) {
					t.Fatalf("n=%d k=%d %v split=%v: scales %v..., want %v...", c.n, c.k, mode, sp != nil, a.XS[:1], wantXS[:1])
				}
				wantSplits := int64(0)
				if sp != nil && c.n >= 2 && c.n*c.k >= ParallelMin {
					wantSplits = 1
					if mode.Kind == quantcfg.ActPerTensor {
						wantSplits = 2
					}
				}
				if got := calls.Load() - before; got != wantSplits {
					t.Errorf("n=%d k=%d %v: %d splits, want %d", c.n, c.k, mode, got, wantSplits)
				}
				for _, bad := range []int{len(x) - 1, len(x) / 2, 5} {
					y := slices.Clone(x)
					y[bad] = float32(math.NaN())
					y[len(y)-1] = float32(math.Inf(1))
					err := QuantizeActsSplit(l, mode, y, c.n, &a, sp)
					want := QuantizeActs(l, mode, y, c.n, new(Acts))
					if !errors.Is(err, ErrNonFinite) || err.Error() != want.Error() {
						t.Fatalf("n=%d k=%d %v split=%v: NaN at %d: %v, want %v", c.n, c.k, mode, sp != nil, bad, err, want)
					}
				}
			}
		}
	}
}

// TestAbsMaxFinite: the one-pass finite check and maximum (assembly where the CPU has it)
// agree with the two scalar passes at every position of a NaN or an infinity, tails too.
func TestAbsMaxFinite(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 13))
	for _, n := range []int{0, 1, 15, 16, 17, 40, 1000} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		if n > 2 {
			x[1] = float32(math.Copysign(0, -1))
			x[2] = math.Float32frombits(1) // a denormal
		}
		var want float32
		for _, v := range x {
			want = max(want, float32(math.Abs(float64(v))))
		}
		if got, ok := absMaxFinite(x); !ok || math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("n=%d: %v %v, want %v", n, got, ok, want)
		}
		for i := 0; i < n; i++ {
			for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1)), math.Float32frombits(0x7f800001)} {
				y := slices.Clone(x)
				y[i] = bad
				if _, ok := absMaxFinite(y); ok {
					t.Fatalf("n=%d: %v at %d passed as finite", n, bad, i)
				}
			}
		}
	}
}
