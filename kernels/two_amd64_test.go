//go:build !noasm

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestTwoStreamKernels: the two-stream kernels (fmtOps.l1.two1: i2s, int2) against their
// references run on each row block alone, over segments of ragged lengths (chunks of
// int16 sums whole and cut short), the two row blocks at an odd distance and their sums
// apart.
func TestTwoStreamKernels(t *testing.T) {
	if !ISAAvailable(ISAAVX2) {
		t.Skip("no AVX2 here")
	}
	rng := rand.New(rand.NewPCG(81, 2))
	type kernel struct {
		name  string
		fn    func(*byte)
		step  int // K a step
		chunk int // gemvArgs.Aux: 0, the row's bytes (i2s)
		ref   func(a *gemvArgs)
		code  func() byte
	}
	var tab [32]byte // int2: levels 0-3 in a shuffled order (tabInt2)
	lv := rng.Perm(4)
	for i := range 16 {
		tab[i], tab[16+i] = byte(lv[i&3]), byte(lv[i>>2])
	}
	ks := []kernel{
		{"gemvI2STwoT1AVX2", gemvI2STwoT1AVX2, 128, 0, func(a *gemvArgs) { gemvI2SGeneric(a, 1) },
			func() byte { return byte(rng.IntN(3) | rng.IntN(3)<<2 | rng.IntN(3)<<4 | rng.IntN(3)<<6) }}, // codes 0-2
		{"gemvInt2TwoT1AVX2", gemvInt2TwoT1AVX2, 4, 42, func(a *gemvArgs) { gemvInt2Generic(a, 1, 4) },
			func() byte { return byte(rng.IntN(256)) }},
		{"gemvInt2TwoT1AVX2 (chunks of 5)", gemvInt2TwoT1AVX2, 4, 5, func(a *gemvArgs) { gemvInt2Generic(a, 1, 4) },
			func() byte { return byte(rng.IntN(256)) }},
	}
	for _, k := range ks {
		for _, c := range []struct{ seg, nseg, last int }{{1, 1, 1}, {7, 1, 7}, {8, 1, 8}, {9, 1, 9}, {7, 2, 3}, {15, 3, 1}, {2, 3, 16}, {43, 2, 85}, {84, 1, 84}, {90, 2, 131}} {
			kp := ((c.nseg-1)*c.seg + c.last) * k.step
			rbBytes := 8 * kp // 32 rows of 2-bit codes
			w := make([]byte, 3*rbBytes+192)
			for i := range w {
				w[i] = k.code()
			}
			x := make([]int8, kp)
			for i := range x {
				x[i] = int8(rng.IntN(256) - 128)
			}
			a := gemvArgs{X: unsafe.Pointer(&x[0]), XStride: kp, SegSteps: c.seg, NSeg: c.nseg, LastSteps: c.last, Aux: k.chunk,
				Tab: unsafe.Pointer(&tab[0])}
			if k.chunk == 0 {
				a.Aux = kp
			}
			ns := c.nseg * RowBlock
			want := make([]int32, 2*ns)
			dist := 2*rbBytes + 192 // the second row block's offset
			for j, off := range []int{0, dist} {
				a.W, a.Sums = unsafe.Pointer(&w[off]), unsafe.Pointer(&want[j*ns])
				k.ref(&a)
			}
			got := make([]int32, 2*ns+16) // the second's sums 16 int32 past the first's
			for i := range got {
				got[i] = -7
			}
			a.W, a.Sums, a.W2Off, a.Sums2Off = unsafe.Pointer(&w[0]), unsafe.Pointer(&got[0]), dist, 4*(ns+16)
			k.fn(argp(&a))
			for i := range want {
				j := i
				if i >= ns {
					j += 16
				}
				if got[j] != want[i] {
					t.Fatalf("%s, segments of %d steps, %d of them, the last %d: row block %d segment %d row %d: got %d, want %d",
						k.name, c.seg, c.nseg, c.last, i/ns, i%ns/RowBlock, i%RowBlock, got[j], want[i])
				}
			}
			for i := ns; i < ns+16; i++ {
				if got[i] != -7 {
					t.Fatalf("%s: wrote between the two row blocks' sums (int32 %d)", k.name, i)
				}
			}
		}
	}
}

// TestRunSplitPairs: under the zen3 tuning RunSplit splits a one-token call of the AVX2
// path's i2s and int2 into pairs of row blocks half the layer apart, and any pieces of
// them, one unit at a time in any order (as a stealing runner's last pieces) or a worker's
// half, give the reference's results with every pair through the two-stream kernel and an
// odd layer's last row block alone, for each layer spec of the tests; pairs closer than
// twoMinDist, two tokens, int2 in groups (its epilogue in the kernel) and the other
// tunings split by rows. A tuning
// switched between PairUnits and RunPairs runs the pieces' row blocks one at a time.
func TestRunSplitPairs(t *testing.T) {
	var ks []*simdKernel
	for _, k := range asmKernels() {
		if k.ops.l1.two1 != nil {
			ks = append(ks, k)
		}
	}
	if len(ks) == 0 {
		t.Skip("no kernel with two streams runs here")
	}
	defer SwitchTuning(currentTuning())
	nearPairs(t)
	rng := rand.New(rand.NewPCG(82, 1))
	for _, base := range ks {
		ran := map[string]int{}
		count := counter(ran)
		o := *base.ops
		single := "one"
		o.l1.two1, o.l1.gemv1 = count("two", o.l1.two1), count("one", o.l1.gemv1)
		if o.l1.gemv1 == nil {
			o.gemv[1], o.gemvSeq[1], single = count("gemv", o.gemv[1]), count("gemv", o.gemvSeq[1]), "gemv"
		}
		k := newSIMDKernel(base.isa, base.format, &o, base.int8vnni)
		k.name = base.name
		for _, spec := range specsFor(k.format) {
			for _, mrb := range []int{2, 7, 8} {
				spec.Out, spec.In = mrb*RowBlock-5, 300
				tl := newTestLayer(t, rng, spec)
				for _, n := range []int{1, 2} {
					if ok, _ := k.CanImplement(tl.Layer, n); !ok { // (int2's widest code books)
						continue
					}
					x := randActs(rng, n, spec.In)
					for _, tn := range []Tuning{TuningZen3, TuningDefault} {
						SwitchTuning(tn)
						want, a := preparedCall(t, k, tl.Layer, x, n)
						pairs := tn == TuningZen3 && n == 1 && !(k.ops.fused && tl.Layer.Segments() > 1) // (int2 in groups: its epilogue in the kernel)
						for _, order := range []string{"units", "halves"} {
							what := fmt.Sprintf("%s, %s, %v, %d row blocks, %d segments, %d tokens, %s", k.Name(), tn, spec, mrb, tl.Layer.Segments(), n, order)
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
							wantUnits := mrb
							if pairs {
								wantUnits = (mrb + 1) / 2
								if ran["two"] != mrb/2 || ran[single] != mrb%2 {
									t.Errorf("%s: ran %v, want %d pairs and %d alone", what, ran, mrb/2, mrb%2)
								}
							} else if ran["two"] != 0 {
								t.Errorf("%s: ran %v, want no pairs", what, ran)
							}
							if units != wantUnits {
								t.Errorf("%s: split %d units, want %d", what, units, wantUnits)
							}
						}
					}
				}
			}
		}

		// pairs closer than twoMinDist split by rows
		twoMinDist = 64 << 10
		spec := specsFor(k.format)[0]
		spec.Out, spec.In = 8*RowBlock, 2048 // 16 KiB row blocks: pairs 64 KiB apart
		tl := newTestLayer(t, rng, spec)
		SwitchTuning(TuningZen3)
		_, a := preparedCall(t, k, tl.Layer, randActs(rng, 1, spec.In), 1)
		if u := k.PairUnits(tl.Layer, a); u != 4 {
			t.Errorf("%s: 8 row blocks of 16 KiB: %d pair units, want 4", k.Name(), u)
		}
		spec.Out = 6 * RowBlock // pairs 48 KiB apart
		tl = newTestLayer(t, rng, spec)
		_, a = preparedCall(t, k, tl.Layer, randActs(rng, 1, spec.In), 1)
		if u := k.PairUnits(tl.Layer, a); u != 0 {
			t.Errorf("%s: 6 row blocks of 16 KiB: %d pair units, want 0", k.Name(), u)
		}
		twoMinDist = 0

		// a tuning switched after the split: the row blocks one at a time, the same results
		want, a := preparedCall(t, k, tl.Layer, randActs(rng, 1, spec.In), 1)
		SwitchTuning(TuningDefault)
		out := make([]float32, spec.Out)
		k.RunPairs(tl.Layer, a, 0, 2, out)
		k.RunPairs(tl.Layer, a, 2, 3, out)
		checkExact(t, k.Name()+": RunPairs under the default tuning", out, want, spec.Out)
	}
}
