package engine

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"bitgo/kernels"
	"bitgo/paged"
	"bitgo/quantcfg"
)

type packedLayer struct {
	spec   quantcfg.LayerSpec
	blob   []byte
	scales []float32
	bias   []float32
}

// testPackLayers builds one layer per interesting format and setting from random weights.
func testPackLayers(t *testing.T, r *rand.Rand) []packedLayer {
	t.Helper()
	specs := []quantcfg.LayerSpec{
		{Name: "blk.0.q", Format: quantcfg.I2S, Out: 96, In: 300},
		{Name: "blk.0.k", Format: quantcfg.TL1, Out: 40, In: 256, Scale: quantcfg.PerRowScale},
		{Name: "blk.0.v", Format: quantcfg.TL2, Out: 64, In: 100, Act: quantcfg.PerTensor},
		{Name: "blk.0.up", Format: quantcfg.Int2, Out: 70, In: 256, Scale: quantcfg.GroupScale(64), Act: quantcfg.PerGroup(128), Bias: true},
		{Name: "blk.0.down", Format: quantcfg.Int1, Out: 33, In: 96},
		{Name: "blk.0.gate", Format: quantcfg.Int8, Out: 32, In: 64, Bias: true},
		{Name: "lm_head", Format: quantcfg.BF16, Out: 50, In: 32},
		{Name: "proj", Format: quantcfg.F32, Out: 3, In: 5, Bias: true},
	}
	var out []packedLayer
	for _, s := range specs {
		s = s.WithDefaults()
		wf := make([]float32, s.Out*s.In)
		for i := range wf {
			wf[i] = float32(r.NormFloat64())
		}
		var w kernels.Weights
		var scales []float32
		var err error
		switch {
		case s.Format.IsFloat():
			w.F = wf
		case s.Format.IsTernary() && s.Scale.Kind == quantcfg.ScaleRow:
			w.Q, scales, err = kernels.TernarizeRows(wf, s.Out, s.In)
		case s.Format.IsTernary():
			var sc float32
			w.Q, sc, err = kernels.Ternarize(wf)
			scales = []float32{sc}
		default:
			w.Q, scales, err = kernels.QuantizeWeights(s.Format, wf, s.Out, s.In, s.Scale, s.Codebook)
		}
		if err != nil {
			t.Fatal(err)
		}
		blob, err := kernels.PackNew(s.Format, s.Out, s.In, w)
		if err != nil {
			t.Fatal(err)
		}
		var bias []float32
		if s.Bias {
			bias = make([]float32, s.Out)
			for i := range bias {
				bias[i] = float32(r.NormFloat64())
			}
		}
		out = append(out, packedLayer{s, blob, scales, bias})
	}
	return out
}

func writePack(t *testing.T, path, layout string, layers []packedLayer) {
	t.Helper()
	w, err := paged.CreatePack(path, paged.PackOptions{Model: "test-model", Layout: layout, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		if err := w.AddLayer(paged.PackLayer{Spec: l.spec, Scales: l.scales, Bias: l.bias}, l.blob); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func mapped(path string) bool {
	b, _ := os.ReadFile("/proc/self/maps")
	return strings.Contains(string(b), path)
}

// TestLoadPackForwardMatchesReference loads a pack in place and copied (LoadOptions.Copy):
// every layer computes what the reference does; in place the file stays mapped while a layer
// of it is registered, copied it is unmapped at once and the weights lie in the arena.
func TestLoadPackForwardMatchesReference(t *testing.T) {
	for _, copied := range []bool{false, true} {
		t.Run(map[bool]string{false: "in-place", true: "copy"}[copied], func(t *testing.T) { loadPackMatches(t, copied) })
	}
}

func loadPackMatches(t *testing.T, copied bool) {
	r := rand.New(rand.NewPCG(7, 8))
	layers := testPackLayers(t, r)
	path := filepath.Join(t.TempDir(), "m.bitgo")
	writePack(t, path, PackLayout, layers)

	e, err := New(Config{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	lp, err := e.LoadPackWith(path, LoadOptions{Copy: copied})
	if err != nil {
		t.Fatal(err)
	}
	if lp.Model != "test-model" || len(lp.IDs) != len(layers) || lp.Copied != copied {
		t.Fatalf("loaded %+v", lp)
	}
	if copied {
		if mapped(path) {
			t.Fatal("pack still mapped after a copying load")
		}
		if got := e.arena.Stats().Blocks; got != len(layers) {
			t.Fatalf("%d arena blocks after copying %d layers", got, len(layers))
		}
	} else if lp.HugeMapped < 0 || e.arena.Stats().Blocks != 0 {
		t.Fatalf("in place: huge-mapped %d, %d arena blocks", lp.HugeMapped, e.arena.Stats().Blocks)
	}
	for i, l := range layers {
		id, spec, err := e.Lookup(l.spec.Name)
		if err != nil || id != lp.IDs[i] || spec != l.spec {
			t.Fatalf("Lookup(%s): %v %+v %v", l.spec.Name, id, spec, err)
		}
		kl, err := kernels.NewLayer(l.spec, l.blob, l.scales, l.bias)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{1, 3} {
			x := make([]float32, n*l.spec.In)
			for j := range x {
				x[j] = float32(r.NormFloat64())
			}
			want, err := kernels.Reference(kl, x, n)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]float32, n*l.spec.Out)
			if err := e.ForwardF32(id, x, n, got); err != nil {
				t.Fatal(err)
			}
			for j := range want {
				if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
					t.Fatalf("%s n=%d: out[%d] = %v, reference %v", l.spec.Name, n, j, got[j], want[j])
				}
			}
		}
	}
	if copied {
		if err := lp.Free(); err != nil {
			t.Fatal(err)
		}
		if s := e.arena.Stats(); s.Blocks != 0 || s.Reserved != 0 {
			t.Fatalf("arena after Free: %+v", s)
		}
		return
	}
	// The file stays mapped while any of its layers is registered.
	if !mapped(path) {
		t.Fatal("pack not mapped after LoadPack")
	}
	if err := e.Free(lp.IDs[0]); err != nil {
		t.Fatal(err)
	}
	if !mapped(path) {
		t.Fatal("pack unmapped while layers remain")
	}
	if err := lp.Free(); err != nil {
		t.Fatal(err)
	}
	if mapped(path) {
		t.Fatal("pack still mapped after every layer was freed")
	}
	if s := e.Stats(); s.Layers != 0 || s.WeightBytes != 0 {
		t.Fatalf("stats after Free: %+v", s)
	}
}

// TestLoadPackNoCopy: the weights are not copied into the Go heap.
func TestLoadPackNoCopy(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	var layers []packedLayer
	for i := range 4 {
		s := quantcfg.LayerSpec{Name: "l" + string(rune('0'+i)), Format: quantcfg.Int8, Out: 1024, In: 2048}.WithDefaults()
		q := make([]int8, s.Out*s.In)
		for j := range q {
			q[j] = int8(r.Uint32())
		}
		blob, err := kernels.PackNew(s.Format, s.Out, s.In, kernels.Weights{Q: q})
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, packedLayer{s, blob, make([]float32, s.Out), nil})
		for j := range layers[i].scales {
			layers[i].scales[j] = 0.01
		}
	}
	path := filepath.Join(t.TempDir(), "big.bitgo")
	writePack(t, path, PackLayout, layers)
	layers = nil
	e, _ := New(Config{})
	defer e.Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	lp, err := e.LoadPack(path)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if lp.Bytes != 4*1024*2048 || grew > lp.Bytes/8 {
		t.Fatalf("%d bytes of weights loaded, the Go heap grew by %d", lp.Bytes, grew)
	}
}

func TestLoadPackErrors(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	layers := testPackLayers(t, r)
	dir := t.TempDir()
	e, _ := New(Config{})
	defer e.Close()

	// A layout this engine does not read.
	old := filepath.Join(dir, "old.bitgo")
	writePack(t, old, "kernels/0", layers)
	if _, err := e.LoadPack(old); !errors.Is(err, paged.ErrPackVersion) || !strings.Contains(err.Error(), `"kernels/0"`) {
		t.Errorf("old layout: %v", err)
	}

	// Older revisions: read when no layer has a format whose layout changed since (kernels/2:
	// tl2; kernels/3: tl1; kernels/4 to kernels/8: tl2; kernels/9: int1), refused naming the
	// first such layer otherwise.
	for _, c := range []struct {
		rev     string
		changed []quantcfg.Format
	}{{"kernels/1", []quantcfg.Format{quantcfg.TL1, quantcfg.TL2, quantcfg.Int1}}, {"kernels/2", []quantcfg.Format{quantcfg.TL1, quantcfg.TL2, quantcfg.Int1}},
		{"kernels/3", []quantcfg.Format{quantcfg.TL2, quantcfg.Int1}}, {"kernels/8", []quantcfg.Format{quantcfg.Int1}}} {
		var keep []packedLayer
		for _, l := range layers {
			if !slices.Contains(c.changed, l.spec.Format) {
				keep = append(keep, l)
			}
		}
		for _, f := range c.changed {
			var only []packedLayer // the readable layers and one of format f
			for _, l := range layers {
				if l.spec.Format == f {
					only = append(slices.Clone(keep), l)
					break
				}
			}
			if only == nil {
				t.Fatalf("testPackLayers has no %s layer", f)
			}
			bad := filepath.Join(dir, "bad.bitgo")
			writePack(t, bad, c.rev, only)
			if _, err := e.LoadPack(bad); !errors.Is(err, paged.ErrPackVersion) || !strings.Contains(err.Error(), only[len(only)-1].spec.Name) ||
				!strings.Contains(err.Error(), string(f)) {
				t.Errorf("%s with %s: %v", c.rev, f, err)
			}
		}
		ok := filepath.Join(dir, "ok.bitgo")
		writePack(t, ok, c.rev, keep)
		if lp, err := e.LoadPack(ok); err != nil {
			t.Errorf("%s without %v: %v", c.rev, c.changed, err)
		} else {
			lp.Free()
		}
	}
	if s := e.Stats(); s.Layers != 0 {
		t.Errorf("%d layers registered after the refusals", s.Layers)
	}

	// A corrupt blob: refused by name, nothing registered, nothing mapped.
	good := filepath.Join(dir, "good.bitgo")
	writePack(t, good, PackLayout, layers)
	p, err := paged.OpenPack(good, paged.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	victim := p.Layers[3]
	p.Close()
	bad := filepath.Join(dir, "bad.bitgo")
	b, _ := os.ReadFile(good)
	b[victim.Blob.Offset+5] ^= 0x10
	os.WriteFile(bad, b, 0o644)
	if _, err := e.LoadPack(bad); !errors.Is(err, paged.ErrChecksum) || !strings.Contains(err.Error(), victim.Spec.Name) {
		t.Errorf("corrupt: %v", err)
	}
	// Lazily verified, the bad layer is found while registering; the ones before it are
	// rolled back.
	if _, err := e.LoadPackWith(bad, LoadOptions{Verify: paged.VerifyOnFirstUse}); !errors.Is(err, paged.ErrChecksum) {
		t.Errorf("corrupt, lazy: %v", err)
	}
	if s := e.Stats(); s.Layers != 0 {
		t.Errorf("%d layers left registered after failed loads", s.Layers)
	}
	if mapped(bad) || mapped(old) {
		t.Error("a refused pack is still mapped")
	}

	// Name collisions roll back; a prefix loads a second copy.
	lp, err := e.LoadPack(good)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.LoadPack(good); !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), good) {
		t.Errorf("second load: %v", err)
	}
	if s := e.Stats(); s.Layers != len(layers) {
		t.Errorf("%d layers after a refused second load, want %d", s.Layers, len(layers))
	}
	lp2, err := e.LoadPackWith(good, LoadOptions{Prefix: "b/", CheckCodes: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Lookup("b/blk.0.q"); err != nil {
		t.Error(err)
	}
	lp.Free()
	lp2.Free()

	// Valid checksum, invalid codes (an i2s code 3): only CheckCodes catches it.
	evil := filepath.Join(dir, "evil.bitgo")
	l0 := layers[0]
	l0.blob = append([]byte(nil), l0.blob...)
	l0.blob[0] = 0xff
	writePack(t, evil, PackLayout, []packedLayer{l0})
	if _, err := e.LoadPackWith(evil, LoadOptions{CheckCodes: true}); !errors.Is(err, kernels.ErrWeights) || !strings.Contains(err.Error(), "blk.0.q") {
		t.Errorf("invalid codes: %v", err)
	}
	if _, err := e.LoadPack(filepath.Join(dir, "missing.bitgo")); !errors.Is(err, paged.ErrPack) {
		t.Errorf("missing: %v", err)
	}
}
