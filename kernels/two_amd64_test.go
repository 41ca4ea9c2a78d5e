//go:build !noasm

package kernels

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
	"unsafe"

	"bitgo/quantcfg"
)

// TestTwoStreamKernels: the two-stream kernel (fmtOps.l1.two1) against its reference run
// on each row block alone, over segments of ragged lengths (a chunk of i2sY1Flush blocks
// and less), the two row blocks at an odd distance and their sums apart.
func TestTwoStreamKernels(t *testing.T) {
	if !ISAAvailable(ISAAVX2) {
		t.Skip("no AVX2 here")
	}
	const name = "gemvI2STwoT1AVX2"
	rng := rand.New(rand.NewPCG(81, 2))
	for _, c := range []struct{ seg, nseg, last int }{{1, 1, 1}, {7, 1, 7}, {8, 1, 8}, {9, 1, 9}, {7, 2, 3}, {15, 3, 1}, {2, 3, 16}, {43, 2, 85}} {
		kp := ((c.nseg-1)*c.seg + c.last) * 128
		rbBytes := 8 * kp // 32 rows of 2-bit codes
		w := make([]byte, 3*rbBytes+192)
		for i := range w { // i2s codes are 0, 1 or 2
			w[i] = byte(rng.IntN(3) | rng.IntN(3)<<2 | rng.IntN(3)<<4 | rng.IntN(3)<<6)
		}
		x := make([]int8, kp)
		for i := range x {
			x[i] = int8(rng.IntN(256) - 128)
		}
		a := gemvArgs{X: unsafe.Pointer(&x[0]), XStride: kp, SegSteps: c.seg, NSeg: c.nseg, LastSteps: c.last, Aux: kp}
		ns := c.nseg * RowBlock
		want := make([]int32, 2*ns)
		dist := 2*rbBytes + 192 // the second row block's offset
		for j, off := range []int{0, dist} {
			a.W, a.Sums = unsafe.Pointer(&w[off]), unsafe.Pointer(&want[j*ns])
			gemvI2SGeneric(&a, 1)
		}
		got := make([]int32, 2*ns+16) // the second's sums 16 int32 past the first's
		for i := range got {
			got[i] = -7
		}
		a.W, a.Sums, a.W2Off, a.Sums2Off = unsafe.Pointer(&w[0]), unsafe.Pointer(&got[0]), dist, 4*(ns+16)
		gemvI2STwoT1AVX2(argp(&a))
		for i := range want {
			j := i
			if i >= ns {
				j += 16
			}
			if got[j] != want[i] {
				t.Fatalf("%s, segments of %d steps, %d of them, the last %d: row block %d segment %d row %d: got %d, want %d",
					name, c.seg, c.nseg, c.last, i/ns, i%ns/RowBlock, i%RowBlock, got[j], want[i])
			}
		}
		for i := ns; i < ns+16; i++ {
			if got[i] != -7 {
				t.Fatalf("%s: wrote between the two row blocks' sums (int32 %d)", name, i)
			}
		}
	}
}

// TestRunSplitPairs: under the zen3 tuning RunSplit splits a one-token i2s call (the AVX2
// path's) into pairs of row blocks half the layer apart, and any pieces of them, one unit
// at a time in any order (as a stealing runner's last pieces) or a worker's half, give the
// reference's results with every pair through the two-stream kernel and an odd layer's
// last row block alone; pairs closer than twoMinDist, two tokens, and the other tunings
// split by rows. A tuning switched between PairUnits and RunPairs runs the pieces' row
// blocks one at a time.
func TestRunSplitPairs(t *testing.T) {
	var base *simdKernel
	for _, k := range asmKernels() {
		if k.ops.l1.two1 != nil {
			base = k
		}
	}
	if base == nil {
		t.Skip("no kernel with two streams runs here")
	}
	defer SwitchTuning(currentTuning())
	nearPairs(t)
	ran := map[string]int{}
	count := counter(ran)
	o := *base.ops
	o.l1.two1, o.l1.gemv1 = count("two", o.l1.two1), count("one", o.l1.gemv1)
	k := newSIMDKernel(base.isa, base.format, &o, base.int8vnni)
	k.name = base.name
	rng := rand.New(rand.NewPCG(82, 1))
	for _, mrb := range []int{2, 7, 8} {
		spec := specsFor(quantcfg.I2S)[0]
		spec.Out, spec.In = mrb*RowBlock-5, 300
		tl := newTestLayer(t, rng, spec)
		for _, n := range []int{1, 2} {
			x := randActs(rng, n, spec.In)
			for _, tn := range []Tuning{TuningZen3, TuningDefault} {
				SwitchTuning(tn)
				want, a := preparedCall(t, k, tl.Layer, x, n)
				pairs := tn == TuningZen3 && n == 1
				for _, order := range []string{"units", "halves"} {
					what := fmt.Sprintf("%s, %d row blocks, %d tokens, %s", tn, mrb, n, order)
					var units int
					split := func(class string, u int, once bool, fn func(w, lo, hi int)) {
						units = u
						if order == "halves" {
							fn(1, u/2, u)
							fn(0, 0, u/2)
							return
						}
						for _, i := range rng.Perm(u) {
							fn(i%2, i, i+1)
						}
					}
					clear(ran)
					out := make([]float32, n*spec.Out)
					RunSplit(k, tl.Layer, a, out, 2, split)
					checkExact(t, what, out, want, spec.Out)
					wantUnits, wantRan := mrb, map[string]int{}
					if pairs {
						wantUnits = (mrb + 1) / 2
						wantRan["two"] = mrb / 2
						if mrb%2 == 1 {
							wantRan["one"] = 1
						}
					}
					if units != wantUnits {
						t.Errorf("%s: split %d units, want %d", what, units, wantUnits)
					}
					if n == 1 && !maps.Equal(ran, wantRan) {
						t.Errorf("%s: ran %v, want %v", what, ran, wantRan)
					}
				}
			}
		}
	}

	// pairs closer than twoMinDist split by rows
	twoMinDist = 64 << 10
	spec := specsFor(quantcfg.I2S)[0]
	spec.Out, spec.In = 8*RowBlock, 2048 // 16 KiB row blocks: pairs 64 KiB apart
	tl := newTestLayer(t, rng, spec)
	SwitchTuning(TuningZen3)
	_, a := preparedCall(t, k, tl.Layer, randActs(rng, 1, spec.In), 1)
	if u := k.PairUnits(tl.Layer, a); u != 4 {
		t.Errorf("8 row blocks of 16 KiB: %d pair units, want 4", u)
	}
	spec.Out = 6 * RowBlock // pairs 48 KiB apart
	tl = newTestLayer(t, rng, spec)
	_, a = preparedCall(t, k, tl.Layer, randActs(rng, 1, spec.In), 1)
	if u := k.PairUnits(tl.Layer, a); u != 0 {
		t.Errorf("6 row blocks of 16 KiB: %d pair units, want 0", u)
	}
	twoMinDist = 0

	// a tuning switched after the split: the row blocks one at a time, the same results
	want, a := preparedCall(t, k, tl.Layer, randActs(rng, 1, spec.In), 1)
	SwitchTuning(TuningDefault)
	out := make([]float32, spec.Out)
	k.RunPairs(tl.Layer, a, 0, 2, out)
	k.RunPairs(tl.Layer, a, 2, 3, out)
	checkExact(t, "RunPairs under the default tuning", out, want, spec.Out)
}
