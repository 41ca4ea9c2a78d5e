package kernels

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"bitgo/quantcfg"
)

func TestParseTuning(t *testing.T) {
	var names []string
	for _, flag := range []Tuning{0, TuningAdapt} {
		for i := Tuning(0); i < numTunings; i++ {
			tn := i | flag
			got, err := ParseTuning(" " + strings.ToUpper(tn.String()) + " ")
			if err != nil || got != tn || tn.Adaptive() != (flag != 0) || tn.base() != i {
				t.Errorf("ParseTuning(%q) = %v, %v", tn.String(), got, err)
			}
			names = append(names, tn.String())
		}
	}
	if !slices.Equal(TuningNames(), names) || !slices.Contains(names, "zen4+adapt") {
		t.Errorf("TuningNames() = %q, want %q", TuningNames(), names)
	}
	for _, bad := range []string{"zen5", "+adapt", "zen4+adapt+adapt", "zen4+", "adapt"} {
		if tn, err := ParseTuning(bad); err == nil {
			t.Errorf("ParseTuning(%q) = %v, want an error", bad, tn)
		}
	}
	if s := (numTunings | TuningAdapt).String(); !strings.HasPrefix(s, "tuning(") {
		t.Errorf("an unknown tuning prints as %q", s)
	}
	if c := TuningZen3.Changes(); len(c) != 2 || !strings.Contains(c[0], "into L1 only") || !strings.Contains(c[1], "two row blocks at once") {
		t.Errorf("Changes: zen3 %q", TuningZen3.Changes())
	}
	if TuningDefault.Changes() != nil || len(TuningZen4.Changes()) != 5 || len((TuningZen4|TuningAdapt).Changes()) != 6 || len((TuningDefault|TuningAdapt).Changes()) != 1 {
		t.Errorf("Changes: default %q, zen4 %q, zen4+adapt %q", TuningDefault.Changes(), TuningZen4.Changes(), (TuningZen4 | TuningAdapt).Changes())
	} else if first := (TuningZen4 | TuningAdapt).Changes()[0]; !strings.Contains(first, "GEMVs start without software prefetch") || strings.Contains(TuningZen4.Changes()[0], "start") {
		t.Errorf("Changes: zen4+adapt's kernels only start without software prefetch, zen4's run so: %q, %q", first, TuningZen4.Changes()[0])
	}
}

// TestTunings: under each tuning, the one-token kernels it picks (gemvOne for i2s, the
// float kernel for bf16 and f32, the lookup or multiplying kernel for tl1, tl2's with the
// default's prefetch or Zen 4's; on the AVX2 paths zen3's L1 kernels of i2s, int8, int1 and
// the float pairs, fmtOps.l1), i2s's two- to four-token kernels, int2's two-token one
// (gemvFor) and tl2's (fmtOps.lutTuned, which under zen4 also runs three and four tokens in
// passes of two) are the ones that run, and every kernel of those formats gives the
// reference's outputs bit for bit, over ragged shapes, a K just below and at i2sLongK, a
// long one, one beyond i2sPartBytes (parts of K for the row kernels), and activation groups
// (segments), at one to five tokens.
func TestTunings(t *testing.T) {
	var ks []*simdKernel
	for _, k := range asmKernels() {
		switch k.format {
		case quantcfg.I2S, quantcfg.Int2, quantcfg.Int1, quantcfg.TL1, quantcfg.TL2, quantcfg.BF16, quantcfg.F32, quantcfg.Int8:
			ks = append(ks, k)
		}
	}
	if ISAAvailable(ISAAVX512) {
		for _, f := range []quantcfg.Format{quantcfg.I2S, quantcfg.BF16} {
			k := newSIMDKernel(ISAAVX512, f, genericOps(f, true), false)
			k.name = "generic/" + string(f)
			ks = append(ks, k)
		}
	}
	if len(ks) == 0 {
		t.Skip("no assembly kernel runs here")
	}
	smallParts(t) // (runParts: any blob runs in parts)
	nearPairs(t)  // (runTwo: the small shapes' row blocks in pairs)
	defer SwitchTuning(currentTuning())
	for tn := Tuning(0); tn < numTunings; tn++ {
		SwitchTuning(tn)
		zen4, zen3 := tn == TuningZen4, tn == TuningZen3
		rng := rand.New(rand.NewPCG(uint64(tn), 77))
		for _, k := range ks {
			name := tn.String() + "/" + k.Name()
			// the same kernel with each one-token function counted as it runs
			ran := map[string]int{}
			count := counter(ran)
			o := *k.ops
			o.gemv[1], o.float[1], o.lut[1] = count("gemv", o.gemv[1]), count("float", o.float[1]), count("lut", o.lut[1])
			o.gemvLong1, o.gemvRow1 = count("long", o.gemvLong1), count("row", o.gemvRow1)
			o.oneTuned, o.lutOne = count("tuned", o.oneTuned), count("lookup", o.lutOne)
			o.int1Panel[1], o.floatPair = count("gemv", o.int1Panel[1]), count("pair", o.floatPair)
			o.l1.gemv1, o.l1.int1Panel1, o.l1.floatPair = count("l1", o.l1.gemv1), count("l1", o.l1.int1Panel1), count("l1pair", o.l1.floatPair)
			o.l1.two1 = count("l1two", o.l1.two1)
			o.gemvSeq[1] = count("gemv", o.gemvSeq[1]) // (int2's consecutive code books)
			// the kernels of two to four tokens, untuned and tuned (gemvFor's tables)
			few := func(tab *[maxGemvT + 1]func(*byte), what string) {
				for n := 2; n <= 4; n++ {
					tab[n] = count(fmt.Sprintf("%s%d", what, n), tab[n])
				}
			}
			few(&o.gemv, "gemv")
			few(&o.gemvSeq, "gemv")
			few(&o.lut, "gemv")
			for _, tp := range []**[maxGemvT + 1]func(*byte){&o.gemvTuned, &o.gemvSeqTuned, &o.lutTuned} {
				if *tp != nil {
					tuned := **tp
					few(&tuned, "tuned")
					*tp = &tuned
				}
			}
			if o.lutTuned != nil { // (tl2: the one-token pass of three tokens, lutTunedT)
				o.lutTuned[1] = count("lut", o.lutTuned[1])
			}
			kk := newSIMDKernel(k.isa, k.format, &o, k.int8vnni)
			kk.name = k.name
			wants := map[int]string{} // by K: which one-token kernel runs
			switch {
			case k.format == quantcfg.I2S && k.isa == ISAAVX512:
				wants = map[int]string{2560: "gemv", i2sLongK - 200: "gemv", i2sLongK + 1: "long", 33000: "long"}
				if zen4 {
					wants = map[int]string{2560: "tuned", i2sLongK - 200: "tuned", i2sLongK + 1: "row", 33000: "row"}
				}
			case k.format.IsFloat() && k.isa == ISAAVX512:
				wants = map[int]string{300: "float", 4100: "float"}
				if zen4 {
					wants = map[int]string{300: "tuned", 4100: "tuned"}
				}
			case k.format == quantcfg.TL2 && k.isa == ISAAVX512:
				wants = map[int]string{300: "lut", 4100: "lut"}
				if zen4 {
					wants = map[int]string{300: "tuned", 4100: "tuned"}
				}
			case k.format == quantcfg.TL1 && k.ops.lutOne != nil:
				wants = map[int]string{300: "lookup", 4100: "lookup"}
				if zen4 {
					wants = map[int]string{300: "lut", 4100: "lut"}
				}
			}
			if k.ops.l1.gemv1 != nil || k.ops.l1.int1Panel1 != nil { // (zen3: the AVX2 paths)
				wants = map[int]string{300: "gemv", 4100: "gemv"}
				if zen3 {
					wants = map[int]string{300: "l1", 4100: "l1"}
				}
			}
			for kp, want := range wants {
				clear(ran)
				checkShapes(t, name, kk, rng, [][2]int{{40, kp}}, 1, []int{1}, false)
				if len(ran) != 1 || ran[want] == 0 {
					t.Errorf("%s: K %d: one token ran %v, want %s only", name, kp, ran, want)
				}
			}
			single := "gemv" // the one-token kernel of a row block alone, under zen3
			if k.ops.l1.gemv1 != nil {
				single = "l1"
			}
			if k.ops.l1.floatPair != nil || k.ops.l1.two1 != nil { // three row blocks: a pair and one more
				want := []string{"float", "pair"}
				switch {
				case k.ops.l1.two1 != nil && zen3:
					want = []string{single, "l1two"}
				case k.ops.l1.two1 != nil:
					want = []string{"gemv"}
				case zen3:
					want = []string{"float", "l1pair"}
				}
				clear(ran)
				checkShapes(t, name, kk, rng, [][2]int{{3 * RowBlock, 300}}, 1, []int{1}, false)
				if got := slices.Sorted(maps.Keys(ran)); !slices.Equal(got, want) {
					t.Errorf("%s: one token over three row blocks ran %v, want %v", name, ran, want)
				}
			}
			if k.ops.l1.two1 != nil && zen3 { // row blocks closer than twoMinDist: one at a time
				twoMinDist = 64 << 10
				clear(ran)
				checkShapes(t, name, kk, rng, [][2]int{{3 * RowBlock, 300}, {6 * RowBlock, 2048}}, 1, []int{1}, false)
				if len(ran) != 1 || ran[single] == 0 {
					t.Errorf("%s: one token over row blocks 6 or 16 KiB apart ran %v, want %s only", name, ran, single)
				}
				clear(ran)
				checkShapes(t, name, kk, rng, [][2]int{{6 * RowBlock, 4096}}, 1, []int{1}, false)
				if got := slices.Sorted(maps.Keys(ran)); !slices.Equal(got, []string{single, "l1two"}) {
					t.Errorf("%s: one token over row blocks 64 KiB apart ran %v, want %s and l1two", name, ran, single)
				}
				twoMinDist = 0
			}
			var fewNs []int // token counts whose kernel the tuning swaps
			generic := strings.HasPrefix(k.name, "generic/")
			switch {
			case k.isa != ISAAVX512:
			case k.format == quantcfg.I2S:
				fewNs = []int{2, 3, 4}
				if generic != (k.ops.gemvTuned == nil) {
					t.Errorf("%s: tuned two- to four-token kernels %v", name, k.ops.gemvTuned != nil)
				}
			case k.format == quantcfg.Int2: // (setting 0: the default code book, consecutive)
				fewNs = []int{2}
				if k.ops.gemvSeqTuned == nil {
					t.Errorf("%s: no tuned two-token kernel", name)
				}
			case k.format == quantcfg.TL2:
				fewNs = []int{2}
				if k.ops.lutTuned == nil {
					t.Errorf("%s: no tuned two-token kernel", name)
				}
			}
			// a tuned table swaps the kernels of fewNs and no others
			for _, tabs := range [][2]*[maxGemvT + 1]func(*byte){{&k.ops.gemv, k.ops.gemvTuned}, {&k.ops.gemvSeq, k.ops.gemvSeqTuned}, {&k.ops.lut, k.ops.lutTuned}} {
				if tabs[1] == nil {
					continue
				}
				for n := 1; n <= maxGemvT; n++ {
					same := reflect.ValueOf(tabs[0][n]).Pointer() == reflect.ValueOf(tabs[1][n]).Pointer()
					if same == slices.Contains(fewNs, n) {
						t.Errorf("%s: the tuned kernel of %d tokens is the untuned one: %v", name, n, same)
					}
				}
			}
			if len(fewNs) > 0 {
				for _, n := range fewNs {
					want := fmt.Sprintf("gemv%d", n)
					if zen4 && !generic {
						want = fmt.Sprintf("tuned%d", n)
					}
					clear(ran)
					checkShapes(t, name, kk, rng, [][2]int{{40, 2560}}, 1, []int{n}, false)
					if len(ran) != 1 || ran[want] == 0 {
						t.Errorf("%s: %d tokens ran %v, want %s only", name, n, ran, want)
					}
				}
			}
			if k.format == quantcfg.TL2 && k.isa == ISAAVX512 { // three and four tokens: passes of lutTunedT under zen4
				for n, want := range map[int][]string{3: {"gemv3"}, 4: {"gemv4"}} {
					if zen4 {
						want = map[int][]string{3: {"lut", "tuned2"}, 4: {"tuned2"}}[n]
					}
					clear(ran)
					checkShapes(t, name, kk, rng, [][2]int{{40, 2560}}, 1, []int{n}, false)
					if got := slices.Sorted(maps.Keys(ran)); !slices.Equal(got, want) {
						t.Errorf("%s: %d tokens ran %v, want %v", name, n, ran, want)
					}
					// a call in parts of its blob (Units, RunUnits, Finish) takes the same passes
					clear(ran)
					var a Acts
					eachShape(t, name, kk, k.format, rng, [][2]int{{40, 26 * TL2Block}}, 1, []int{n}, func(what string, tl testLayer, x []float32, n int, wantOut []float32) {
						checkExact(t, what+", in parts", runParts(t, rng, namedKernel{name, kk}, &a, tl.Layer, x, n, 2, false), wantOut, tl.Spec.Out)
					})
					if got := slices.Sorted(maps.Keys(ran)); !slices.Equal(got, want) {
						t.Errorf("%s: %d tokens in parts ran %v, want %v", name, n, ran, want)
					}
				}
			}
			// (zen3 runs one-token i2s two row blocks at a time, pairing a call's row blocks
			// half its range apart: runSplit's ranges of 7 row blocks are 2, 1 and 4 long)
			shapes := [][2]int{{33, 300}, {70, 2560}, {40, i2sLongK - 200}, {33, i2sLongK + 1}, {40, 14336}, {35, 33000}, {7*RowBlock - 3, 1000}, {70, 14336}}
			if k.format != quantcfg.I2S {
				shapes = [][2]int{{33, 300}, {70, 2560}, {40, 4100}}
			}
			checkShapes(t, name, kk, rng, shapes, 1<<30, []int{1, 2, 3, 4, 5}, false)
		}
	}
}

// counter returns a function that wraps a kernel f to count its calls under what in ran
// (nil stays nil).
func counter(ran map[string]int) func(what string, f func(*byte)) func(*byte) {
	return func(what string, f func(*byte)) func(*byte) {
		if f == nil {
			return nil
		}
		return func(p *byte) { ran[what]++; f(p) }
	}
}

// TestTuningIdle: a tuning whose kernels (AVX-512's) are switched off says so, naming why;
// the default never does.
func TestTuningIdle(t *testing.T) {
	if why := TuningDefault.Idle(); why != "" {
		t.Errorf("default tuning idle: %q", why)
	}
	if ISAAvailable(ISAAVX512) {
		if why := TuningZen4.Idle(); why != "" {
			t.Errorf("zen4 with AVX-512 in use: idle %q", why)
		}
	}
	if ISAAvailable(ISAAVX512) {
		if why := TuningZen3.Idle(); !strings.Contains(why, "not in effect") || !strings.Contains(why, "AVX-512 path runs") {
			t.Errorf("zen3 with AVX-512 in use: idle %q", why)
		}
	}
	restore := DisableAVX512()
	defer restore()
	if ISAAvailable(ISAAVX2) {
		if why := TuningZen3.Idle(); why != "" {
			t.Errorf("zen3 on the AVX2 path: idle %q", why)
		}
	}
	if why := (TuningDefault | TuningAdapt).Idle(); !strings.Contains(why, "not in effect") {
		t.Errorf("default+adapt with AVX-512 off: idle %q (its kernel pairs are AVX-512's)", why)
	}
	if why := TuningZen4.Idle(); !strings.Contains(why, "not in effect") || !strings.Contains(why, isaReason(ISAAVX512)) {
		t.Errorf("zen4 with AVX-512 off: idle %q, want it to name %q", why, isaReason(ISAAVX512))
	}
}
