package xe2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"bitgo/kernels"
	"bitgo/quantcfg"
)

// TestBinaryCacheRoundTrip: a fresh cache builds and stores; a second device loads every
// program from it; a corrupt entry is rebuilt and replaced; results never change.
func TestBinaryCacheRoundTrip(t *testing.T) {
	testDevice(t, "") // skips or fails without a device
	dir := t.TempDir()
	o := testOptions()
	o.CacheDir = dir
	spec := quantcfg.LayerSpec{Name: "cache", Format: quantcfg.Int2, Out: 40, In: 96, Bias: true}
	rng := rand.New(rand.NewPCG(9, 9))
	codes, scales, bias := RandomLayer(rng, spec)
	x := RandomActs(rng, 2, spec.In)
	want, err := Reference(spec, codes, scales, bias, x, 2)
	if err != nil {
		t.Fatal(err)
	}
	run := func() Stats {
		t.Helper()
		d, err := Open(0, o)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		l, err := d.Register(spec, codes, scales, bias)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Free()
		got, err := l.ForwardF32(x, 2)
		if err != nil {
			t.Fatal(err)
		}
		if i := firstDiff(got, want); i >= 0 {
			t.Fatalf("output %d: got %g, want %g", i, got[i], want[i])
		}
		return d.Stats()
	}
	s1 := run()
	// Prepare on a warm cache builds nothing new.
	func() {
		d, err := Open(0, o)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		l, err := d.Register(spec, codes, scales, bias)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Free()
		if err := l.Prepare(2); err != nil {
			t.Fatal(err)
		}
		if st := d.Stats(); st.Builds != 0 {
			t.Fatalf("Prepare on a warm cache built %d programs", st.Builds)
		}
	}()
	if s1.Builds == 0 || s1.CacheHits != 0 {
		t.Fatalf("cold cache: %+v, want builds and no hits", s1)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.bin"))
	if len(files) != s1.Builds {
		t.Fatalf("%d cache files for %d builds", len(files), s1.Builds)
	}
	s2 := run()
	if s2.Builds != 0 || s2.CacheHits != s1.Builds {
		t.Fatalf("warm cache: %+v, want 0 builds and %d hits", s2, s1.Builds)
	}
	// Corrupt one entry (flip a byte) and truncate another: both are rebuilt.
	b, _ := os.ReadFile(files[0])
	b[len(b)-1] ^= 0xff
	os.WriteFile(files[0], b, 0o644)
	if len(files) > 1 {
		os.WriteFile(files[1], []byte("bitgo-xe2-bin-v1\nshort"), 0o644)
	}
	s3 := run()
	if s3.Builds != min(2, len(files)) || s3.CacheHits != s1.Builds-s3.Builds {
		t.Fatalf("after corrupting entries: %+v", s3)
	}
	if s4 := run(); s4.Builds != 0 {
		t.Fatalf("rebuilt entries were not stored again: %+v", s4)
	}
}

// TestBuildErrorNamesKernel: a kernel that does not compile gives ErrBuild with the
// kernel's name, the options and the compiler's log.
func TestBuildErrorNamesKernel(t *testing.T) {
	d := testDevice(t, "")
	d.mu.Lock()
	_, err := d.kernel("gemm.cl", "xe2_decode", "-D XE2_TN=3")
	d.mu.Unlock()
	if !errors.Is(err, ErrBuild) {
		t.Fatalf("err = %v, want ErrBuild", err)
	}
	for _, s := range []string{"xe2_decode", "gemm.cl", "XE2_TN=3", "build log", "XE2_TN must be 1, 2, 4 or 8"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error does not mention %q:\n%v", s, err)
		}
	}
}

// TestSoftDivision checks the integer division against Go's float32 division on edge
// cases and a large random sample, and a GEMM built with it.
func TestSoftDivision(t *testing.T) {
	d := testDevice(t, "softdiv")
	if !d.Info.softDiv {
		t.Fatal("SoftDiv option did not select the integer division")
	}
	rng := rand.New(rand.NewPCG(2, 3))
	var a, b []float32
	f := math.Float32frombits
	for i := 0; i < 50000; i++ {
		var x, y float32
		switch i % 5 {
		case 0: // anything finite, denormals included
			x, y = f(rng.Uint32()&0x7f7fffff|rng.Uint32()&0x80000000), f(rng.Uint32()&0x7f7fffff|0x00000001)
		case 1: // denormal numerators
			x, y = f(rng.Uint32()&0x807fffff), f(rng.Uint32()&0x3fffffff|0x30000000)
		case 2: // results near the denormal boundary
			x, y = f(rng.Uint32()&0x007fffff|0x0d000000), f(rng.Uint32()&0x007fffff|0x4b000000)
		case 3: // the epilogue's range
			x, y = float32(rng.IntN(1<<20)-1<<19)*float32(math.Ldexp(rng.Float64(), -rng.IntN(20))), float32(127/math.Ldexp(0.5+rng.Float64(), rng.IntN(30)-15))
		default: // small integers (exact quotients, ties)
			x, y = float32(rng.IntN(4096)-2048), float32(rng.IntN(64)+1)
		}
		if math.IsInf(float64(x), 0) || math.IsNaN(float64(x)) || y == 0 || math.IsInf(float64(y), 0) || math.IsNaN(float64(y)) {
			continue
		}
		a, b = append(a, x), append(b, y)
	}
	d.mu.Lock()
	k, err := d.kernel("probe.cl", "xe2_kat_fp", "")
	if err != nil {
		d.mu.Unlock()
		t.Fatal(err)
	}
	out, err := d.runKAT(k, []int{roundUp(len(a), 64)}, []int{64}, 16*len(a), f32bytes(a), f32bytes(b), int32(len(a)))
	d.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		got := binary.LittleEndian.Uint32(out[16*i:])
		if want := math.Float32bits(a[i] / b[i]); got != want {
			t.Fatalf("%g / %g [%#x / %#x]: got %#x, want %#x", a[i], b[i], math.Float32bits(a[i]), math.Float32bits(b[i]), got, want)
		}
	}
	rng2 := rand.New(rand.NewPCG(4, 4))
	layers := registerCases(t, d, rng2)
	checkTile(t, layers, Tile{TN: 4, SGN: 1, SGM: 2, WGS: 1, Split: 2, Fused: true}, 3, rng2)
}

// TestOptimizedBuildExact builds one tile of the emulation with the compiler's
// optimizations on, so that no optimization (contraction, reassociation) breaks
// exactness there either.
func TestOptimizedBuildExact(t *testing.T) {
	if testing.Short() {
		t.Skip("optimized PoCL builds take tens of seconds")
	}
	d := testDevice(t, "optimized")
	rng := rand.New(rand.NewPCG(8, 8))
	layers := registerCases(t, d, rng)
	checkTile(t, layers, Tile{TN: 1, SGN: 1, SGM: 1, WGS: 1, Split: 3, Fused: true}, 1, rng)
}

func TestForwardRefusesBadInput(t *testing.T) {
	d := testDevice(t, "")
	spec := quantcfg.LayerSpec{Name: "bad", Format: quantcfg.Int2, Out: 8, In: 40}
	rng := rand.New(rand.NewPCG(1, 1))
	codes, scales, _ := RandomLayer(rng, spec)
	l, err := d.Register(spec, codes, scales, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Free()
	x := RandomActs(rng, 2, 40)
	x[40+7] = float32(math.Inf(-1))
	_, err = l.ForwardF32(x, 2)
	if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "token 1, input 7") {
		t.Errorf("infinite activation: %v", err)
	}
	if err := l.Forward(quantcfg.DTypeF32, make([]byte, 4*39), 1, make([]byte, 32)); !errors.Is(err, ErrShape) {
		t.Errorf("short activations: %v, want ErrShape", err)
	}
	if err := l.Forward(quantcfg.DTypeBF16, make([]byte, 80), 1, make([]byte, 32)); !errors.Is(err, ErrShape) {
		t.Errorf("f32-sized output for bf16: %v, want ErrShape", err)
	}
	if err := l.Forward("f16", make([]byte, 80), 1, make([]byte, 16)); !errors.Is(err, ErrInvalid) {
		t.Errorf("dtype f16: %v, want ErrInvalid", err)
	}
	if _, err := l.ForwardTile(Tile{TN: 1, SGN: 1, SGM: 1, WGS: 1, Split: 1}, quantcfg.DTypeF32, f32bytes(RandomActs(rng, 2, 40)), 2, make([]byte, 64), false); !errors.Is(err, ErrInvalid) {
		t.Errorf("decode tile of 1 token with 2 tokens: %v, want ErrInvalid", err)
	}
	if _, err := d.Register(spec, codes[:10], scales, nil); !errors.Is(err, ErrShape) {
		t.Errorf("short codes: %v, want ErrShape", err)
	}
	bad := append([]int8(nil), codes...)
	bad[3] = 7
	if _, err := d.Register(spec, bad, scales, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("code 7: %v, want ErrInvalid", err)
	}
	if _, err := d.Register(quantcfg.LayerSpec{Name: "f", Format: quantcfg.BF16, Out: 8, In: 40}, codes, nil, nil); !errors.Is(err, ErrUnsupported) {
		t.Errorf("bf16 layer: %v, want ErrUnsupported", err)
	}
	nan := append([]float32(nil), scales...)
	nan[0] = float32(math.NaN())
	if _, err := d.Register(spec, codes, nan, nil); !errors.Is(err, ErrNonFinite) {
		t.Errorf("NaN scale: %v, want ErrNonFinite", err)
	}
	if err := d.Close(); !errors.Is(err, ErrInvalid) {
		t.Errorf("Close with a registered layer: %v, want ErrInvalid", err)
	}
	l.Free()
	if _, err := l.ForwardF32(x[:40], 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Forward after Free: %v, want ErrClosed", err)
	}
}

// TestZeroCopyOnIntegrated: a device that shares host memory reads the weights in place.
func TestZeroCopyOnIntegrated(t *testing.T) {
	d := testDevice(t, "")
	spec := quantcfg.LayerSpec{Name: "zc", Format: quantcfg.Int2, Out: 16, In: 32}
	codes, scales, _ := RandomLayer(rand.New(rand.NewPCG(1, 1)), spec)
	l, err := d.Register(spec, codes, scales, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Free()
	if l.ZeroCopy() != d.Info.Integrated {
		t.Fatalf("zero copy = %v on a device with integrated = %v", l.ZeroCopy(), d.Info.Integrated)
	}
}

// TestNoOpenCL runs discovery in child processes that cannot load libOpenCL or find no
// platform: a clear "unavailable" answer, never a crash.
func TestNoOpenCL(t *testing.T) {
	if os.Getenv("XE2_NO_OPENCL_CHILD") == "1" {
		rep := Probe(testOptions(), true)
		if rep.Available || rep.Reason == "" {
			t.Fatalf("report %+v: want unavailable with a reason", rep)
		}
		_, err := Open(0, testOptions())
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Open: %v, want ErrUnavailable", err)
		}
		t.Logf("reason: %s", rep.Reason)
		return
	}
	for name, env := range map[string][]string{
		"no-library":  {"BITD_OPENCL_LIB=/nonexistent/libOpenCL.so.1"},
		"no-platform": {"OCL_ICD_VENDORS=" + t.TempDir(), "OPENCL_VENDOR_PATH=" + t.TempDir()},
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestNoOpenCL$", "-test.v")
			cmd.Env = append(append(os.Environ(), "XE2_NO_OPENCL_CHILD=1"), env...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), "reason:") {
				t.Fatalf("child did not report a reason:\n%s", out)
			}
			t.Logf("%s", out)
		})
	}
}

func TestOpenNoSuchDevice(t *testing.T) {
	testDevice(t, "")
	_, err := Open(99, testOptions())
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "xe2:99") {
		t.Fatalf("Open(99): %v, want ErrNoDevice naming xe2:99", err)
	}
	o := testOptions()
	o.AllowAnyDevice = false
	rep := Probe(o, false)
	for _, dv := range rep.Devices {
		if dv.Type != "gpu" && (dv.Usable || len(dv.Reasons) == 0) {
			t.Errorf("%s (%s) without AllowAnyDevice: usable=%v reasons=%v", dv.Name, dv.Type, dv.Usable, dv.Reasons)
		}
	}
}

// TestConcurrentForward: many goroutines on several layers of one device get exact results.
func TestConcurrentForward(t *testing.T) {
	d := testDevice(t, "")
	rng := rand.New(rand.NewPCG(6, 6))
	layers := registerCases(t, d, rng)
	type job struct {
		bl   builtLayer
		x    []float32
		n    int
		want []float32
	}
	var jobs []job
	for i, bl := range layers {
		n := []int{1, 3, 12}[i%3]
		x := RandomActs(rng, n, bl.lc.spec.In)
		want, err := Reference(bl.lc.spec, bl.codes, bl.scales, bl.bias, x, n)
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, job{bl, x, n, want})
	}
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		go func(g int) {
			for i := 0; i < 10; i++ {
				j := jobs[(g+i)%len(jobs)]
				got, err := j.bl.l.ForwardF32(j.x, j.n)
				if err == nil {
					if k := firstDiff(got, j.want); k >= 0 {
						err = fmt.Errorf("%s: output %d differs", j.bl.lc.name, k)
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}(g)
	}
	for g := 0; g < 8; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestRegisterBlob: layers given in package kernels' layout (int2 and ternary i2s, tl2)
// give the reference's results.
func TestRegisterBlob(t *testing.T) {
	d := testDevice(t, "")
	rng := rand.New(rand.NewPCG(12, 1))
	for _, f := range []quantcfg.Format{quantcfg.Int2, quantcfg.I2S, quantcfg.TL2} {
		spec := quantcfg.LayerSpec{Name: string(f), Format: f, Out: 45, In: 200}.WithDefaults()
		blob, err := kernels.PackNew(f, spec.Out, spec.In, kernels.RandomWeights(rng, f, spec.Out, spec.In, 1))
		if err != nil {
			t.Fatal(err)
		}
		_, scales, _ := RandomLayer(rng, spec)
		kl, err := kernels.NewLayer(spec, blob, scales, nil)
		if err != nil {
			t.Fatal(err)
		}
		l, err := d.RegisterBlob(spec, blob, scales, nil)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		x := RandomActs(rng, 3, spec.In)
		want, err := kernels.Reference(kl, x, 3)
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.ForwardF32(x, 3)
		l.Free()
		if err != nil {
			t.Fatal(err)
		}
		if i := firstDiff(got, want); i >= 0 {
			t.Fatalf("%s: output %d: got %g, kernels reference %g", f, i, got[i], want[i])
		}
	}
}
