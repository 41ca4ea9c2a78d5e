package kernels

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"bitgo/quantcfg"
)

// TestTL2PanelGEMV: panel-major tl2 layers give the reference's results bit for bit
// through every tuning's tl2 kernels, for one to eight tokens (several token groups, one
// token alone), in row ranges that start and end inside panels (runSplit), and through
// RunSplit over 2, 3 and 16 workers: by whole panels (RowGranule) where they share out
// evenly, else in parts (Units; beyond one kernel pass of tokens only where whole panels
// leave workers idle): 4100 x 4100 (four panels and one of one row block, a 20-input tl1
// tail; in parts on two workers up to a pass of tokens), 4096 x 4080 (four whole panels,
// no tail; by rows on two), 2400 x 2600 (two panels, of 38 and 37 row blocks, an 8-input
// tail; by rows on two, in parts on three) and 2400 x 1240 (the same panels of 25 blocks
// and a 40-input tail); every call in parts on sixteen.
func TestTL2PanelGEMV(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 41))
	shapes := [][2]int{{4100, 4100}, {4096, 4080}, {2400, 2600}, {2400, 1240}}
	ns := []int{1, 2, 3, 4, 5, 8}
	if raceEnabled {
		shapes, ns = shapes[:1], []int{1, 3}
	}
	defer SwitchTuning(currentTuning())
	ran := 0
	for tn := Tuning(0); tn < numTunings; tn++ {
		SwitchTuning(tn)
		for _, k := range asmKernels() {
			if k.format != quantcfg.TL2 {
				continue
			}
			name := fmt.Sprintf("%s/%s", tn, k.Name())
			eachShape(t, name, k, k.format, rng, shapes, 1, ns, func(what string, tl testLayer, x []float32, n int, want []float32) {
				if !tl.Layout.Paneled() {
					t.Fatalf("%s: not panel-major", what)
				}
				rows := TL2Panel
				if tl.Spec.Out < 3808 {
					rows = 38
				}
				if g := k.RowGranule(tl.Layer, n); g != rows || tl.Layout.PanelRows() != rows {
					t.Fatalf("%s: row granule %d, panels of %d, want %d", what, g, tl.Layout.PanelRows(), rows)
				}
				checkExact(t, what, runSplit(t, k, tl.Layer, x, n), want, tl.Spec.Out)
				for _, workers := range []int{2, 3, 16} {
					what := fmt.Sprintf("%s, %d workers", what, workers)
					out, parted := runPanelSplit(t, what, k, tl.Layer, x, n, workers)
					checkExact(t, what, out, want, tl.Spec.Out)
					wantParts := panelSplitLoss(tl.Layout, workers) > panelPartLoss && (n <= k.ops.gemvT || tl.Layout.Panels() < workers)
					if parted != wantParts {
						t.Errorf("%s: in parts %t, want %t", what, parted, wantParts)
					}
					if workers == 2 && parted != (tl.Spec.Out == 4100 && n <= k.ops.gemvT) || workers == 3 && tl.Spec.Out == 2400 && !parted || workers == 16 && !parted {
						t.Errorf("%s: in parts %t", what, parted)
					}
				}
				ran++
			})
		}
	}
	if ran == 0 {
		t.Skip("no tl2 assembly kernel on this CPU")
	}
	// prefill: the GEMM unpacks each row block's stream gathered from its panel (unpackRB)
	if raceEnabled {
		return
	}
	SwitchTuning(TuningDefault)
	for _, k := range asmKernels() {
		if k.format != quantcfg.TL2 {
			continue
		}
		n := gemmMinN
		eachShape(t, k.Name(), k, k.format, rng, [][2]int{{4096, 4080}}, 1, []int{n}, func(what string, tl testLayer, x []float32, n int, want []float32) {
			if !k.useGemm(tl.Layer, n) || k.RowGranule(tl.Layer, n) != 1 {
				t.Fatalf("%s: not the GEMM (row granule %d)", what, k.RowGranule(tl.Layer, n))
			}
			checkExact(t, what, runSplit(t, k, tl.Layer, x, n), want, tl.Spec.Out)
			out, _ := runPanelSplit(t, what, k, tl.Layer, x, n, 3) // (3 workers: ranges within panels)
			checkExact(t, what+", 3 workers", out, want, tl.Spec.Out)
		})
	}
}

// runPanelSplit runs a call of k through RunSplit over workers goroutines (even ranges),
// the splitter checking that its units are the layer's panels, or its units in parts
// (panelUnits) and then its row blocks; parted tells which.
func runPanelSplit(t *testing.T, what string, k *simdKernel, l *Layer, x []float32, n, workers int) (out []float32, parted bool) {
	t.Helper()
	var a Acts
	if err := l.Quantize(x, n, &a); err != nil {
		t.Fatal(err)
	}
	k.Prepare(l, &a)
	out = make([]float32, n*l.Layout.M)
	mrb := l.Layout.RowBlocks()
	_, inParts := panelUnits(l.Layout)
	var bad []string
	split := func(class string, units int, _ bool, fn func(w, lo, hi int)) {
		g := k.RowGranule(l, n) // whole panels, but for the GEMM
		want := (mrb + g - 1) / g
		switch {
		case strings.HasSuffix(class, "/parts"):
			want, parted = inParts, true
		case strings.HasSuffix(class, "/finish"):
			want = mrb
		}
		if units != want {
			bad = append(bad, fmt.Sprintf("%s: split %q of %d units, want %d", what, class, units, want))
		}
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() { fn(w, units*w/workers, units*(w+1)/workers) })
		}
		wg.Wait()
	}
	RunSplit(k, l, &a, out, workers, split)
	for _, b := range bad {
		t.Error(b)
	}
	return out, parted
}

// TestTL2PanelParts: a panel-major call in parts (every call, panelPartLoss 0) gives the
// reference's results for any cut of its units among the workers (runParts: ranges within
// a panel, across panels, its tails alone, single units), by the tl2 assembly kernels and
// the generic twin, with and without a tl1 tail, for one kernel pass of tokens and for
// more than one sweep's (lutSweepTokens, on workers that outnumber the panels); panelUnits
// and unitSegs agree with the blob's offsets.
func TestTL2PanelParts(t *testing.T) {
	old := panelPartLoss
	panelPartLoss = 0
	t.Cleanup(func() { panelPartLoss = old })
	rng := rand.New(rand.NewPCG(43, 43))
	shapes := [][2]int{{4100, 4100}, {4096, 4080}}
	ns := []int{1, 2, 3, 4, 6, 9}
	if raceEnabled {
		shapes, ns = shapes[:1], []int{1, 9}
	}
	ks := []namedKernel{{"generic/tl2", newSIMDKernel(ISAAVX512, quantcfg.TL2, genericOps(quantcfg.TL2, true), false)}}
	for _, k := range asmKernels() {
		if k.format == quantcfg.TL2 {
			ks = append(ks, namedKernel{k.Name(), k})
		}
	}
	for _, k := range ks {
		var a Acts
		eachShape(t, k.name, k.simdKernel, k.format, rng, shapes, 1, ns, func(what string, tl testLayer, x []float32, n int, want []float32) {
			ws := []int{2, 5}
			if n > k.ops.gemvT {
				ws = []int{8} // (more than the four and five panels)
			}
			for _, workers := range ws {
				for _, conc := range []bool{false, true} {
					what := fmt.Sprintf("%s, %d workers (concurrent: %t)", what, workers, conc)
					checkExact(t, what, runParts(t, rng, k, &a, tl.Layer, x, n, workers, conc), want, tl.Spec.Out)
				}
			}
		})
	}
	// The segments of unit ranges: a panel's blocks, its tails, and the next panel's.
	for _, sh := range [][2]int{{4100, 4100}, {4096, 4080}} {
		ly, err := NewLayout(quantcfg.TL2, sh[0], sh[1])
		if err != nil || !ly.Paneled() {
			t.Fatalf("%dx%d: %v, panel-major %t", sh[0], sh[1], err, ly.Paneled())
		}
		per, units := panelUnits(ly)
		nb := ly.K3 / TL2Block
		if wantPer := nb + min(ly.Kp1, 1); per != wantPer || units != ly.RowBlocks()*per {
			t.Errorf("%dx%d: panelUnits %d, %d", sh[0], sh[1], per, units)
		}
		// every unit's bytes, in order, are the blob's
		at := 0
		for u := 0; u < units; u++ {
			sg := unitSegs(ly, u, u+1, nil)
			if len(sg) != 1 || sg[0].r1 != sg[0].r0+1 || sg[0].b1-sg[0].b0 != int(b2i(!sg[0].tail)) {
				t.Fatalf("%dx%d: unit %d: segments %+v", sh[0], sh[1], u, sg)
			}
			s := sg[0]
			off, size := ly.TailAt(s.r0), 8*ly.Kp1
			if !s.tail {
				off, _ = ly.BlockAt(s.r0, s.b0)
				size = 320
			}
			if off != at {
				t.Fatalf("%dx%d: unit %d at %d (%+v), want %d", sh[0], sh[1], u, off, s, at)
			}
			at += size
		}
		if at != ly.Bytes() {
			t.Errorf("%dx%d: the units cover %d bytes of %d", sh[0], sh[1], at, ly.Bytes())
		}
	}
	// Ranges of units over parts of blocks, whole blocks, tails and panels: 4096 x 4080
	// (four panels of 32 row blocks, 85 blocks, no tails: 2720 units a panel) and 4100 x
	// 4100 (85 blocks and tails: 86 units a row block; a last panel of one row block).
	for _, c := range []struct {
		m, k, u0, u1 int
		want         []panelSeg
	}{
		{4096, 4080, 3, 2720 + 32 + 5, []panelSeg{{3, 32, 0, 1, false}, {0, 32, 1, 85, false}, {32, 64, 0, 1, false}, {32, 37, 1, 2, false}}},
		{4096, 4080, 40, 50, []panelSeg{{8, 18, 1, 2, false}}},
		{4100, 4100, 2720 - 2, 2752 + 40, []panelSeg{{30, 32, 84, 85, false}, {0, 32, 85, 85, true}, {32, 64, 0, 1, false}, {32, 40, 1, 2, false}}},
		{4100, 4100, 2720 + 3, 2720 + 9, []panelSeg{{3, 9, 85, 85, true}}},
		{4100, 4100, 0, 2752, []panelSeg{{0, 32, 0, 85, true}}},
		{4100, 4100, 2752 - 40, 2752 + 2752 + 86, []panelSeg{{24, 32, 84, 85, false}, {0, 32, 85, 85, true}, {32, 64, 0, 85, true}, {64, 96, 0, 2, false}, {64, 86, 2, 3, false}}},
		{4100, 4100, 4 * 2752, 4*2752 + 86, []panelSeg{{128, 129, 0, 85, true}}},
	} {
		ly, err := NewLayout(quantcfg.TL2, c.m, c.k)
		if err != nil {
			t.Fatal(err)
		}
		if got := unitSegs(ly, c.u0, c.u1, nil); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%dx%d: unitSegs(%d, %d) = %v, want %v", c.m, c.k, c.u0, c.u1, got, c.want)
		}
	}
}
