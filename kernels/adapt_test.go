package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"bitgo/quantcfg"
)

// resetSites forgets every site's choice and averages, before the test and after it.
func resetSites(t *testing.T) {
	oneSites.Clear()
	t.Cleanup(oneSites.Clear)
}

// TestOneSitePolicy drives a site with made-up times: it starts on the tuning's choice,
// probes the other kernel every adaptProbe pieces and less often (down to every
// adaptProbeMax-th) while the probes do not win, every adaptProbe pieces again after one
// that does; it switches once the other's average is adaptMargin below, or after two
// probes in a row that beat the kept average (where a slow spell left the other's average
// 1.67x high), and does not switch on one outlier either way; pieces under adaptMinBytes
// neither count nor are timed.
func TestOneSitePolicy(t *testing.T) {
	var ranHW bool
	hwFn, ownFn := func(*byte) { ranHW = true }, func(*byte) { ranHW = false }
	isHW := func(f func(*byte)) bool { f(nil); return ranHW }
	// run drives n pieces, each taking ns per KiB by kernel, and returns the pieces that
	// ran the kernel the site did not keep (probes) and how far apart they came.
	run := func(s *adaptState, start bool, n int, hwNs, ownNs float64) (probes []int) {
		for i := 0; i < n; i++ {
			f, r := s.pick(hwFn, ownFn, start, adaptMinBytes)
			if r.probe {
				probes = append(probes, i)
			}
			if isHW(f) != (r.hw == 1) {
				t.Fatalf("piece %d: pick returned the other kernel than it records (hw %d)", i, r.hw)
			}
			if (r.site != nil) != (r.probe || s.pieces.Load()%adaptSample == 0) {
				t.Fatalf("piece %d (%d counted): timed %v, probe %v", i, s.pieces.Load(), r.site != nil, r.probe)
			}
			x := ownNs
			if r.hw == 1 {
				x = hwNs
			}
			if r.site != nil {
				s.record(r.hw, r.probe, x)
			}
		}
		return probes
	}
	for _, start := range []bool{true, false} {
		s := newOneSite().at(1)
		if f, _ := s.pick(hwFn, ownFn, start, 0); isHW(f) != start || s.hw.Load() != b2i(start) {
			t.Fatalf("start %v: the first piece ran hw %v", start, isHW(f))
		}
	}

	site := newOneSite()
	if site.at(0) != site.at(1) || site.at(2) == site.at(1) || site.at(9) != site.at(adaptWorkers) {
		t.Fatal("a site's states by worker count: Run alone is one worker, four and more share one")
	}
	s := site.at(2)
	// hw much faster: the probes of own lose and back off to every adaptProbeMax-th piece
	probes := run(s, true, 2000, 40, 60)
	if s.hw.Load() != 1 || s.switches.Load() != 0 {
		t.Fatalf("hw 40 ns/KiB against 60: kept hw %d after %d switches", s.hw.Load(), s.switches.Load())
	}
	if len(probes) < 4 || probes[0] != adaptProbe-1 || probes[len(probes)-1]-probes[len(probes)-2] != adaptProbeMax {
		t.Fatalf("probes at %v, want the first after %d pieces and the last ones %d apart", probes, adaptProbe, adaptProbeMax)
	}
	if got := math.Float64frombits(s.rate[0].Load()); math.Abs(got-60) > 1e-9 {
		t.Fatalf("own's average %v, want 60", got)
	}
	// own turns faster: the next probe finds it and the site switches within a few probes
	probes = run(s, true, 3*adaptProbeMax, 40, 30)
	if s.hw.Load() != 0 || s.switches.Load() != 1 {
		t.Fatalf("own 30 ns/KiB against 40: kept hw %d after %d switches", s.hw.Load(), s.switches.Load())
	}
	if len(probes) == 0 || probes[0] >= adaptProbeMax {
		t.Fatalf("probes at %v after own turned faster", probes)
	}
	// now hw is probed, loses by 25%, and the probes back off again
	run(s, true, 2000, 40, 30)
	if s.hw.Load() != 0 || s.every.Load() != adaptProbeMax {
		t.Fatalf("kept hw %d, probing every %d pieces, want own and %d", s.hw.Load(), s.every.Load(), adaptProbeMax)
	}
	// within adaptMargin of each other: no switch either way
	before := s.switches.Load()
	run(s, true, 1000, 30.5, 30)
	if s.switches.Load() != before {
		t.Fatalf("kernels 1.7%% apart: %d switches", s.switches.Load()-before)
	}
	if s.every.Load() != adaptProbeMax {
		t.Fatalf("probes not winning: every %d pieces, want %d", s.every.Load(), adaptProbeMax)
	}
	// a probe that wins brings the next ones close
	s.since.Store(s.every.Load())
	if _, r := s.pick(hwFn, ownFn, true, adaptMinBytes); !r.probe || r.hw != 1 {
		t.Fatalf("forced probe: %+v", r)
	} else {
		s.record(r.hw, r.probe, 25)
	}
	if s.every.Load() != adaptProbe {
		t.Fatalf("after a winning probe: every %d pieces, want %d", s.every.Load(), adaptProbe)
	}

	// outliers: one probe 40x faster and one kept piece 3x slower switch nothing (each is
	// clipped to adaptClip of its average), while the same times for good do
	s = newOneSite().at(1)
	run(s, true, 200, 40, 60)
	s.since.Store(s.every.Load()) // the next piece of adaptMinBytes probes; a smaller one neither probes nor counts
	pieces := s.pieces.Load()
	if f, r := s.pick(hwFn, ownFn, true, adaptMinBytes-1); r.probe || r.site != nil || !isHW(f) || s.pieces.Load() != pieces {
		t.Fatalf("a piece under adaptMinBytes: probe %v, timed %v, hw %v, counted %d", r.probe, r.site != nil, isHW(f), s.pieces.Load()-pieces)
	}
	_, r := s.pick(hwFn, ownFn, true, adaptMinBytes)
	if !r.probe || r.hw != 0 {
		t.Fatalf("forced probe: %+v", r)
	}
	s.record(r.hw, r.probe, 1) // own at 1 ns/KiB once
	s.record(1, false, 3*40)   // hw at 120 once
	if s.hw.Load() != 1 || s.switches.Load() != 0 {
		t.Fatalf("after one outlier each way: kept hw %d after %d switches", s.hw.Load(), s.switches.Load())
	}
	run(s, true, 40*adaptSample, 120, 60) // hw slower for good: the site moves to own
	if s.hw.Load() != 0 || s.switches.Load() != 1 {
		t.Fatalf("hw at 120 ns/KiB for good against 60: kept hw %d after %d switches", s.hw.Load(), s.switches.Load())
	}

	// a slow spell over: own kept at 46 ns/KiB, hw's average left at 60 where it now runs
	// at 36; the second winning probe in a row takes the site back to hw (the clipped
	// averages alone would take three)
	s = newOneSite().at(1)
	run(s, false, adaptProbe-1, 0, 46)
	s.record(1, true, 60)
	s.every.Store(adaptProbe)
	probes = run(s, false, 2*adaptProbe, 36, 46)
	if len(probes) != 2 || s.hw.Load() != 1 || s.switches.Load() != 1 {
		t.Fatalf("hw at 36 ns/KiB, its average at 60, own at 46: after probes %v kept hw %d after %d switches", probes, s.hw.Load(), s.switches.Load())
	}

	// wins that are not in a row switch nothing
	s = newOneSite().at(1)
	run(s, false, adaptProbe-1, 0, 46)
	for _, x := range []float64{60, 36, 50, 36} {
		s.record(1, true, x)
	}
	if s.hw.Load() != 0 || s.switches.Load() != 0 {
		t.Fatalf("hw probes at 60, 36, 50, 36 ns/KiB against own at 46: kept hw %d after %d switches", s.hw.Load(), s.switches.Load())
	}
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// TestAdaptiveKernels: under an adaptive tuning the one-token GEMVs with two kernels (i2s
// below i2sLongK, tl2, bf16, f32, on the AVX-512 path) start on the tuning's choice, run the
// other one in their probes, and give the reference's outputs bit for bit from both, in
// row ranges and (tl2) in parts of a call; the one-token GEMVs with no pair (i2s on a long K,
// int1) run the tuning's kernel alone and keep no site.
func TestAdaptiveKernels(t *testing.T) {
	var ks []*simdKernel
	for _, k := range asmKernels() {
		if k.isa == ISAAVX512 && k.ops.oneTuned != nil {
			ks = append(ks, k)
		}
	}
	if len(ks) == 0 {
		t.Skip("no AVX-512 kernel runs here")
	}
	smallParts(t)
	resetSites(t)
	defer func(b int) { adaptMinBytes = b }(adaptMinBytes)
	adaptMinBytes = 0 // (every piece counts)
	defer SwitchTuning(currentTuning())
	rng := rand.New(rand.NewPCG(5, 5))
	for _, tn := range []Tuning{TuningZen4 | TuningAdapt, TuningDefault | TuningAdapt} {
		SwitchTuning(tn)
		for _, k := range ks {
			name := tn.String() + "/" + k.Name()
			ran := map[string]int{}
			count := counter(ran)
			o := *k.ops
			own := "own"
			o.gemv[1], o.float[1], o.lut[1] = count(own, o.gemv[1]), count(own, o.float[1]), count(own, o.lut[1])
			o.gemvLong1, o.gemvRow1, o.oneTuned = count("long", o.gemvLong1), count("long", o.gemvRow1), count("tuned", o.oneTuned)
			if o.gemvTuned != nil { // (i2s under zen4: gemvFor's table)
				tuned := *o.gemvTuned
				tuned[1] = count(own, tuned[1])
				o.gemvTuned = &tuned
			}
			kk := newSIMDKernel(k.isa, k.format, &o, k.int8vnni)
			kk.name = k.name
			first := own
			if tn.tunedOne() {
				first = "tuned"
			}
			shape := [2]int{37, 2560}
			if k.format == quantcfg.TL2 {
				shape = [2]int{37, 26 * TL2Block}
			}
			switch k.format {
			case quantcfg.Int1:
				// no pair: the tuning's kernel only, and no site
				eachShape(t, name, kk, k.format, rng, [][2]int{shape}, 1, []int{1}, func(what string, tl testLayer, x []float32, n int, want []float32) {
					for range 2 * adaptProbe {
						checkExact(t, what, runSplit(t, kk, tl.Layer, x, 1), want, tl.Spec.Out)
					}
					if tl.Layer.simdPrep().site != nil {
						t.Errorf("%s: a site for a format with one kernel", what)
					}
				})
				if ran[own] > 0 && ran["tuned"] > 0 {
					t.Errorf("%s: ran %v, want one of the two kernels", name, ran)
				}
				continue
			}
			oneSites.Clear()
			eachShape(t, name, kk, k.format, rng, [][2]int{shape}, 1, []int{1}, func(what string, tl testLayer, x []float32, n int, want []float32) {
				clear(ran)
				checkExact(t, what, runSplit(t, kk, tl.Layer, x, 1), want, tl.Spec.Out)
				if len(ran) != 1 || ran[first] == 0 {
					t.Errorf("%s: the first call ran %v, want %s (the tuning's)", what, ran, first)
				}
				for range 2 * adaptProbe {
					checkExact(t, what, runSplit(t, kk, tl.Layer, x, 1), want, tl.Spec.Out)
				}
				if ran[own] == 0 || ran["tuned"] == 0 || ran["long"] != 0 {
					t.Errorf("%s: %d calls ran %v, want both kernels", what, 2*adaptProbe+1, ran)
				}
				site := tl.Layer.simdPrep().site
				if site == nil {
					t.Fatalf("%s: no site", what)
				}
				if s := site.at(1); s.pieces.Load() == 0 || s.rate[0].Load() == 0 || s.rate[1].Load() == 0 {
					t.Fatalf("%s: site %+v, want pieces and both kernels' averages", what, s)
				}
				// calls split over two workers keep their own state
				if s := site.at(2); s.pieces.Load() != 0 {
					t.Fatalf("%s: pieces of two-worker calls before any ran", what)
				}
				var a Acts
				if err := tl.Layer.Quantize(x, 1, &a); err != nil {
					t.Fatal(err)
				}
				out := make([]float32, tl.Spec.Out)
				for range 2 * adaptProbe {
					kk.Prepare(tl.Layer, &a)
					RunSplit(kk, tl.Layer, &a, out, 2, func(_ string, units int, _ bool, fn func(w, lo, hi int)) {
						fn(0, 0, units/2)
						fn(1, units/2, units)
					})
					checkExact(t, what+", two workers", out, want, tl.Spec.Out)
				}
				if s := site.at(2); s.pieces.Load() == 0 || s.hw.Load() < 0 {
					t.Fatalf("%s: two-worker calls kept no state (%+v)", what, s)
				}
				if k.format == quantcfg.TL2 { // in parts of the call (Units, RunUnits, Finish)
					clear(ran)
					var a Acts
					for range 2 * adaptProbe {
						checkExact(t, what+", in parts", runParts(t, rng, namedKernel{name, kk}, &a, tl.Layer, x, 1, 2, false), want, tl.Spec.Out)
					}
					if ran[own] == 0 || ran["tuned"] == 0 {
						t.Errorf("%s: in parts ran %v, want both kernels", what, ran)
					}
				}
			})
			if k.format == quantcfg.I2S { // a long K: the long kernels alone, no site
				clear(ran)
				eachShape(t, name, kk, k.format, rng, [][2]int{{37, i2sLongK + 1}}, 1, []int{1}, func(what string, tl testLayer, x []float32, n int, want []float32) {
					for range 2 * adaptProbe {
						checkExact(t, what, runSplit(t, kk, tl.Layer, x, 1), want, tl.Spec.Out)
					}
					if tl.Layer.simdPrep().site != nil {
						t.Errorf("%s: a site for a long K", what)
					}
				})
				if len(ran) != 1 || ran["long"] == 0 {
					t.Errorf("%s: a long K ran %v, want the long-K kernel only", name, ran)
				}
			}
		}
	}
}
