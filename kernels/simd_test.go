package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	"bitgo/quantcfg"
)

// genericOps builds an ops table from the generic operations, in the zmm ("z") or ymm
// ("y") layouts, so the driver, Prepare and the generic operations are tested against the
// reference independently of the assembly.
func genericOps(f quantcfg.Format, z bool) *fmtOps {
	o := &fmtOps{gemvT: 4, tileT: maxTileT, floatT: maxTileT, tileMaxU: 255, gemvMaxU: 255, epi: func(p *byte) { epilogueGeneric((*epiArgs)(unsafe.Pointer(p))) }}
	o.epiRows = o.epi
	if !z {
		o.gemvT, o.tileT, o.tileMaxU, o.gemvMaxU = 2, 2, 127, 127
	}
	for T := 1; T <= maxTileT; T++ {
		T := T
		o.tile[T] = func(p *byte) { tileGeneric((*gemmArgs)(unsafe.Pointer(p)), T) }
		o.float[T] = func(p *byte) { floatGeneric((*floatArgs)(unsafe.Pointer(p)), T, f == quantcfg.BF16) }
	}
	o.unpack = func(p *byte) { unpackGeneric((*unpackArgs)(unsafe.Pointer(p)), string(f)) }
	var g func(a *gemvArgs, T int)
	switch f {
	case quantcfg.I2S:
		o.kstep = 128
		g = gemvI2SGeneric
		o.parts[3], o.parts[4] = z, z // as the zmm kernels (the generic takes parts for any T)
	case quantcfg.Int2:
		o.kstep, o.tabKind = 4, tabInt2
		if z {
			o.kstep = 8
		}
		g = func(a *gemvArgs, T int) { gemvInt2Generic(a, T, o.kstep) }
	case quantcfg.Int1:
		o.kstep, o.exact = 32, true
		for T := 1; T <= o.gemvT; T++ {
			o.int1Panel[T] = int1PanelGenericT(T)
		}

	case quantcfg.Int8:
		o.kstep = 4
		if !z {
			o.xKind, o.exact = xInt16, true
		}
		g = func(a *gemvArgs, T int) { gemvInt8Generic(a, T, z, !z) }
	case quantcfg.TL1, quantcfg.TL2:
		tl2 := f == quantcfg.TL2
		o.kstep, o.tabKind, o.exact = 4, tabTL1Y, true
		if tl2 {
			o.tabKind = tabTL2Y
		}
		if z {
			if tl2 {
				o.tabKind, o.lutKind = tabTL2Z, tabTL2B // as the zmm kernels
			} else {
				o.tabKind, o.exact = tabTL1M, false
				o.lutOne, o.oneTab = func(p *byte) { lutGeneric((*lutArgs)(unsafe.Pointer(p)), 1, tabTL1Z) }, tabTL1Z
			}
		}
		for T := 1; T <= o.gemvT; T++ {
			T := T
			o.lut[T] = func(p *byte) { lutGeneric((*lutArgs)(unsafe.Pointer(p)), T, o.lutTabs(T)) }
		}
		o.lutBuilds = z && tl2
	}
	for T := 1; T <= o.gemvT; T++ {
		T := T
		if g != nil {
			o.gemv[T] = func(p *byte) { g((*gemvArgs)(unsafe.Pointer(p)), T) }
		}
	}
	if z { // as the zmm kernels: the tunings' one-token variants
		switch {
		case f == quantcfg.I2S:
			o.oneTuned, o.gemvLong1, o.gemvRow1 = o.gemv[1], o.gemv[1], o.gemv[1]
		case f.IsFloat():
			o.oneTuned = o.float[1]
		}
	}
	if f == quantcfg.Int2 && z { // as the zmm kernels: table-free from three tokens on
		o.gemvSeq = o.gemv
		for T := 3; T <= o.gemvT; T++ {
			T := T
			o.gemvSeq[T] = func(p *byte) { gemvInt2SeqGeneric((*gemvArgs)(unsafe.Pointer(p)), T) }
		}
	}
	return o
}

// runSplit runs kernel k over l for x in two or three row-block ranges (as threads would)
// and checks that nothing is written past the output.
func runSplit(t testing.TB, k Kernel, l *Layer, x []float32, n int) []float32 {
	t.Helper()
	var a Acts
	if err := l.Quantize(x, n, &a); err != nil {
		t.Fatal(err)
	}
	k.Prepare(l, &a)
	m := l.Layout.M
	buf := make([]float32, n*m+64)
	for i := range buf {
		buf[i] = float32(math.NaN())
	}
	out := buf[:n*m]
	nrb := l.Layout.RowBlocks()
	cuts := []int{0, nrb / 3, nrb / 2, nrb}
	for i := 0; i+1 < len(cuts); i++ {
		k.Run(l, &a, cuts[i], cuts[i+1], out)
	}
	for i := n * m; i < len(buf); i++ {
		if !math.IsNaN(float64(buf[i])) {
			t.Fatalf("%s wrote past the output (index %d of %d)", k.Name(), i, n*m)
		}
	}
	return out
}

var testMs = []int{1, 31, 33, 64, 70}
var testKs = []int{1, 3, 4, 31, 32, 33, 47, 48, 49, 95, 96, 97, 127, 128, 129, 200, 300, 520}

// checkKernelExact runs kernel k against the reference on ragged shapes, every setting of
// the format that k accepts, and the token counts ns.
func checkKernelExact(t *testing.T, k Kernel, f quantcfg.Format, ns []int, seed uint64) (ran int) {
	t.Helper()
	nearPairs(t)
	rng := rand.New(rand.NewPCG(seed, uint64(len(f))))
	ms, ks := testMs, testKs
	if raceEnabled {
		ms, ks = []int{33, 70}, []int{1, 47, 97, 129, 520}
	}
	for si, spec := range specsFor(f) {
		for _, m := range ms {
			for _, kk := range ks {
				spec := spec
				spec.Out, spec.In, spec.Bias = m, kk, (m+kk+si)%2 == 0
				tl := newTestLayer(t, rng, spec)
				for _, n := range ns {
					if ok, _ := k.CanImplement(tl.Layer, n); !ok {
						continue
					}
					x := randActs(rng, n, kk)
					want, err := Reference(tl.Layer, x, n)
					if err != nil {
						t.Fatal(err)
					}
					got := runSplit(t, k, tl.Layer, x, n)
					checkExact(t, fmt.Sprintf("%s setting %d (%s, %s) %dx%d n=%d", k.Name(), si, tl.Spec.Scale, tl.Spec.Act, m, kk, n), got, want, m)
					ran++
				}
			}
		}
	}
	return ran
}

// genericKernel wraps generic operations as a kernel that always runs.
type genericKernel struct{ simdKernel }

func (g *genericKernel) CanImplement(l *Layer, n int) (bool, string) {
	if l.Spec.Format != g.format {
		return false, "format"
	}
	if g.format == quantcfg.I2S && l.SegLen%128 != 0 {
		return false, "i2s segments"
	}
	if l.SegLen != 0 && g.ops.kstep != 0 && l.SegLen%g.ops.kstep != 0 {
		return false, "segments"
	}
	if g.format == quantcfg.Int2 {
		lo, hi := codebookSpan(l)
		if hi-lo > g.ops.gemvMaxU {
			return false, "span"
		}
	}
	return true, ""
}

func TestGenericOpsMatchReference(t *testing.T) {
	for _, f := range allFormats {
		for _, z := range []bool{true, false} {
			k := &genericKernel{*newSIMDKernel(ISAAVX512, f, genericOps(f, z), false)}
			ns := []int{1, 2, 3, 4, 5, 7, 13, 17, 64}
			if testing.Short() {
				ns = []int{1, 64}
			}
			if ran := checkKernelExact(t, k, f, ns, 1); ran == 0 {
				t.Fatalf("%s: no case ran", f)
			}
		}
	}
}

func TestArgOffsets(t *testing.T) {
	// The generator (_asm/) reads the argument blocks at these offsets.
	var g gemvArgs
	var u unpackArgs
	var m gemmArgs
	var e epiArgs
	var f floatArgs
	var la lutArgs
	var am amxArgs
	var av amxvArgs
	var a2 amxv2Args
	var i1 int1Args
	for _, c := range []struct {
		name string
		got  uintptr
		want uintptr
	}{
		{"gemv.W", unsafe.Offsetof(g.W), 0}, {"gemv.X", unsafe.Offsetof(g.X), 8},
		{"gemv.XStride", unsafe.Offsetof(g.XStride), 16}, {"gemv.Sums", unsafe.Offsetof(g.Sums), 24},
		{"gemv.SegSteps", unsafe.Offsetof(g.SegSteps), 32}, {"gemv.NSeg", unsafe.Offsetof(g.NSeg), 40},
		{"gemv.LastSteps", unsafe.Offsetof(g.LastSteps), 48}, {"gemv.Tab", unsafe.Offsetof(g.Tab), 56},
		{"gemv.Aux", unsafe.Offsetof(g.Aux), 64}, {"gemv.PF", unsafe.Offsetof(g.PF), 72},
		{"gemv.PF7", unsafe.Offsetof(g.PF7), 80}, {"gemv.Acc", unsafe.Offsetof(g.Acc), 88},
		{"gemv.Far", unsafe.Offsetof(g.Far), 96}, {"gemv.Far6", unsafe.Offsetof(g.Far6), 104},
		{"gemv.Epi", unsafe.Offsetof(g.Epi), 112}, {"gemv.EJ", unsafe.Offsetof(g.EJ), 120},
		{"gemv.EY", unsafe.Offsetof(g.EY), 128}, {"gemv.W2Off", unsafe.Offsetof(g.W2Off), 136},
		{"gemv.Sums2Off", unsafe.Offsetof(g.Sums2Off), 144},
		{"unpack.W", unsafe.Offsetof(u.W), 0}, {"unpack.B", unsafe.Offsetof(u.B), 8},
		{"unpack.N", unsafe.Offsetof(u.N), 16}, {"unpack.Tab", unsafe.Offsetof(u.Tab), 24},
		{"unpack.N2", unsafe.Offsetof(u.N2), 32},
		{"gemm.B", unsafe.Offsetof(m.B), 0}, {"gemm.X", unsafe.Offsetof(m.X), 8},
		{"gemm.XQ", unsafe.Offsetof(m.XQ), 16}, {"gemm.Sums", unsafe.Offsetof(m.Sums), 24},
		{"gemm.SegQ", unsafe.Offsetof(m.SegQ), 32}, {"gemm.NSeg", unsafe.Offsetof(m.NSeg), 40},
		{"gemm.LastQ", unsafe.Offsetof(m.LastQ), 48}, {"gemm.SumsSeg", unsafe.Offsetof(m.SumsSeg), 56},
		{"gemm.ChunkQ", unsafe.Offsetof(m.ChunkQ), 64},
		{"epi.Sums", unsafe.Offsetof(e.Sums), 0}, {"epi.NTok", unsafe.Offsetof(e.NTok), 8},
		{"epi.NSeg", unsafe.Offsetof(e.NSeg), 16}, {"epi.A", unsafe.Offsetof(e.A), 24},
		{"epi.Corr", unsafe.Offsetof(e.Corr), 32}, {"epi.XS", unsafe.Offsetof(e.XS), 40},
		{"epi.CorrStride", unsafe.Offsetof(e.CorrStride), 48}, {"epi.WS", unsafe.Offsetof(e.WS), 56},
		{"epi.WSSeg", unsafe.Offsetof(e.WSSeg), 64}, {"epi.Bias", unsafe.Offsetof(e.Bias), 72},
		{"epi.Out", unsafe.Offsetof(e.Out), 80}, {"epi.OutStride", unsafe.Offsetof(e.OutStride), 88},
		{"epi.Mask", unsafe.Offsetof(e.Mask), 96}, {"epi.NRB", unsafe.Offsetof(e.NRB), 104},
		{"epi.SumsRB", unsafe.Offsetof(e.SumsRB), 112}, {"epi.WSRB", unsafe.Offsetof(e.WSRB), 120},
		{"float.W", unsafe.Offsetof(f.W), 0}, {"float.X", unsafe.Offsetof(f.X), 8},
		{"float.XStride", unsafe.Offsetof(f.XStride), 16}, {"float.K", unsafe.Offsetof(f.K), 24},
		{"float.Bias", unsafe.Offsetof(f.Bias), 32}, {"float.Out", unsafe.Offsetof(f.Out), 40},
		{"float.OutStride", unsafe.Offsetof(f.OutStride), 48}, {"float.Mask", unsafe.Offsetof(f.Mask), 56},
		{"lut.W", unsafe.Offsetof(la.W), 0}, {"lut.RBBytes", unsafe.Offsetof(la.RBBytes), 8},
		{"lut.NRB", unsafe.Offsetof(la.NRB), 16}, {"lut.Sums", unsafe.Offsetof(la.Sums), 24},
		{"lut.Tab", unsafe.Offsetof(la.Tab), 32}, {"lut.TabStride", unsafe.Offsetof(la.TabStride), 40},
		{"lut.Blocks", unsafe.Offsetof(la.Blocks), 48}, {"lut.Units", unsafe.Offsetof(la.Units), 56},
		{"lut.BX", unsafe.Offsetof(la.BX), 64}, {"lut.BTab", unsafe.Offsetof(la.BTab), 72},
		{"lut.BN", unsafe.Offsetof(la.BN), 80}, {"lut.BPer", unsafe.Offsetof(la.BPer), 88},
		{"lut.Next", unsafe.Offsetof(la.Next), 96}, {"lut.PF", unsafe.Offsetof(la.PF), 104},
		{"lut.BDone", unsafe.Offsetof(la.BDone), 112}, {"lut.Turn", unsafe.Offsetof(la.Turn), 120},
		{"amx.B", unsafe.Offsetof(am.B), 0}, {"amx.X", unsafe.Offsetof(am.X), 8},
		{"amx.XStride", unsafe.Offsetof(am.XStride), 16}, {"amx.Sums", unsafe.Offsetof(am.Sums), 24},
		{"amx.SegQ", unsafe.Offsetof(am.SegQ), 32}, {"amx.NSeg", unsafe.Offsetof(am.NSeg), 40},
		{"amx.LastQ", unsafe.Offsetof(am.LastQ), 48}, {"amx.SumsSeg", unsafe.Offsetof(am.SumsSeg), 56},
		{"amx.Cfg", unsafe.Offsetof(am.Cfg), 64},
		{"amxv.W", unsafe.Offsetof(av.W), 0}, {"amxv.QStride", unsafe.Offsetof(av.QStride), 8},
		{"amxv.Pairs", unsafe.Offsetof(av.Pairs), 16}, {"amxv.Odd", unsafe.Offsetof(av.Odd), 24},
		{"amxv.X", unsafe.Offsetof(av.X), 32}, {"amxv.BStride", unsafe.Offsetof(av.BStride), 40},
		{"amxv.Sums", unsafe.Offsetof(av.Sums), 48}, {"amxv.N", unsafe.Offsetof(av.N), 56},
		{"amxv.Buf", unsafe.Offsetof(av.Buf), 64}, {"amxv.Cfg", unsafe.Offsetof(av.Cfg), 72},
		{"amxv.NRB", unsafe.Offsetof(av.NRB), 80}, {"amxv.RBBytes", unsafe.Offsetof(av.RBBytes), 88},
		{"amxv.I", unsafe.Offsetof(av.I), 96},
		{"amxv2.W", unsafe.Offsetof(a2.W), 0}, {"amxv2.X", unsafe.Offsetof(a2.X), 8},
		{"amxv2.XStride", unsafe.Offsetof(a2.XStride), 16}, {"amxv2.Steps", unsafe.Offsetof(a2.Steps), 24},
		{"amxv2.Sums", unsafe.Offsetof(a2.Sums), 32}, {"amxv2.N", unsafe.Offsetof(a2.N), 40},
		{"amxv2.Buf", unsafe.Offsetof(a2.Buf), 48}, {"amxv2.Cfg", unsafe.Offsetof(a2.Cfg), 56},
		{"amxv2.NRB", unsafe.Offsetof(a2.NRB), 64}, {"amxv2.Tab", unsafe.Offsetof(a2.Tab), 72},
		{"amxv2.PF", unsafe.Offsetof(a2.PF), 80},
		{"int1.W", unsafe.Offsetof(i1.W), 0}, {"int1.NRB", unsafe.Offsetof(i1.NRB), 8},
		{"int1.BStride", unsafe.Offsetof(i1.BStride), 16}, {"int1.Blocks", unsafe.Offsetof(i1.Blocks), 24},
		{"int1.X", unsafe.Offsetof(i1.X), 32}, {"int1.XStride", unsafe.Offsetof(i1.XStride), 40},
		{"int1.Tab", unsafe.Offsetof(i1.Tab), 48}, {"int1.TabStride", unsafe.Offsetof(i1.TabStride), 56},
		{"int1.Sums", unsafe.Offsetof(i1.Sums), 64}, {"int1.SStride", unsafe.Offsetof(i1.SStride), 72},
		{"int1.Acc", unsafe.Offsetof(i1.Acc), 80},
	} {
		if c.got != c.want {
			t.Errorf("%s at offset %d, the generator reads %d", c.name, c.got, c.want)
		}
	}
}

// asmKernels returns the assembly kernels that can run on this CPU.
func asmKernels() []*simdKernel {
	var out []*simdKernel
	for _, k := range kernelList {
		if s, ok := k.(*simdKernel); ok && isaReason(s.isa) == "" && (!s.int8vnni || hasINT8()) {
			out = append(out, s)
		}
	}
	return out
}

// TestInt2SeqSelected: an int2 layer whose code book is consecutive levels in code order runs
// the zmm path's table-free GEMV kernels for one token and from three on (the table one for
// two, but under the zen4 tuning: TestTunings), the AVX-VNNI path's for one and two, and
// the AVX2 path's two-token kernel of long int16 chunks (the one-token kernel serves every
// code book); any other code book the table ones. (Both give the reference's results, so
// the tests that compare results cannot see which ran.)
func TestInt2SeqSelected(t *testing.T) {
	ran := false
	for _, k := range asmKernels() {
		if k.format != quantcfg.Int2 || k.ops.gemvSeq[1] == nil {
			continue
		}
		ran = true
		for T := 1; T <= k.ops.gemvT; T++ {
			seq, tab := reflect.ValueOf(k.ops.gemvSeq[T]).Pointer(), reflect.ValueOf(k.ops.gemv[T]).Pointer()
			want := T == 2 // the same kernel for both code books
			switch k.isa {
			case ISAAVX2:
				want = T == 1
			case ISAAVXVNNI:
				want = false
			}
			if (seq == tab) != want {
				t.Errorf("%s: T=%d: the consecutive code book's kernel is the table one: %v, want %v", k.Name(), T, seq == tab, want)
			}
		}
		for _, c := range []struct {
			cb  quantcfg.Codebook
			seq bool
		}{
			{quantcfg.DefaultCodebook, true}, {quantcfg.Codebook{-1, 0, 1, 2}, true}, {quantcfg.Codebook{125, 126, 127, -128}, false},
			{quantcfg.Codebook{-3, -1, 1, 3}, false}, {quantcfg.Codebook{1, 0, -1, -2}, false}, {quantcfg.Codebook{-2, -1, 0, 2}, false},
		} {
			l := &Layer{Spec: quantcfg.LayerSpec{Format: quantcfg.Int2}, Levels: c.cb}
			got := k.gemvFor(l)
			if got := got == &k.ops.gemvSeq || got == k.ops.gemvSeqTuned; got != c.seq {
				t.Errorf("%s: code book %v: table-free kernels %v, want %v", k.Name(), c.cb, got, c.seq)
			}
		}
	}
	if !ran && ISAAvailable(ISAAVX512) {
		t.Fatal("the zmm int2 kernel has no table-free GEMV kernels")
	}
}

func TestSIMDKernelsMatchReference(t *testing.T) {
	ks := asmKernels()
	if len(ks) == 0 {
		t.Skip("no assembly kernel runs here")
	}
	ns := []int{1, 2, 3, 4, 5, 6, 7, 8, 13, 33, 64}
	if testing.Short() {
		ns = []int{1, 3, 4, 8, 13}
	}
	for _, k := range ks {
		t.Run(k.Name(), func(t *testing.T) {
			if ran := checkKernelExact(t, k, k.format, ns, 7); ran == 0 {
				t.Fatalf("%s: accepted no setting", k.Name())
			}
		})
	}
}

// TestFusedEpiloguePath: the int2 and int8 GEMV kernels of every path run the epilogue
// themselves where a row block has several segments (weight or activation groups), so the
// driver's pass (fmtOps.epi) must not run for them; it must run for one segment (row scales)
// and for the formats whose kernels do not (i2s, tl1, tl2, int1). Both ways give the reference's
// results, so the tests that compare results cannot see which ran.
func TestFusedEpiloguePath(t *testing.T) {
	fusedFormats := map[quantcfg.Format]bool{quantcfg.Int2: true, quantcfg.Int8: true}
	rng := rand.New(rand.NewPCG(9, 9))
	const m, k = 70, 512
	for _, kern := range asmKernels() {
		f := kern.format
		if f.IsFloat() {
			continue
		}
		if kern.ops.fused != fusedFormats[f] {
			t.Errorf("%s: fmtOps.fused = %v, want %v", kern.Name(), kern.ops.fused, fusedFormats[f])
		}
		passes := 0
		ops := *kern.ops
		epi, rows := ops.epi, ops.epiRows
		ops.epi = func(p *byte) { passes++; epi(p) }
		ops.epiRows = func(p *byte) { passes++; rows(p) }
		kc := newSIMDKernel(kern.isa, f, &ops, kern.int8vnni)
		ran := 0
		group := 64
		if f == quantcfg.I2S {
			group = 128
		}
		for _, c := range []struct {
			scale quantcfg.ScaleGran
			act   quantcfg.ActMode
			segs  bool
		}{
			{quantcfg.PerRowScale, quantcfg.PerToken, false},
			{quantcfg.GroupScale(group), quantcfg.PerToken, true},
			{quantcfg.PerRowScale, quantcfg.ActMode{Kind: quantcfg.ActPerGroup, Group: group}, true},
		} {
			spec := quantcfg.LayerSpec{Name: "fused", Format: f, Out: m, In: k, Scale: c.scale, Act: c.act}.WithDefaults()
			if spec.Validate() != nil {
				continue // a setting the format does not take
			}
			l := newTestLayer(t, rng, spec).Layer
			for n := 1; n <= ops.gemvT; n++ {
				if ok, _ := kc.CanImplement(l, n); !ok {
					continue
				}
				x := randActs(rng, n, k)
				want, err := Reference(l, x, n)
				if err != nil {
					t.Fatal(err)
				}
				passes, ran = 0, ran+1
				what := fmt.Sprintf("%s (%s, %s) n=%d", kc.Name(), c.scale, c.act, n)
				checkExact(t, what, runSplit(t, kc, l, x, n), want, m)
				if wantPass := !(c.segs && fusedFormats[f]); (passes > 0) != wantPass {
					t.Errorf("%s: the epilogue pass ran %d times; want it to run: %v", what, passes, wantPass)
				}
			}
		}
		if ran < 2 {
			t.Errorf("%s: only %d settings ran", kc.Name(), ran)
		}
	}
}

// TestSIMDNegativeZeroSums: with one weight value throughout and activations alternating +1
// and -1, every segment's dot product is 0, and under negative weight scales every term p_j of
// the epilogue is -0, so y = p_0 + p_1 + ... is -0: an epilogue that starts its sum at +0
// instead of p_0 (as the kernels that run it themselves, gemvArgs.Epi, must not) gives +0.
func TestSIMDNegativeZeroSums(t *testing.T) {
	const m, k = 70, 256
	for _, kern := range asmKernels() {
		f := kern.format
		if f.IsFloat() {
			continue
		}
		for si, spec := range specsFor(f) {
			spec.Out, spec.In, spec.Bias = m, k, false
			spec = spec.WithDefaults()
			spec.Name = fmt.Sprintf("negzero_%s_%d", f, si)
			w := Weights{Q: make([]int8, m*k)}
			for i := range w.Q {
				w.Q[i] = 1
			}
			scales := make([]float32, spec.NumScales())
			for i := range scales {
				scales[i] = -0.5
			}
			l := packLayer(t, spec, w, scales, nil)
			for n := 1; n <= 8; n++ {
				if ok, _ := kern.CanImplement(l, n); !ok {
					continue
				}
				x := make([]float32, n*k)
				for i := range x {
					x[i] = float32(1 - 2*(i%2))
				}
				want, err := Reference(l, x, n)
				if err != nil {
					t.Fatal(err)
				}
				for i, v := range want {
					if math.Float32bits(v) != 0x80000000 {
						t.Fatalf("%s: the reference gives %v (%#x) at %d, not -0: the test's premise fails", spec.Name, v, math.Float32bits(v), i)
					}
				}
				checkExact(t, fmt.Sprintf("%s %s (%s, %s) n=%d", kern.Name(), spec.Name, spec.Scale, spec.Act, n), runSplit(t, kern, l, x, n), want, m)
			}
		}
	}
}

// TestSIMDKernelsAtMaxK: every integer kernel at its format's largest K with every weight and
// activation at an extreme, the case MaxK is chosen for: the kernels' int32 accumulators (offset
// u8 operands, codes taken at 4^s times their value, int16 chains) must not wrap. Row r holds
// one weight value throughout (the format's largest and smallest in turn), token t's
// activations are all +1 or all -1 (+-127 after quantization), so each dot product is
// w x +-127 x K, which the test checks in float64 before it compares the kernel bit for bit
// with the reference. 36 rows (two row blocks) for the GEMV token counts, 4 rows for 64 tokens
// (the GEMM path: unpacked u8 weights against offset activations).
func TestSIMDKernelsAtMaxK(t *testing.T) {
	ks := asmKernels()
	if len(ks) == 0 {
		t.Skip("no assembly kernel runs here")
	}
	if raceEnabled {
		t.Skip("hundreds of millions of multiply-adds per case: too slow under the race detector")
	}
	cases := []struct{ m, n int }{{36, 1}, {36, 2}, {36, 4}, {36, 8}, {4, gemmMinN}}
	if testing.Short() {
		cases = []struct{ m, n int }{{36, 1}, {36, 4}, {4, gemmMinN}}
	}
	byFormat := map[quantcfg.Format][]*simdKernel{}
	var formats []quantcfg.Format
	for _, k := range ks {
		if k.format.IsFloat() {
			continue
		}
		if byFormat[k.format] == nil {
			formats = append(formats, k.format)
		}
		byFormat[k.format] = append(byFormat[k.format], k)
	}
	// Each format's extremes: the stored weights of the rows r with r % 2 == 0 and 1. int2
	// twice: a wide code book (the table kernels) and the default consecutive one (the
	// table-free kernels of three tokens and more).
	type variant struct {
		f  quantcfg.Format
		cb quantcfg.Codebook
		q  [2]int8
	}
	var variants []variant
	for _, f := range formats {
		switch {
		case f.IsTernary(), f == quantcfg.Int1:
			variants = append(variants, variant{f, quantcfg.Codebook{}, [2]int8{1, -1}})
		case f == quantcfg.Int2:
			variants = append(variants, variant{f, quantcfg.Codebook{-128, 127, 0, 5}, [2]int8{1, 0}}, // 127 and -128
				variant{f, quantcfg.DefaultCodebook, [2]int8{3, 0}}) // 1 and -2
		default:
			variants = append(variants, variant{f, quantcfg.Codebook{}, [2]int8{127, -128}})
		}
	}
	for _, vr := range variants {
		f := vr.f
		fi, _ := f.Info()
		spec := quantcfg.LayerSpec{Format: f, In: fi.MaxK, Codebook: vr.cb}
		// extremes[j]: the stored weight of the rows r with r % 2 == j, and its value.
		var extremes [2]struct {
			q int8
			v float64
		}
		for j := range extremes {
			extremes[j].q, extremes[j].v = vr.q[j], float64(vr.q[j])
			if f == quantcfg.Int2 {
				extremes[j].v = float64(spec.Codebook[vr.q[j]])
			}
		}
		layers := map[int]*Layer{} // by rows: 36 and 4
		for _, c := range cases {
			if layers[c.m] != nil {
				continue
			}
			spec := spec
			spec.Out = c.m
			spec = spec.WithDefaults()
			w := Weights{Q: make([]int8, c.m*spec.In)}
			for i := range w.Q {
				w.Q[i] = extremes[i/spec.In%2].q
			}
			scales := make([]float32, spec.NumScales())
			for i := range scales {
				scales[i] = 1
			}
			layers[c.m] = packLayer(t, spec, w, scales, nil)
		}
		for _, c := range cases {
			l, m, n, k := layers[c.m], c.m, c.n, fi.MaxK
			x := make([]float32, n*k)
			for tk := 0; tk < n; tk++ {
				for i := 0; i < k; i++ {
					x[tk*k+i] = float32(1 - 2*(tk%2))
				}
			}
			want, err := Reference(l, x, n)
			if err != nil {
				t.Fatal(err)
			}
			for tk := 0; tk < n; tk++ {
				for r := 0; r < 2; r++ {
					// w x +-127 x K, then divided by the activation scale 127.
					exact := extremes[r].v * float64(1-2*(tk%2)) * float64(k)
					if got := float64(want[tk*m+r]); math.Abs(got-exact) > 1e-6*math.Abs(exact) {
						t.Fatalf("%s K=%d n=%d: the reference gives token %d row %d %v, want %v", f, k, n, tk, r, got, exact)
					}
				}
			}
			ran, gemm, spanOnly := 0, 0, true
			for _, kn := range byFormat[f] {
				if ok, why := kn.CanImplement(l, n); !ok {
					if isaReason(kn.isa) == "" && !strings.HasPrefix(why, "codebook spans") {
						spanOnly = false
					}
					continue
				}
				path := "GEMV"
				if kn.useGemm(l, n) {
					path = "GEMM"
					gemm++
				}
				checkExact(t, fmt.Sprintf("%s %dx%d n=%d (extremes, %s)", kn.Name(), m, k, n, path), runSplit(t, kn, l, x, n), want, m)
				ran++
			}
			if ran == 0 && spanOnly && !ISAAvailable(ISAAVX512) {
				// Without zmm, the wide int2 code book's GEMV is the reference's (the ymm
				// kernels' vpmaddubsw saturates beyond a span of 127).
				t.Logf("%s K=%d n=%d: no SIMD kernel here takes a code book spanning 255 at this n", f, k, n)
				continue
			}
			if ran == 0 {
				t.Fatalf("%s K=%d n=%d: no kernel accepted the layer", f, k, n)
			}
			// The zmm kernels take every integer layer's GEMM (their unpacked weights may span
			// 255); on AVX2 a wide int2 code book keeps the GEMV.
			if n >= gemmMinN && gemm == 0 && ISAAvailable(ISAAVX512) {
				t.Fatalf("%s K=%d n=%d: no kernel took the GEMM path", f, k, n)
			}
		}
	}
}

// TestSIMDGemmLargeN: the prefill path with many, ragged token counts, on AMX where it runs
// (the zmm path, K and groups multiples of 64) and with AMX off.
func TestSIMDGemmLargeN(t *testing.T) {
	ks := asmKernels()
	if len(ks) == 0 {
		t.Skip("no assembly kernel runs here")
	}
	rng := rand.New(rand.NewPCG(8, 8))
	ns := []int{64, 77, 130}
	if testing.Short() {
		ns = []int{77}
	}
	settings := 1 << 30
	if testing.Short() {
		settings = 2
	}
	for _, amx := range []bool{true, false} { // the zmm GEMM on AMX where it runs, and without
		if !amx {
			defer DisableAMX()()
		}
		for _, k := range ks {
			checkShapes(t, fmt.Sprintf("%s (amx %v)", k.Name(), amx), k, rng, [][2]int{{70, 300}, {33, 1100}, {40, 256}}, settings, ns, false)
		}
	}
}

// checkShapes runs kernel k against the reference on the shapes (M, K), the first settings
// settings of its format and the token counts ns, split over row-block ranges as threads
// would (and with byRB, for one token, also one row block per call).
func checkShapes(t *testing.T, name string, k *simdKernel, rng *rand.Rand, shapes [][2]int, settings int, ns []int, byRB bool) {
	t.Helper()
	eachShape(t, name, k, k.format, rng, shapes, settings, ns, func(what string, tl testLayer, x []float32, n int, want []float32) {
		m := tl.Spec.Out
		checkExact(t, what, runSplit(t, k, tl.Layer, x, n), want, m)
		if byRB && n == 1 {
			var a Acts
			if err := tl.Layer.Quantize(x, n, &a); err != nil {
				t.Fatal(err)
			}
			k.Prepare(tl.Layer, &a)
			out := make([]float32, m)
			for rb := 0; rb < tl.Layer.Layout.RowBlocks(); rb++ {
				k.Run(tl.Layer, &a, rb, rb+1, out)
			}
			checkExact(t, what+" by row block", out, want, m)
		}
	})
}

// eachShape calls fn for the first settings of format f, each shape (M, K; bias on even
// settings) and each token count in ns that k can run, with activations and the
// reference's outputs for them; what names the case.
func eachShape(t *testing.T, name string, k Kernel, f quantcfg.Format, rng *rand.Rand, shapes [][2]int, settings int, ns []int, fn func(what string, tl testLayer, x []float32, n int, want []float32)) {
	t.Helper()
	for si, spec := range specsFor(f) {
		if si >= settings {
			break
		}
		for _, sh := range shapes {
			spec := spec
			spec.Out, spec.In, spec.Bias = sh[0], sh[1], si%2 == 0
			tl := newTestLayer(t, rng, spec)
			for _, n := range ns {
				if ok, _ := k.CanImplement(tl.Layer, n); !ok {
					continue
				}
				x := randActs(rng, n, sh[1])
				want, err := Reference(tl.Layer, x, n)
				if err != nil {
					t.Fatal(err)
				}
				fn(fmt.Sprintf("%s setting %d %dx%d n=%d", name, si, sh[0], sh[1], n), tl, x, n, want)
			}
		}
	}
}

// TestLUTKernelsManyChunks: the tl1/tl2 kernels (assembly and generic twins) over K of
// several tl2 chunks, where the one-token zmm kernel builds the next chunk's tables between
// row blocks (a few row blocks per thread, and one) and the last chunk ends with a tail.
func TestLUTKernelsManyChunks(t *testing.T) {
	ks := lutKernels()
	rng := rand.New(rand.NewPCG(9, 9))
	shapes := [][2]int{{33, 12 * TL2Block}, {33, 13 * TL2Block}, {70, 1203}, {200, 4817}, {32, 40*TL2Block + 44}}
	for _, nk := range ks {
		checkShapes(t, nk.name, nk.simdKernel, rng, shapes, 2, []int{1, 2, 5}, true)
	}
}

// TestLUTKernelsGroupsInRuns: more tokens than a lookup-table kernel takes in one pass (four
// on zmm, two on ymm) run every group over each run of lutSubBytes of a chunk's pieces in
// turn. Runs of one row block and up here, so that runs end inside a range and at its end,
// on chunks with and without the tl2 tail.
func TestLUTKernelsGroupsInRuns(t *testing.T) {
	old := lutSubBytes
	t.Cleanup(func() { lutSubBytes = old })
	rng := rand.New(rand.NewPCG(12, 12))
	shapes := [][2]int{{200, 13*TL2Block + 44}, {70, 1203}, {100, 40*TL2Block + 44}}
	for _, sub := range []int{1, 4000, 20000} {
		lutSubBytes = sub
		for _, nk := range lutKernels() {
			checkShapes(t, fmt.Sprintf("%s, runs of %d bytes", nk.name, sub), nk.simdKernel, rng, shapes, 2, []int{3, 5, 8, 13}, false)
		}
	}
}

// TestLUTKernelsKeepArgPointers runs every assembly lookup-table kernel, through Run and
// in parts, with each call checked: the kernel may count the argument block's integer fields
// but must leave its pointers as the caller set them. A pointer stored by assembly has no
// write barrier, and the one-token tl2 kernel used to advance BX past the activations'
// object it builds tables from, which made the garbage collector find a pointer to a free
// object and stop `bitd bench -model` about one run in eight. The shapes have several chunks,
// so that kernel builds the next chunk's tables inline, and the test checks it did. Under
// every tuning, so that one-token tl1 runs both its lookup kernel and its multiplying one,
// and one-token tl2 its kernels with and without software prefetch.
func TestLUTKernelsKeepArgPointers(t *testing.T) {
	smallParts(t)
	rng := rand.New(rand.NewPCG(31, 31))
	shapes := [][2]int{{33, 26 * TL2Block}, {70, 1203}, {64, 40*TL2Block + 44}}
	defer SwitchTuning(currentTuning())
	for tn := Tuning(0); tn < numTunings; tn++ {
		SwitchTuning(tn)
		testLUTKernelsKeepArgPointers(t, rng, shapes)
	}
}

func testLUTKernelsKeepArgPointers(t *testing.T, rng *rand.Rand, shapes [][2]int) {
	for _, k := range asmKernels() {
		if k.ops.lut[1] == nil {
			continue
		}
		var built atomic.Int64
		ops := *k.ops
		check := func(T int, f func(*byte)) func(*byte) {
			if f == nil {
				return nil
			}
			return func(p *byte) {
				a := (*lutArgs)(unsafe.Pointer(p))
				before := *a
				f(p)
				if a.BN != 0 || a.BDone != before.BN+before.BDone {
					t.Errorf("%s, %d token(s): %d tables left to build and %d built, want 0 and %d", k.Name(), T, a.BN, a.BDone, before.BN+before.BDone)
				}
				built.Add(int64(a.BDone))
				for _, fld := range []struct {
					name       string
					got, given unsafe.Pointer
				}{{"W", a.W, before.W}, {"Sums", a.Sums, before.Sums}, {"Tab", a.Tab, before.Tab},
					{"BX", a.BX, before.BX}, {"BTab", a.BTab, before.BTab}, {"Next", a.Next, before.Next}} {
					if fld.got != fld.given {
						t.Fatalf("%s, %d token(s): the kernel moved %s from %p to %p", k.Name(), T, fld.name, fld.given, fld.got)
					}
				}
			}
		}
		checkAll := func(tab [maxGemvT + 1]func(*byte)) [maxGemvT + 1]func(*byte) {
			for T := 1; T <= maxGemvT; T++ {
				tab[T] = check(T, tab[T])
			}
			return tab
		}
		ops.lut = checkAll(k.ops.lut)
		if k.ops.lutTuned != nil {
			tuned := checkAll(*k.ops.lutTuned)
			ops.lutTuned = &tuned
		}
		ops.lutOne, ops.oneTuned = check(1, k.ops.lutOne), check(1, k.ops.oneTuned)
		kk := *k
		kk.ops = &ops
		checkShapes(t, k.Name(), &kk, rng, shapes, 2, []int{1, 2, 3}, false)
		eachShape(t, k.Name(), &kk, kk.format, rng, shapes, 1, []int{1, 2}, func(what string, tl testLayer, x []float32, n int, want []float32) {
			if tl.Layer.Layout.Chunks() < 2 {
				return
			}
			var a Acts
			checkExact(t, what+" in parts", runParts(t, rng, namedKernel{k.Name(), &kk}, &a, tl.Layer, x, n, 2, false), want, tl.Spec.Out)
		})
		if k.ops.lutBuilds && built.Load() == 0 {
			t.Errorf("%s builds tables inline, but no call built any", k.Name())
		}
	}
}

// fuzzLayer makes a fuzz target's layer of format f, mm x kk, in setting (specsFor) and
// nn tokens of activations, from seed, and returns the rng it drew them from.
func fuzzLayer(t *testing.T, f quantcfg.Format, mm, kk, nn int, setting uint8, seed uint64) (testLayer, []float32, *rand.Rand) {
	specs := specsFor(f)
	spec := specs[int(setting)%len(specs)]
	spec.Out, spec.In, spec.Bias = mm, kk, seed%2 == 0
	rng := rand.New(rand.NewPCG(seed, uint64(mm*kk)))
	tl := newTestLayer(t, rng, spec)
	return tl, randActs(rng, nn, kk), rng
}

// fuzzFormat compares every assembly kernel of format f with the reference on a layer
// and activations derived from the fuzz inputs.
func fuzzFormat(t *testing.T, f quantcfg.Format, m, k, n uint16, setting uint8, seed uint64) {
	mm, kk, nn := int(m%100)+1, int(k%700)+1, int(n%20)+1
	tl, x, _ := fuzzLayer(t, f, mm, kk, nn, setting, seed)
	spec := tl.Spec
	if seed%3 == 0 { // extreme activations: one large value per token, the rest tiny or equal
		for i := range x {
			x[i] = float32(1 - 2*int(seed>>7&1))
			if i%kk == int(seed)%kk {
				x[i] *= 1e6
			}
		}
	}
	want, err := Reference(tl.Layer, x, nn)
	if err != nil {
		t.Fatal(err)
	}
	for _, ker := range asmKernels() {
		if ker.format != f {
			continue
		}
		if ok, _ := ker.CanImplement(tl.Layer, nn); !ok {
			continue
		}
		checkExact(t, fmt.Sprintf("%s %s %dx%d n=%d", ker.Name(), spec.Act, mm, kk, nn), runSplit(t, ker, tl.Layer, x, nn), want, mm)
	}
}

func addFuzzSeeds(f *testing.F) {
	f.Add(uint16(31), uint16(47), uint16(1), uint8(0), uint64(1))
	f.Add(uint16(63), uint16(511), uint16(4), uint8(1), uint64(2))
	f.Add(uint16(32), uint16(129), uint16(7), uint8(2), uint64(3))
	f.Add(uint16(5), uint16(96), uint16(19), uint8(3), uint64(6))
}

func FuzzKernelI2S(f *testing.F) {
	addFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, m, k, n uint16, s uint8, seed uint64) {
		fuzzFormat(t, quantcfg.I2S, m, k, n, s, seed)
	})
}

func FuzzKernelTL1(f *testing.F) {
	addFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, m, k, n uint16, s uint8, seed uint64) {
		fuzzFormat(t, quantcfg.TL1, m, k, n, s, seed)
	})
}

func FuzzKernelTL2(f *testing.F) {
	addFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, m, k, n uint16, s uint8, seed uint64) {
		fuzzFormat(t, quantcfg.TL2, m, k, n, s, seed)
	})
}

func FuzzKernelInt2(f *testing.F) {
	addFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, m, k, n uint16, s uint8, seed uint64) {
		fuzzFormat(t, quantcfg.Int2, m, k, n, s, seed)
	})
}

func FuzzKernelInt1(f *testing.F) {
	addFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, m, k, n uint16, s uint8, seed uint64) {
		fuzzFormat(t, quantcfg.Int1, m, k, n, s, seed)
	})
}

func FuzzKernelInt8(f *testing.F) {
	addFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, m, k, n uint16, s uint8, seed uint64) {
		fuzzFormat(t, quantcfg.Int8, m, k, n, s, seed)
	})
}

func FuzzKernelBF16(f *testing.F) {
	addFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, m, k, n uint16, s uint8, seed uint64) {
		fuzzFormat(t, quantcfg.BF16, m, k, n, s, seed)
	})
}

func FuzzKernelF32(f *testing.F) {
	addFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, m, k, n uint16, s uint8, seed uint64) {
		fuzzFormat(t, quantcfg.F32, m, k, n, s, seed)
	})
}

// TestSIMDConcurrent: many goroutines prepare their own calls on shared layers and run
// disjoint row-block ranges of them at once (go test -race checks the sharing).
func TestSIMDConcurrent(t *testing.T) {
	ks := asmKernels()
	if len(ks) == 0 {
		t.Skip("no assembly kernel runs here")
	}
	rng := rand.New(rand.NewPCG(9, 9))
	type job struct {
		k    *simdKernel
		l    *Layer
		x    []float32
		n    int
		want []float32
	}
	var jobs []job
	for _, k := range ks {
		if k.isa != ks[0].isa {
			continue
		}
		spec := quantcfg.LayerSpec{Format: k.format, Out: 200, In: 300, Bias: true}
		tl := newTestLayer(t, rng, spec)
		for _, n := range []int{1, 3, 9} {
			x := randActs(rng, n, 300)
			want, err := Reference(tl.Layer, x, n)
			if err != nil {
				t.Fatal(err)
			}
			jobs = append(jobs, job{k, tl.Layer, x, n, want})
		}
	}
	done := make(chan error, 4*len(jobs))
	for rep := 0; rep < 4; rep++ {
		for _, j := range jobs {
			go func(j job) {
				var a Acts
				if err := j.l.Quantize(j.x, j.n, &a); err != nil {
					done <- err
					return
				}
				j.k.Prepare(j.l, &a)
				out := make([]float32, j.n*j.l.Layout.M)
				nrb := j.l.Layout.RowBlocks()
				fin := make(chan struct{}, nrb)
				for rb := 0; rb < nrb; rb++ {
					go func(rb int) { j.k.Run(j.l, &a, rb, rb+1, out); fin <- struct{}{} }(rb)
				}
				for rb := 0; rb < nrb; rb++ {
					<-fin
				}
				for i := range out {
					if !sameBits(out[i], j.want[i]) {
						done <- fmt.Errorf("%s n=%d: output %d = %v, want %v", j.k.Name(), j.n, i, out[i], j.want[i])
						return
					}
				}
				done <- nil
			}(j)
		}
	}
	for i := 0; i < 4*len(jobs); i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestI2SParts: the i2s GEMV of three and four tokens over a K whose activations outgrow
// i2sPartBytes runs as parts of K (gemvParts) in the zmm kernels and their generic twin;
// the parts must add up to the reference, and each row quad must prefetch the run that is
// read after it.
func TestI2SParts(t *testing.T) {
	ks := []*simdKernel{newSIMDKernel(ISAAVX512, quantcfg.I2S, genericOps(quantcfg.I2S, true), false)}
	for _, k := range asmKernels() {
		if k.format == quantcfg.I2S && k.isa == ISAAVX512 {
			ks = append(ks, k)
		}
	}
	// K = 8832: two parts for four tokens, none for three; K = 20608: two and three parts.
	shapes := [][2]int{{40, 8832}, {70, 20608}}
	for _, k := range ks {
		for _, c := range []struct{ kp, T, want int }{{8832, 3, 0}, {8832, 4, 35}, {20608, 3, 81}, {20608, 4, 54}, {20608, 2, 0}, {20608, 5, 0}} {
			if got := k.i2sPartSteps(Layout{Kp: c.kp}, plan{nseg: 1}, c.T, k.ops.parts[c.T]); got != c.want {
				t.Fatalf("%s, Kp %d, %d tokens: parts of %d steps, want %d", k.Name(), c.kp, c.T, got, c.want)
			}
		}
	}
	rng := rand.New(rand.NewPCG(10, 10))
	for i, k := range ks {
		name := k.Name()
		if i == 0 {
			name = "generic/i2s"
		}
		checkShapes(t, name, k, rng, shapes, 1<<30, []int{3, 4, 7}, false)
	}

	// The prefetch targets, from the arguments of each call.
	type call struct {
		w                        uintptr
		aux, pf, pf7, acc, steps int
	}
	var calls []call
	gen := genericOps(quantcfg.I2S, true)
	rec := *gen
	for T := 1; T <= rec.gemvT; T++ {
		T := T
		rec.gemv[T] = func(p *byte) {
			g := (*gemvArgs)(unsafe.Pointer(p))
			calls = append(calls, call{uintptr(g.W), g.Aux, g.PF, g.PF7, g.Acc, g.LastSteps})
			gen.gemv[T](p)
		}
	}
	k := newSIMDKernel(ISAAVX512, quantcfg.I2S, &rec, false)
	spec := quantcfg.LayerSpec{Format: quantcfg.I2S, Out: 64, In: 20608}
	tl := newTestLayer(t, rng, spec)
	x := randActs(rng, 4, spec.In)
	want, err := Reference(tl.Layer, x, 4)
	if err != nil {
		t.Fatal(err)
	}
	checkExact(t, "recorded parts", runSplit(t, k, tl.Layer, x, 4), want, spec.Out)
	ly := tl.Layer.Layout
	base := uintptr(unsafe.Pointer(&tl.Layer.Data[0]))
	if len(calls) != 2*3 {
		t.Fatalf("%d calls for two row blocks in three parts", len(calls))
	}
	for i, c := range calls {
		rb, part := i/3, i%3
		start := base + uintptr(rb*ly.RowBlockBytes)
		next := start + uintptr(ly.RowBlockBytes) // after the last part: the next row block
		if part < 2 {
			next = calls[i+1].w
		}
		if c.w != start+uintptr(128*54*part) || c.steps != min(54, ly.Kp/128-54*part) {
			t.Fatalf("call %d: part at %d, %d steps", i, c.w-start, c.steps)
		}
		if c.pf != c.aux || c.w+uintptr(7*c.aux+c.pf7) != next || c.acc != min(part, 1) {
			t.Fatalf("call %d (row block %d, part %d): PF %d (quad bytes %d), quad 7 prefetches at %d from the row block instead of %d, Acc %d",
				i, rb, part, c.pf, c.aux, int(c.w)+7*c.aux+c.pf7-int(start), int(next)-int(start), c.acc)
		}
	}
}

// TestI2SLongK: one-token i2s calls on a K of 8 KiB or more take gemvLong1 (two
// row quads a pass), exact against the reference over ragged M, a K at and past the
// threshold and a long one, every setting (group scales give the pass several segments),
// beside two and five tokens on the same layers.
func TestI2SLongK(t *testing.T) {
	ran := false
	rng := rand.New(rand.NewPCG(12, 12))
	for _, k := range asmKernels() {
		if k.format != quantcfg.I2S || k.ops.gemvLong1 == nil {
			continue
		}
		ran = true
		for _, c := range []struct {
			kp   int
			long bool
		}{{i2sLongK - 128, false}, {i2sLongK, true}, {14336, true}} {
			if got := k.longK(&Layer{Layout: Layout{Kp: c.kp}}); got != c.long {
				t.Errorf("%s: Kp %d: the long-K kernels %v, want %v", k.Name(), c.kp, got, c.long)
			}
		}
		checkShapes(t, k.Name(), k, rng, [][2]int{{40, 8192}, {70, 8300}, {33, 14336}}, 1<<30, []int{1, 2, 5}, false)
	}
	if !ran && ISAAvailable(ISAAVX512) {
		t.Fatal("the zmm i2s kernel has no long-K GEMV kernel")
	}
}

// TestInt16ChunksAcrossSegments: the kernels that keep int16 sums over chunks (the AVX2
// i2s GEMV of three and four tokens, the one-token int1 and int2 GEMVs, the two-token int2
// one, the two-token GEMM tile) on layers whose segments (activation groups) are longer than
// a chunk but not a multiple of it, so that chunks end both inside a segment and at its end,
// with three segments and a partial fourth.
func TestInt16ChunksAcrossSegments(t *testing.T) {
	ks := asmKernels()
	if len(ks) == 0 {
		t.Skip("no assembly kernel runs here")
	}
	// group (a multiple of 32): i2s 17 blocks (chunks of 15), int1 12 units of 8 inputs (chunks
	// of 7), int2 56 units of 4 (chunks of 42 with the default code book, 21 with {-3,-1,1,3})
	groups := map[quantcfg.Format]int{quantcfg.I2S: 17 * 128, quantcfg.Int1: 12 * 8, quantcfg.Int2: 56 * 4}
	rng := rand.New(rand.NewPCG(11, 12))
	ran := 0
	for _, k := range ks {
		g, ok := groups[k.format]
		if !ok {
			continue
		}
		books := []quantcfg.Codebook{{}}
		if k.format == quantcfg.Int2 {
			books = append(books, quantcfg.Codebook{-3, -1, 1, 3})
		}
		for _, cb := range books {
			spec := quantcfg.LayerSpec{Format: k.format, Out: 40, In: 3*g + g/2, Codebook: cb,
				Act: quantcfg.ActMode{Kind: quantcfg.ActPerGroup, Group: g}}
			tl := newTestLayer(t, rng, spec)
			for _, n := range []int{1, 2, 3, 4, 64} {
				if ok, _ := k.CanImplement(tl.Layer, n); !ok {
					continue
				}
				x := randActs(rng, n, spec.In)
				want, err := Reference(tl.Layer, x, n)
				if err != nil {
					t.Fatal(err)
				}
				checkExact(t, fmt.Sprintf("%s %v group %d n=%d", k.Name(), cb, g, n), runSplit(t, k, tl.Layer, x, n), want, spec.Out)
				ran++
			}
		}
	}
	if ran == 0 {
		t.Skip("no kernel of these formats runs here")
	}
}

// TestFloatPair: on the paths with a kernel of two row blocks a call (fmtOps.floatPair),
// one-token bf16 and f32 calls take it for every two whole row blocks of a range, and give
// the reference's sums bit for bit: ranges of whole pairs, an odd row block left over, a
// last row block part full (which the single kernel takes), with and without a bias.
func TestFloatPair(t *testing.T) {
	ran := false
	for _, k := range asmKernels() {
		if k.format != quantcfg.BF16 && k.format != quantcfg.F32 {
			continue
		}
		if k.isa != ISAAVX512 && k.ops.floatPair == nil {
			t.Errorf("%s: no kernel of two row blocks", k.Name())
		}
		if k.ops.floatPair == nil {
			continue
		}
		ran = true
		rng := rand.New(rand.NewPCG(3, uint64(k.isa)))
		for _, m := range []int{64, 96, 128, 150, 160} {
			for _, kk := range []int{1, 7, 64, 333} {
				tl := newTestLayer(t, rng, quantcfg.LayerSpec{Format: k.format, Out: m, In: kk, Bias: m%64 != 0})
				if k.floatPair(1) == nil || k.floatPair(2) != nil {
					t.Fatalf("%s %dx%d: the pair kernel is not for one token only", k.Name(), m, kk)
				}
				want, a := preparedCall(t, k, tl.Layer, randActs(rng, 1, kk), 1)
				nrb := tl.Layer.Layout.RowBlocks()
				for _, tn := range []Tuning{TuningDefault, TuningZen3} { // (zen3: the pair's L1 twin)
					old := SwitchTuning(tn)
					for _, cuts := range [][]int{{0, nrb}, {0, 1, nrb}, {0, nrb - 1, nrb}} {
						out := make([]float32, m)
						for i := range out {
							out[i] = float32(math.NaN())
						}
						for i := 0; i+1 < len(cuts); i++ {
							k.Run(tl.Layer, a, cuts[i], cuts[i+1], out)
						}
						checkExact(t, fmt.Sprintf("%s %s %dx%d cuts %v", tn, k.Name(), m, kk, cuts), out, want, m)
					}
					SwitchTuning(old)
				}
			}
		}
	}
	if !ran && ISAAvailable(ISAAVX2) {
		t.Fatal("no float kernel of two row blocks ran on an AVX2 CPU")
	}
}

// preparedCall returns the reference's outputs of l for the n tokens x, and the tokens
// quantized for l and prepared for k.
func preparedCall(t testing.TB, k Kernel, l *Layer, x []float32, n int) ([]float32, *Acts) {
	t.Helper()
	want, err := Reference(l, x, n)
	if err != nil {
		t.Fatal(err)
	}
	var a Acts
	if err := l.Quantize(x, n, &a); err != nil {
		t.Fatal(err)
	}
	k.Prepare(l, &a)
	return want, &a
}
