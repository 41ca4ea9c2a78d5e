package kernels

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"bitgo/quantcfg"
)

// namedKernel is a kernel with a name that tells generic twins apart.
type namedKernel struct {
	name string
	*simdKernel
}

// lutKernels are the tl1/tl2 kernels this CPU runs and their generic twins (both layouts).
func lutKernels() []namedKernel {
	var ks []namedKernel
	for _, k := range asmKernels() {
		if k.ops.lut[1] != nil {
			ks = append(ks, namedKernel{k.Name(), k})
		}
	}
	for _, f := range []quantcfg.Format{quantcfg.TL1, quantcfg.TL2} {
		for _, z := range []bool{true, false} {
			ks = append(ks, namedKernel{fmt.Sprintf("generic/%s (zmm layouts: %t)", f, z), newSIMDKernel(ISAAVX512, f, genericOps(f, z), false)})
		}
	}
	return ks
}

// int1Kernels are the int1 kernels this CPU runs and the generic twin.
func int1Kernels() []namedKernel {
	var ks []namedKernel
	for _, k := range asmKernels() {
		if k.ops.int1Panel[1] != nil {
			ks = append(ks, namedKernel{k.Name(), k})
		}
	}
	return append(ks, namedKernel{"generic/int1", newSIMDKernel(ISAAVX512, quantcfg.Int1, genericOps(quantcfg.Int1, true), false)})
}

// smallParts lets every blob run in parts for the test's duration.
func smallParts(t *testing.T) {
	old, old1 := partMinBytes, int1PartMinSaved
	partMinBytes, int1PartMinSaved = 0, 0
	t.Cleanup(func() { partMinBytes, int1PartMinSaved = old, old1 })
}

// nearPairs lets runTwo pair row blocks at any distance (twoMinDist) for the rest of the
// test, so that the small shapes of the tests run its kernel.
func nearPairs(t *testing.T) {
	old := twoMinDist
	twoMinDist = 0
	t.Cleanup(func() { twoMinDist = old })
}

// runParts runs a call of k in parts: units cut at random into ranges (single units
// among them), each given to a random worker (one of them gets none; a worker may get
// ranges far apart, as a stealing runner's would be), the workers concurrently when conc;
// then Finish over random row-block ranges. a is kept from call to call, as the engine
// keeps it.
func runParts(t *testing.T, rng *rand.Rand, k namedKernel, a *Acts, l *Layer, x []float32, n, workers int, conc bool) []float32 {
	t.Helper()
	if err := l.Quantize(x, n, a); err != nil {
		t.Fatal(err)
	}
	k.Prepare(l, a)
	units := k.Units(l, a, workers)
	want := l.Layout.Chunks() * l.Layout.RowBlocks()
	if l.Layout.panelMajor() {
		_, want = panelUnits(l.Layout)
	}
	if units != want {
		t.Fatalf("%s: Units = %d, want %d", k.name, units, want)
	}
	idle := rng.IntN(workers)
	ranges := make([][][2]int, workers)
	for u0 := 0; u0 < units; {
		u1 := min(units, u0+1+rng.IntN(max(1, units/3)))
		if rng.IntN(4) == 0 {
			u1 = u0 + 1
		}
		w := rng.IntN(workers)
		if w == idle {
			w = (w + 1) % workers
		}
		ranges[w] = append(ranges[w], [2]int{u0, u1})
		u0 = u1
	}
	for w := range ranges { // not in the units' order
		rng.Shuffle(len(ranges[w]), func(i, j int) { ranges[w][i], ranges[w][j] = ranges[w][j], ranges[w][i] })
	}
	var wg sync.WaitGroup
	for w, rs := range ranges {
		run := func() {
			for _, r := range rs {
				k.RunUnits(l, a, w, r[0], r[1])
			}
		}
		if conc {
			wg.Go(run)
		} else {
			run()
		}
	}
	wg.Wait()
	m, nrb := l.Layout.M, l.Layout.RowBlocks()
	out := make([]float32, n*m)
	for rb := 0; rb < nrb; {
		rb1 := min(nrb, rb+1+rng.IntN(3))
		k.Finish(l, a, rb, rb1, out)
		rb = rb1
	}
	return out
}

// TestLUTKernelsInParts: tl1 and tl2 run in parts of their blob (Parted) give the
// reference's results, on K of several chunks ending with a tail (tl2) or a short chunk
// (tl1), for any cut of the units among the workers and any order of a worker's ranges.
func TestLUTKernelsInParts(t *testing.T) {
	smallParts(t)
	rng := rand.New(rand.NewPCG(11, 12))
	shapes := [][2]int{{70, 1203}, {33, 26 * TL2Block}, {200, 4817}, {32, 40*TL2Block + 44}}
	ns := []int{1, 2, 3, 4} // (Units takes up to gemvT tokens)
	if raceEnabled {
		shapes, ns = shapes[:2], []int{1, 3}
	}
	for _, k := range lutKernels() {
		var a Acts
		eachShape(t, k.name, k.simdKernel, k.format, rng, shapes, 2, ns, func(what string, tl testLayer, x []float32, n int, want []float32) {
			if n > k.ops.gemvT {
				return
			}
			for _, workers := range []int{2, 3} {
				if tl.Layer.Layout.Chunks() < workers {
					continue
				}
				for _, conc := range []bool{false, true} {
					what := fmt.Sprintf("%s, %d workers (concurrent: %t)", what, workers, conc)
					checkExact(t, what, runParts(t, rng, k, &a, tl.Layer, x, n, workers, conc), want, tl.Spec.Out)
				}
			}
		})
	}
}

// TestInt1InParts: int1 run in parts (Parted) gives the reference's results on blobs of two
// and four panels shared out among more workers than they split evenly among, with groups of
// weights and of activations, for any cut of the units among the workers (single units,
// parts of a block, whole panels), any order of a worker's ranges, and more tokens than one
// kernel pass takes.
func TestInt1InParts(t *testing.T) {
	smallParts(t)
	rng := rand.New(rand.NewPCG(21, 22))
	shapes := [][2]int{{100, 300}, {1100, 300}, {3880, 200}}
	ns, settings := []int{1, 2, 4, 5, 7}, 9
	if raceEnabled {
		shapes, ns, settings = shapes[1:2], []int{1, 5}, 3
	}
	for _, k := range int1Kernels() {
		var a Acts
		eachShape(t, k.name, k.simdKernel, quantcfg.Int1, rng, shapes, settings, ns, func(what string, tl testLayer, x []float32, n int, want []float32) {
			if k.useGemm(tl.Layer, n) {
				return
			}
			for _, workers := range []int{3, 8} {
				for _, conc := range []bool{false, true} {
					what := fmt.Sprintf("%s, %d workers (concurrent: %t)", what, workers, conc)
					checkExact(t, what, runParts(t, rng, k, &a, tl.Layer, x, n, workers, conc), want, tl.Spec.Out)
				}
			}
		})
	}
}

// FuzzKernelParts: int1, tl1 and tl2 calls in parts (every call that can: no size or
// balance thresholds) give the reference's results for any shape, setting, token count,
// worker count and cut of the units among the workers (runParts), by the assembly kernels
// and the generic twins.
func FuzzKernelParts(f *testing.F) {
	f.Add(uint8(0), uint16(100), uint16(300), uint8(1), uint8(1), uint8(0), uint64(1))
	f.Add(uint8(1), uint16(70), uint16(1203), uint8(3), uint8(0), uint8(1), uint64(2))
	f.Add(uint8(2), uint16(33), uint16(1900), uint8(2), uint8(3), uint8(2), uint64(3))
	f.Add(uint8(0), uint16(599), uint16(77), uint8(8), uint8(5), uint8(7), uint64(4))
	f.Add(uint8(0), uint16(149), uint16(1124), uint8(8), uint8(0), uint8(6), uint64(5)) // int1, groups of weights
	f.Fuzz(func(t *testing.T, fi uint8, m, k uint16, n, w, setting uint8, seed uint64) {
		defer func(a, b, c int, d float64) { partMinBytes, partMaxRun, int1PartMinSaved, panelPartLoss = a, b, c, d }(partMinBytes, partMaxRun, int1PartMinSaved, panelPartLoss)
		partMinBytes, partMaxRun, int1PartMinSaved, panelPartLoss = 0, 1<<40, 0, 0
		format := []quantcfg.Format{quantcfg.Int1, quantcfg.TL1, quantcfg.TL2}[int(fi)%3]
		mm, kk, nn, workers := int(m%600)+1, int(k%2000)+1, int(n%9)+1, int(w%7)+2
		tl, x, rng := fuzzLayer(t, format, mm, kk, nn, setting, seed)
		var want []float32
		ks := lutKernels()
		if format == quantcfg.Int1 {
			ks = int1Kernels()
		}
		for _, k := range ks {
			if k.format != format {
				continue
			}
			var a Acts
			if err := tl.Layer.Quantize(x, nn, &a); err != nil {
				t.Fatal(err)
			}
			k.Prepare(tl.Layer, &a)
			if k.Units(tl.Layer, &a, workers) == 0 {
				continue // (more tokens than a pass on a chunk-major blob, fewer chunks than workers)
			}
			if want == nil {
				var err error
				if want, err = Reference(tl.Layer, x, nn); err != nil {
					t.Fatal(err)
				}
			}
			what := fmt.Sprintf("%s %s %dx%d n=%d, %d workers", k.name, tl.Spec.Act, mm, kk, nn, workers)
			checkExact(t, what, runParts(t, rng, k, &a, tl.Layer, x, nn, workers, seed%4 == 0), want, mm)
		}
	})
}

// TestInt1PanelUnits: int1's units in parts (panelUnits: a row block's block) are the blob's
// 128-byte blocks in the blob's order, each one unit's segment (unitSegs).
func TestInt1PanelUnits(t *testing.T) {
	for _, sh := range [][2]int{{20, 100}, {1100, 300}, {3880, 200}} {
		ly, err := NewLayout(quantcfg.Int1, sh[0], sh[1])
		if err != nil {
			t.Fatal(err)
		}
		per, units := panelUnits(ly)
		if per != ly.Kp/32 || units != ly.RowBlocks()*per || partUnits(ly) != units {
			t.Fatalf("%dx%d: panelUnits %d, %d; partUnits %d", sh[0], sh[1], per, units, partUnits(ly))
		}
		at := 0
		for u := range units {
			sg := unitSegs(ly, u, u+1, nil)
			if len(sg) != 1 || sg[0].r1 != sg[0].r0+1 || sg[0].b1 != sg[0].b0+1 || sg[0].tail {
				t.Fatalf("%dx%d: unit %d: segments %+v", sh[0], sh[1], u, sg)
			}
			if off, _ := ly.BlockAt(sg[0].r0, sg[0].b0); off != at {
				t.Fatalf("%dx%d: unit %d at %d (%+v), want %d", sh[0], sh[1], u, off, sg[0], at)
			}
			at += int1BlockBytes
		}
		if at != ly.Bytes() {
			t.Errorf("%dx%d: the units cover %d bytes of %d", sh[0], sh[1], at, ly.Bytes())
		}
	}
}

// TestInt1UnitsDeclines: an int1 call runs by rows (Units 0) where its panels share out
// evenly (two workers: the panels come in pairs of nearly equal size), on one worker, where
// parts would shorten the largest share by less than int1PartMinSaved, and where the GEMM
// takes the tokens; in parts otherwise.
func TestInt1UnitsDeclines(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	spec := specsFor(quantcfg.Int1)[0]
	spec.Out, spec.In = 3880, 600 // four panels: 31, 31, 31 and 29 row blocks
	tl := newTestLayer(t, rng, spec)
	ly := tl.Layer.Layout
	for _, k := range int1Kernels() {
		units := func(n, workers int) int {
			var a Acts
			if err := tl.Layer.Quantize(randActs(rng, n, tl.Spec.In), n, &a); err != nil {
				t.Fatal(err)
			}
			k.Prepare(tl.Layer, &a)
			return k.Units(tl.Layer, &a, workers)
		}
		_, all := panelUnits(ly)
		old := int1PartMinSaved
		int1PartMinSaved = 0
		for _, c := range []struct {
			n, workers, want int
		}{{1, 1, 0}, {1, 2, 0}, {3, 4, 0}, {1, 3, all}, {4, 3, all}, {1, 5, all}, {1, 8, all}} {
			if u := units(c.n, c.workers); u != c.want {
				t.Errorf("%s: %d token(s) on %d workers: Units = %d, want %d", k.name, c.n, c.workers, u, c.want)
			}
		}
		if k.ops.tileT > 0 {
			if u := units(gemmMinN, 3); u != 0 {
				t.Errorf("%s: %d tokens (the GEMM's) on 3 workers: Units = %d, want 0", k.name, gemmMinN, u)
			}
		}
		saved := int1PartSaved(ly, 3) // 62 row blocks where 40.7 are a third
		if want := float64(ly.Bytes()) * (62.0*3/122 - 1) / 3; saved < want-1e-6 || saved > want+1e-6 {
			t.Errorf("int1PartSaved(3 workers) = %v, want %v", saved, want)
		}
		int1PartMinSaved = int(saved)
		if u := units(1, 3); u != all {
			t.Errorf("%s: int1PartMinSaved at the bytes saved: Units = %d, want %d", k.name, u, all)
		}
		int1PartMinSaved++
		if u := units(1, 3); u != 0 {
			t.Errorf("%s: int1PartMinSaved a byte more than the bytes saved: Units = %d, want 0", k.name, u)
		}
		int1PartMinSaved = old
	}
}

// TestRowSumsCover: a worker's sums keep what they hold, group by group, as they grow to
// cover more row blocks, on either side and across a gap, and start anew when a call starts
// (partSums.start); the row blocks new to them are zero, and partSums.add adds any
// row-block range of them, and says whether any worker holds sums.
func TestRowSumsCover(t *testing.T) {
	widths := []int{2, 3}
	var r rowSums
	want := map[[3]int]int32{} // row block, group, index -> sum
	at := func(sums []int32, rb, g, i int) *int32 {
		off := 0
		for _, wd := range widths[:g] {
			off += wd
		}
		return &sums[(r.hi-r.lo)*off+(rb-r.lo)*widths[g]+i]
	}
	check := func(what string, sums []int32) {
		t.Helper()
		if len(sums) != (r.hi-r.lo)*5 {
			t.Fatalf("%s: %d sums for row blocks [%d, %d)", what, len(sums), r.lo, r.hi)
		}
		for rb := r.lo; rb < r.hi; rb++ {
			for g, wd := range widths {
				for i := range wd {
					if got := *at(sums, rb, g, i); got != want[[3]int{rb, g, i}] {
						t.Errorf("%s: row block %d group %d [%d] = %d, want %d", what, rb, g, i, got, want[[3]int{rb, g, i}])
					}
				}
			}
		}
	}
	fill := func(sums []int32, lo, hi int) {
		for rb := lo; rb < hi; rb++ {
			for g, wd := range widths {
				for i := range wd {
					v := int32(1000*rb + 10*g + i + 1)
					*at(sums, rb, g, i) = v
					want[[3]int{rb, g, i}] = v
				}
			}
		}
	}
	r.buf = make([]int32, 4, 100) // garbage a fresh cover must clear
	for i := range r.buf {
		r.buf[i] = -1
	}
	sums := r.cover(5, 8, widths)
	check("fresh [5, 8)", sums)
	fill(sums, 5, 8)
	for _, c := range [][2]int{{6, 7}, {3, 8}, {3, 10}, {14, 16}, {0, 2}} {
		sums = r.cover(c[0], c[1], widths)
		check(fmt.Sprintf("then [%d, %d)", c[0], c[1]), sums)
		fill(sums, c[0], c[1])
		check(fmt.Sprintf("filled [%d, %d)", c[0], c[1]), sums)
	}
	// Two workers' sums added over [4, 15): the second's hold [12, 20), every sum 7.
	var ps partSums
	ps.start(2)
	ps.rows[0] = r
	for i := range ps.rows[1].cover(12, 20, widths) {
		ps.rows[1].buf[i] = 7
	}
	const rb0, rb1 = 4, 15
	dst := make([]int32, (rb1-rb0)*5)
	if !ps.add(rb0, rb1, widths, dst) {
		t.Fatal("add: no worker ran units")
	}
	for rb := rb0; rb < rb1; rb++ {
		off := 0
		for g, wd := range widths {
			for i := range wd {
				w := want[[3]int{rb, g, i}]
				if rb >= 12 {
					w += 7
				}
				if got := dst[(rb1-rb0)*off+(rb-rb0)*wd+i]; got != w {
					t.Errorf("add: row block %d group %d [%d] = %d, want %d", rb, g, i, got, w)
				}
			}
			off += wd
		}
	}
	ps.start(2) // a new call: no worker holds sums
	if ps.add(rb0, rb1, widths, dst) {
		t.Error("add after start: a worker ran units")
	}
	clear(want)
	r = ps.rows[0]
	sums = r.cover(40, 42, widths)
	check("fresh [40, 42)", sums)
}

// TestUnitsDeclines: a call runs by rows (Units 0) on one worker, with more tokens than a
// GEMV kernel takes, with fewer chunks than workers, on a blob below partMinBytes or whose
// row-split runs are longer than partMaxRun, and for formats that are not chunked.
func TestUnitsDeclines(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	spec := specsFor(quantcfg.TL2)[0]
	spec.Out, spec.In = 256, 4096
	big := newTestLayer(t, rng, spec)
	spec.Out, spec.In = 64, 2*TL2Chunk*TL2Block
	small := newTestLayer(t, rng, spec)
	for _, k := range lutKernels() {
		if k.format != quantcfg.TL2 {
			continue
		}
		units := func(tl testLayer, n, workers int) int {
			var a Acts
			if err := tl.Layer.Quantize(randActs(rng, n, tl.Spec.In), n, &a); err != nil {
				t.Fatal(err)
			}
			k.Prepare(tl.Layer, &a)
			return k.Units(tl.Layer, &a, workers)
		}
		old := partMinBytes
		partMinBytes = big.Layer.Layout.Bytes()
		if u := units(big, 1, 2); u == 0 {
			t.Errorf("%s: 256x4096 at two workers, partMinBytes its size: runs by rows", k.name)
		}
		partMinBytes++
		if u := units(big, 1, 2); u != 0 {
			t.Errorf("%s: 256x4096 at two workers, partMinBytes a byte more than its size: Units = %d, want 0", k.name, u)
		}
		partMinBytes = old
		oldRun := partMaxRun
		partMaxRun = partRun(big.Layer.Layout, 2) - 1
		if u := units(big, 1, 2); u != 0 {
			t.Errorf("%s: 256x4096 at two workers, partMaxRun a byte less than its run: Units = %d, want 0", k.name, u)
		}
		partMaxRun = oldRun
		for _, c := range []struct {
			what       string
			tl         testLayer
			n, workers int
		}{
			{"one worker", big, 1, 1},
			{"more tokens than the GEMV kernels take", big, k.ops.gemvT + 1, 2},
			{"a small blob", small, 1, 2},
		} {
			if u := units(c.tl, c.n, c.workers); u != 0 {
				t.Errorf("%s: %s: Units = %d, want 0", k.name, c.what, u)
			}
		}
	}
	smallParts(t)
	for _, k := range lutKernels() {
		if k.format != quantcfg.TL2 {
			continue
		}
		var a Acts
		if err := small.Layer.Quantize(randActs(rng, 1, small.Spec.In), 1, &a); err != nil {
			t.Fatal(err)
		}
		k.Prepare(small.Layer, &a)
		if u := k.Units(small.Layer, &a, 3); u != 0 {
			t.Errorf("%s: two chunks on three workers: Units = %d, want 0", k.name, u)
		}
	}
	for _, k := range asmKernels() {
		if k.ops.lut[1] != nil || k.format.IsFloat() {
			continue
		}
		spec := specsFor(k.format)[0]
		spec.Out, spec.In = 256, 4096
		tl := newTestLayer(t, rng, spec)
		var a Acts
		if err := tl.Layer.Quantize(randActs(rng, 1, spec.In), 1, &a); err != nil {
			t.Fatal(err)
		}
		k.Prepare(tl.Layer, &a)
		if u := k.Units(tl.Layer, &a, 2); u != 0 {
			t.Errorf("%s: Units = %d, want 0 (not a chunked format)", k.Name(), u)
		}
	}
}

// TestRunSplit: RunSplit runs a lookup-table call in parts, one range per worker (once),
// then the outputs (once too), and so an int1 call of one panel on two workers; any other
// format by rows, letting the runner steal; the results are the reference's. A RunUnits
// call by a worker the call was not prepared for panics naming the kernel.
func TestRunSplit(t *testing.T) {
	smallParts(t)
	nearPairs(t)
	rng := rand.New(rand.NewPCG(5, 6))
	for _, k := range asmKernels() {
		if k.format != quantcfg.TL2 && k.format != quantcfg.I2S && k.format != quantcfg.Int1 {
			continue
		}
		spec := specsFor(k.format)[0]
		spec.Out, spec.In = 100, 40*TL2Block+7
		if k.format == quantcfg.Int1 {
			spec.Out = 20 // one panel
		}
		tl := newTestLayer(t, rng, spec)
		want, a := preparedCall(t, k, tl.Layer, randActs(rng, 1, spec.In), 1)
		var log []string
		split := func(class string, units int, once bool, fn func(w, lo, hi int)) {
			log = append(log, fmt.Sprintf("%s %t", class, once))
			fn(1, units/2, units) // worker 1 first: the order must not matter
			fn(0, 0, units/2)
		}
		out := make([]float32, spec.Out)
		RunSplit(k, tl.Layer, a, out, 2, split)
		checkExact(t, k.Name()+" through RunSplit", out, want, spec.Out)
		wantLog := []string{k.Name() + " false"}
		if k.format != quantcfg.I2S {
			wantLog = []string{k.Name() + "/parts true", k.Name() + "/finish true"}
		}
		if got := strings.Join(log, ", "); got != strings.Join(wantLog, ", ") {
			t.Errorf("%s: splits %q, want %q", k.Name(), got, strings.Join(wantLog, ", "))
		}
		if k.format != quantcfg.I2S {
			func() {
				defer func() {
					if v := recover(); v == nil || !strings.Contains(fmt.Sprint(v), k.Name()) {
						t.Errorf("%s: RunUnits by worker 2 of a call for 2 panicked with %v", k.Name(), v)
					}
				}()
				k.RunUnits(tl.Layer, a, 2, 0, 1)
			}()
		}
	}
}
