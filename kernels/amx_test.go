//go:build !noasm

package kernels

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"bitgo/quantcfg"

	"github.com/klauspost/cpuid/v2"
)

// TestAMXSelected: on Linux on a CPU with AMX-TILE and AMX-INT8, the tile state was granted
// and the AMX GEMM can run, unless BITD_DISABLE_AMX switched it off.
func TestAMXSelected(t *testing.T) {
	if runtime.GOOS != "linux" || !cpuid.CPU.Supports(cpuid.AMXTILE, cpuid.AMXINT8) {
		t.Skip("no AMX-INT8 here")
	}
	if envBool("BITD_DISABLE_AMX") {
		if AMXReason() == "" {
			t.Fatal("BITD_DISABLE_AMX=1, yet the AMX GEMM is on")
		}
		return
	}
	if r := AMXReason(); r != "" && isaReason(ISAAVX512) == "" {
		t.Fatalf("this CPU has AMX-INT8, yet the AMX GEMM cannot run: %s", r)
	}
	restore := DisableAMX()
	if AMXReason() == "" {
		t.Error("DisableAMX left the AMX GEMM on")
	}
	restore()
}

// TestAMXGemm: the zmm path's GEMM of every integer format runs on AMX where every segment
// is whole 64-input steps (one segment; groups of 64 and 128 inputs) and on the zmm
// micro-kernel otherwise (groups of 32, a padded K not a multiple of 64; i2s has neither), and both give the
// reference's outputs bit for bit: 64 to 130 tokens, so that a call's last token group has 1,
// 15, 16, 17, 31 or 32 tokens (one token tile or two), over one and several row blocks. Below
// gemmMinN the GEMM runs only on AMX, from amxMinN tokens (the GEMV below them, and where
// AMX cannot take the layer): 11 to 33 tokens cover each format's threshold and one less.
func TestAMXGemm(t *testing.T) {
	if r := AMXReason(); r != "" {
		t.Skipf("AMX: %s", r)
	}
	rng := rand.New(rand.NewPCG(11, 64))
	ns := []int{11, 12, 15, 16, 19, 20, 33, 64, 65, 79, 80, 81, 95, 96, 130}
	if testing.Short() {
		ns = []int{11, 12, 15, 16, 19, 20, 65, 81, 96}
	}
	shapes := [][2]int{{70, 256}, {33, 1088}, {40, 300}}
	for _, k := range asmKernels() {
		if k.isa != ISAAVX512 || k.ops.amx == nil {
			continue
		}
		amx, zmm := 0, 0
		eachShape(t, k.Name(), k, k.format, rng, shapes, 1<<30, ns, func(what string, tl testLayer, x []float32, n int, want []float32) {
			p := k.plan(tl.Layer, n)
			ly := tl.Layer.Layout
			wantAMX := ly.Kp%64 == 0 && tl.Layer.SegLen%64 == 0 && n >= amxMinN(k.format)
			if k.format == quantcfg.I2S && n <= amxvMaxN && tl.Layer.Segments() == 1 {
				wantAMX = false // i2s's GEMV on AMX (TestAMXGemvI2S)
			}
			if wantGemm := n >= gemmMinN || wantAMX; p.amx != wantAMX || p.gemm != wantGemm {
				t.Fatalf("%s: Kp %d, segments of %d: GEMM %v, AMX %v, want %v, %v", what, ly.Kp, tl.Layer.SegLen, p.gemm, p.amx, wantGemm, wantAMX)
			}
			switch {
			case p.amx:
				amx++
			case p.gemm:
				zmm++
			}
			checkExact(t, what, runSplit(t, k, tl.Layer, x, n), want, tl.Spec.Out)
		})
		// (i2s pads K to 128 and groups activations by 128: always AMX.)
		if amx == 0 || zmm == 0 && k.format != quantcfg.I2S {
			t.Errorf("%s: %d cases on AMX, %d on the zmm micro-kernel: both should run", k.Name(), amx, zmm)
		}
	}
}

// TestAMXConfig: the tile configuration of gemmAMX for T tokens.
func TestAMXConfig(t *testing.T) {
	for _, c := range []struct {
		T           int
		rows        [8]byte
		colsUnused0 bool
	}{
		{1, [8]byte{1, 1, 0, 0, 1, 0, 16, 16}, true},
		{16, [8]byte{16, 16, 0, 0, 16, 0, 16, 16}, true},
		{17, [8]byte{16, 16, 1, 1, 16, 1, 16, 16}, false},
		{32, [8]byte{16, 16, 16, 16, 16, 16, 16, 16}, false},
	} {
		var cfg [64]byte
		amxConfig(&cfg, c.T)
		if cfg[0] != 1 {
			t.Errorf("T=%d: palette %d", c.T, cfg[0])
		}
		for tile := 0; tile < 16; tile++ {
			rows, cols := cfg[48+tile], int(cfg[16+2*tile])|int(cfg[17+2*tile])<<8
			want, wantCols := byte(0), 0
			if tile < 8 {
				want = c.rows[tile]
			}
			if want > 0 {
				wantCols = 64
			}
			if rows != want || cols != wantCols {
				t.Errorf("T=%d tile %d: %d rows of %d bytes, want %d of %d", c.T, tile, rows, cols, want, wantCols)
			}
		}
	}
}

// TestAMXPeakOps: the peak loop runs and counts 4 tile products an iteration.
func TestAMXPeakOps(t *testing.T) {
	if r := AMXReason(); r != "" {
		if AMXPeakOps(10) != 0 {
			t.Fatal("AMXPeakOps counted operations where AMX cannot run")
		}
		t.Skipf("AMX: %s", r)
	}
	if got, want := AMXPeakOps(10), 10.0*4*16*16*64*2; got != want {
		t.Fatalf("AMXPeakOps(10) = %v, want %v", got, want)
	}
	if AMXPeakOps(0) != 0 {
		t.Fatal("AMXPeakOps(0) counted operations")
	}
}

// TestOnAMX: OnAMX and AMXMinTokens agree with the plan a call gets: an integer layer whose
// K is whole 64-input steps runs on AMX from AMXMinTokens tokens and not one token below
// (where AMX can run), a K padded to a multiple of 32 only never does (not even at gemmMinN,
// where the zmm GEMM takes it), nor the float formats or the reference kernel.
func TestOnAMX(t *testing.T) {
	on := AMXReason() == ""
	for _, k := range append(asmKernels(), nil) {
		var kern Kernel = Ref()
		f := quantcfg.I2S
		if k != nil {
			kern, f = k, k.format
		}
		for _, in := range []int{256, 96, 4100} {
			minN := AMXMinTokens(f, in)
			if f.IsFloat() != (minN == 0) {
				t.Fatalf("%s: AMXMinTokens = %d", f, minN)
			}
			l, err := probeLayer(quantcfg.LayerSpec{Name: "p", Format: f, Out: 64, In: in})
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range []int{minN - 1, minN, gemmMinN} {
				if n < 1 {
					continue
				}
				want := on && k != nil && k.isa == ISAAVX512 && !f.IsFloat() && n >= minN && l.Layout.Kp%64 == 0
				if got := OnAMX(kern, l, n); got != want {
					t.Errorf("%s K=%d n=%d: OnAMX %v, want %v", kern.Name(), in, n, got, want)
				}
			}
		}
	}
}

// TestAMXGemvI2S: i2s's small-batch GEMV on AMX (gemvAMXI2S) gives the reference's outputs
// bit for bit for every token count it takes (amxvMinN..amxvMaxN) and every i2s setting
// (per-token and per-tensor activations; per-group ones keep the vpdpbusd GEMV), over K of
// one block (one pair of one block), two, three (a last pair of one) and longer, a partial
// last row block, several row blocks and more than one call's group of them (amxvGroup);
// one token fewer or more runs elsewhere.
func TestAMXGemvI2S(t *testing.T) {
	if r := AMXReason(); r != "" {
		t.Skipf("AMX: %s", r)
	}
	var k *simdKernel
	for _, kk := range asmKernels() {
		if kk.isa == ISAAVX512 && kk.format == quantcfg.I2S {
			k = kk
		}
	}
	if k == nil || k.ops.amxv == nil {
		t.Fatal("the zmm i2s kernel has no AMX GEMV")
	}
	rng := rand.New(rand.NewPCG(12, 5))
	var ns []int
	for n := amxvMinN(4096) - 1; n <= amxvMaxN+1; n++ {
		ns = append(ns, n)
	}
	shapes := [][2]int{{33, 100}, {70, 256}, {40, 300}, {64, 1100}, {32, 2560}, {33*amxvGroup + 5, 384}, {40, 4100}}
	on := 0
	eachShape(t, k.Name(), k, quantcfg.I2S, rng, shapes, 1<<30, ns, func(what string, tl testLayer, x []float32, n int, want []float32) {
		p := k.plan(tl.Layer, n)
		wantV := n >= amxvMinN(tl.Layer.Layout.Kp) && n <= amxvMaxN && tl.Layer.Segments() == 1
		if p.amxv != wantV {
			t.Fatalf("%s: AMX GEMV %v, want %v", what, p.amxv, wantV)
		}
		if p.amxv {
			on++
		}
		checkExact(t, what, runSplit(t, k, tl.Layer, x, n), want, tl.Spec.Out)
	})
	if on == 0 {
		t.Fatal("no case ran on the AMX GEMV")
	}
}

// TestAMXGemvInt2: int2's small-batch GEMV on AMX (gemvAMXInt2) gives the reference's
// outputs bit for bit for every token count it takes (amxv2MinN..amxvMaxN) and every int2
// setting (code books, activation scales; per-group ones keep the vpdpbusd GEMV), over K of
// one 64-input step, two, an odd number and longer, a partial last row block, several row
// blocks and more than one call's group of them (amxvGroup); K whose padding is not a
// multiple of 64, one token fewer or more run elsewhere.
func TestAMXGemvInt2(t *testing.T) {
	if r := AMXReason(); r != "" {
		t.Skipf("AMX: %s", r)
	}
	var k *simdKernel
	for _, kk := range asmKernels() {
		if kk.isa == ISAAVX512 && kk.format == quantcfg.Int2 {
			k = kk
		}
	}
	if k == nil || k.ops.amxv == nil {
		t.Fatal("the zmm int2 kernel has no AMX GEMV")
	}
	rng := rand.New(rand.NewPCG(12, 6))
	var ns []int
	for n := amxv2MinN - 1; n <= amxvMaxN+1; n++ {
		ns = append(ns, n)
	}
	shapes := [][2]int{{33, 64}, {70, 100}, {40, 192}, {64, 1100}, {32, 2560}, {33*amxvGroup + 5, 320}, {40, 4100}, {35, 96}}
	on := 0
	eachShape(t, k.Name(), k, quantcfg.Int2, rng, shapes, 1<<30, ns, func(what string, tl testLayer, x []float32, n int, want []float32) {
		p := k.plan(tl.Layer, n)
		ly := tl.Layer.Layout
		wantV := n >= amxv2MinN && n <= amxvMaxN && tl.Layer.Segments() == 1 && ly.Kp%64 == 0
		if p.amxv != wantV {
			t.Fatalf("%s: AMX GEMV %v, want %v", what, p.amxv, wantV)
		}
		if p.amxv {
			on++
		}
		checkExact(t, what, runSplit(t, k, tl.Layer, x, n), want, tl.Spec.Out)
	})
	if on == 0 {
		t.Fatal("no case ran on the AMX GEMV")
	}
}
