package kernels

import (
	"strings"
	"testing"

	"bitgo/quantcfg"
)

// TestSelectionPrefersBestISA fails when this CPU has a SIMD path that dispatch did not
// choose: AVX-512 VNNI first, then (with AVX-512 disabled) AVX-VNNI, then AVX2.
func TestSelectionPrefersBestISA(t *testing.T) {
	for _, env := range []string{"BITD_PUREGO", "BITD_DISABLE_AVX512", "BITD_DISABLE_AVX2", "BITD_DISABLE_AVXVNNI"} {
		if envBool(env) {
			t.Skipf("%s is set", env)
		}
	}
	if !hasAsm {
		t.Skip("built without assembly")
	}
	check := func(stage string, want string) {
		t.Helper()
		for _, c := range Dispatch(1) {
			w := want
			if w != "ref" && c.Format == quantcfg.Int8 && strings.HasPrefix(want, "avxvnni") && hasINT8() {
				w = "avxvnniint8"
			}
			if w != "ref" {
				w += "/" + string(c.Format)
			}
			if c.Kernel != w {
				t.Errorf("%s: %s runs on %q, want %q (skipped: %v)", stage, c.Format, c.Kernel, w, c.Skipped)
			}
		}
		l, _ := probeLayer(quantcfg.LayerSpec{Format: quantcfg.Int2, Out: 64, In: 64})
		if k, err := Select(l, 8); err != nil || (want != "ref" && !strings.HasPrefix(k.Name(), want)) {
			t.Errorf("%s: Select(int2, n=8) = %v, %v", stage, k, err)
		}
	}
	best := func() string {
		switch {
		case ISAAvailable(ISAAVX512):
			return "avx512vnni"
		case ISAAvailable(ISAAVXVNNI):
			return "avxvnni"
		case ISAAvailable(ISAAVX2):
			return "avx2"
		}
		return "ref"
	}
	if zmmCPU() {
		check("all paths", "avx512vnni")
	} else {
		check("all paths", best())
	}
	r1 := DisableAVX512()
	defer r1()
	if cpu.avx2 && cpu.avxvnni {
		check("AVX-512 off", "avxvnni")
	} else if cpu.avx2 {
		check("AVX-512 off", "avx2")
	}
	r2 := DisableAVXVNNI()
	defer r2()
	if cpu.avx2 {
		check("AVX-512 and AVX-VNNI off", "avx2")
	}
	r3 := DisableAVX2()
	defer r3()
	check("all SIMD off", "ref")
	r3()
	r4 := DisableAsm()
	defer r4()
	check("purego", "ref")
}

func TestDispatchReasons(t *testing.T) {
	r := DisableAsm()
	defer r()
	for _, c := range Dispatch(1) {
		if c.Kernel != "ref" {
			t.Errorf("%s: %s with assembly disabled", c.Format, c.Kernel)
		}
		for _, s := range c.Skipped {
			if !strings.Contains(s, "assembly disabled") {
				t.Errorf("%s: skipped for %q, want the purego reason", c.Format, s)
			}
		}
	}
	l, _ := probeLayer(quantcfg.LayerSpec{Format: quantcfg.I2S, Out: 64, In: 64})
	if k, err := Select(l, 1); err != nil || k.Name() != "ref" {
		t.Fatalf("Select with assembly disabled: %v, %v", k, err)
	}
}

// The zmm tl2 kernels for two or more tokens (and Zen 4's for one) use vpshldw
// (AVX512_VBMI2), and the i2s ones for three and four tokens vgf2p8affineqb (GFNI): a CPU
// without either must not get the AVX-512 path, and the reason names what is missing.
func TestAVX512PathNeedsVBMI2AndGFNI(t *testing.T) {
	if !ISAAvailable(ISAAVX512) {
		t.Skip("no AVX-512 path on this CPU:", isaReason(ISAAVX512))
	}
	for _, c := range []struct {
		name string
		off  func()
		f    quantcfg.Format
		k    int
	}{
		{"AVX512_VBMI2", func() { cpu.avx512vbmi2 = false }, quantcfg.TL2, 96},
		{"GFNI", func() { cpu.gfni = false }, quantcfg.I2S, 128},
	} {
		t.Run(c.name, func(t *testing.T) {
			saved := cpu
			defer func() { cpu = saved }()
			c.off()
			if r := isaReason(ISAAVX512); !strings.Contains(r, c.name) {
				t.Errorf("AVX-512 path without %s: reason %q, want it to name %s", c.name, r, c.name)
			}
			l, _ := probeLayer(quantcfg.LayerSpec{Format: c.f, Out: 64, In: c.k})
			if k, err := Select(l, 4); err != nil || strings.HasPrefix(k.Name(), ISAAVX512.String()) {
				t.Errorf("Select(%s, n = 4) without %s: %v, %v; want a kernel off the AVX-512 path", c.f, c.name, k, err)
			}
		})
	}
}

// Every call names its kernel (RunSplit's class): every kernel has a name, and naming one
// allocates nothing, the AVX-VNNI-INT8 kernel's included.
func TestKernelNamesAllocateNothing(t *testing.T) {
	for _, k := range kernelList {
		if k.Name() == "" {
			t.Errorf("a kernel without a name: %T %+v", k, k)
		}
		if a := testing.AllocsPerRun(10, func() { _ = k.Name() }); a != 0 {
			t.Errorf("%s: %.0f allocations per Name", k.Name(), a)
		}
	}
}
