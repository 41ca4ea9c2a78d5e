package paged

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"

	"bitgo/quantcfg"
)

type testLayer struct {
	l    PackLayer
	blob []byte
}

func randBlob(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func testLayers() []testLayer {
	r := rand.New(rand.NewPCG(1, 2))
	spec := func(name string, f quantcfg.Format, out, in int, act quantcfg.ActMode, sc quantcfg.ScaleGran, bias bool) quantcfg.LayerSpec {
		return quantcfg.LayerSpec{Name: name, Format: f, Out: out, In: in, Act: act, Scale: sc, Bias: bias}.WithDefaults()
	}
	scales := func(s quantcfg.LayerSpec) []float32 {
		v := make([]float32, s.NumScales())
		for i := range v {
			v[i] = r.Float32() + 0.01
		}
		return v
	}
	var out []testLayer
	add := func(s quantcfg.LayerSpec, blobLen int) {
		l := PackLayer{Spec: s, Scales: scales(s)}
		if s.Bias {
			l.Bias = make([]float32, s.Out)
			for i := range l.Bias {
				l.Bias[i] = r.Float32() - 0.5
			}
		}
		out = append(out, testLayer{l, randBlob(r, blobLen)})
	}
	add(spec("model.layers.0.self_attn.q_proj", quantcfg.I2S, 64, 128, quantcfg.PerToken, quantcfg.PerTensorScale, false), 64*128/4)
	add(spec("model.layers.0.mlp.up_proj", quantcfg.Int2, 96, 256, quantcfg.PerGroup(64), quantcfg.GroupScale(128), true), 96*256/4)
	add(spec("model.layers.0.mlp.down_proj", quantcfg.Int8, 32, 100, quantcfg.PerTensor, quantcfg.PerRowScale, false), 32*128)
	add(spec("lm_head", quantcfg.F32, 33, 7, quantcfg.ActMode{}, quantcfg.ScaleGran{}, true), 64*4*7)
	add(spec("model.layers.1.self_attn.o_proj", quantcfg.TL2, 40, 3<<20/40, quantcfg.PerToken, quantcfg.PerRowScale, false), 3<<20) // spans two alignment units
	return out
}

func writeTestPack(t testing.TB, path string, layers []testLayer) []STEntry {
	return writeTestPackAlign(t, path, layers, 0)
}

func writeTestPackAlign(t testing.TB, path string, layers []testLayer, align int64) []STEntry {
	t.Helper()
	w, err := CreatePack(path, PackOptions{Model: "tiny", Layout: "test/1", CreatedBy: "paged test", Metadata: map[string]string{"source": "unit"}, NoSync: true, Align: align})
	if err != nil {
		t.Fatal(err)
	}
	for i, tl := range layers {
		if i%2 == 0 {
			if err := w.AddLayer(tl.l, tl.blob); err != nil {
				t.Fatal(err)
			}
			continue
		}
		bw, err := w.BeginLayer(tl.l) // streamed in pieces
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < len(tl.blob); off += 1000 {
			if _, err := bw.Write(tl.blob[off:min(off+1000, len(tl.blob))]); err != nil {
				t.Fatal(err)
			}
		}
		if err := bw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	tensors := sampleEntries()[:3]
	for _, e := range tensors {
		if err := w.AddTensor(e.TensorInfo, e.Data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.AddExternal(TensorInfo{"model.embed_tokens.weight", BF16, []int64{128256, 2560}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return tensors
}

func TestPackRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.bitgo")
	layers := testLayers()
	tensors := writeTestPack(t, path, layers)
	for _, v := range []Verify{VerifyOnOpen, VerifyOnFirstUse, VerifyNever} {
		p, err := OpenPack(path, OpenOptions{Verify: v, Populate: v == VerifyNever})
		if err != nil {
			t.Fatal(err)
		}
		if p.Model != "tiny" || p.Layout != "test/1" || p.CreatedBy != "paged test" || p.Align != DefaultAlign || p.Metadata["source"] != "unit" {
			t.Fatalf("header %+v", p.PackHeader)
		}
		if len(p.Layers) != len(layers) {
			t.Fatalf("%d layers", len(p.Layers))
		}
		for i, tl := range layers {
			got := p.Layers[i]
			if got.Spec != tl.l.Spec || !reflect.DeepEqual(got.Scales, tl.l.Scales) || !reflect.DeepEqual(got.Bias, tl.l.Bias) {
				t.Errorf("layer %d: got %+v\nwant %+v", i, got.Spec, tl.l.Spec)
			}
			if got.Blob.Offset%DefaultAlign != 0 || got.Blob.Length != int64(len(tl.blob)) || got.Blob.CRC32C != CRC32C(tl.blob) {
				t.Errorf("layer %d blob %+v", i, got.Blob)
			}
			b, err := p.LayerBlob(tl.l.Spec.Name)
			if err != nil || !bytes.Equal(b, tl.blob) {
				t.Fatalf("layer %s blob differs: %v", tl.l.Spec.Name, err)
			}
			if addr := uintptr(unsafe.Pointer(&b[0])); addr%DefaultAlign != 0 {
				t.Errorf("layer %s blob at %#x, not 2 MiB aligned in memory", tl.l.Spec.Name, addr)
			}
			if l, ok := p.Layer(tl.l.Spec.Name); !ok || l.Spec.Name != tl.l.Spec.Name {
				t.Errorf("Layer(%q)", tl.l.Spec.Name)
			}
		}
		for _, e := range tensors {
			pt, data, err := p.TensorData(e.Name)
			if err != nil || !bytes.Equal(data, e.Data) || pt.DType != e.DType || !reflect.DeepEqual(pt.Shape, e.Shape) {
				t.Errorf("tensor %s: %+v %v", e.Name, pt, err)
			}
		}
		if len(p.External) != 1 || p.External[0].Name != "model.embed_tokens.weight" || p.External[0].Shape[0] != 128256 {
			t.Errorf("external %+v", p.External)
		}
		if _, err := p.LayerBlob("model.norm.weight"); !errors.Is(err, ErrNotFound) {
			t.Errorf("a tensor served as a layer: %v", err)
		}
		if _, _, err := p.TensorData("model.embed_tokens.weight"); !errors.Is(err, ErrNotFound) {
			t.Errorf("an external tensor served: %v", err)
		}
		if _, ok := p.Layer("nope"); ok {
			t.Error("Layer(nope)")
		}
		if err := p.Verify(); err != nil {
			t.Fatal(err)
		}
		if r := p.Resident(); r <= 0 || r > p.Size() {
			t.Errorf("resident %d of %d", r, p.Size())
		}
		if err := p.Close(); err != nil || p.Close() != nil {
			t.Fatal(err)
		}
		if _, err := p.LayerBlob(layers[0].l.Spec.Name); !errors.Is(err, ErrInvalid) {
			t.Errorf("blob after Close: %v", err)
		}
	}
}

func diskUsage(st os.FileInfo) int64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Blocks * 512
	}
	return -1
}

// TestPackSparse checks that alignment padding takes no disk space.
func TestPackSparse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.bitgo")
	writeTestPack(t, path, testLayers())
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	var data int64
	for _, tl := range testLayers() {
		data += int64(len(tl.blob))
	}
	used := diskUsage(st)
	if used < 0 {
		t.Skip("no block count")
	}
	if used > data+(1<<20) || st.Size() < int64(len(testLayers()))*DefaultAlign {
		t.Errorf("file of %d bytes uses %d on disk for %d bytes of blobs", st.Size(), used, data)
	}
}

func TestPackWriterRefuses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.bitgo")
	good := testLayers()[0]
	for _, c := range []struct {
		name string
		do   func(w *PackWriter) error
		want string
	}{
		{"empty name", func(w *PackWriter) error {
			l := good.l
			l.Spec.Name = ""
			return w.AddLayer(l, good.blob)
		}, "empty name"},
		{"scale count", func(w *PackWriter) error {
			l := good.l
			l.Scales = []float32{1, 2}
			return w.AddLayer(l, good.blob)
		}, "2 scales, want 1"},
		{"nan scale", func(w *PackWriter) error {
			l := good.l
			l.Scales = []float32{float32(math.NaN())}
			return w.AddLayer(l, good.blob)
		}, "scale 0 is NaN"},
		{"bias flag", func(w *PackWriter) error {
			l := good.l
			l.Bias = []float32{1}
			return w.AddLayer(l, good.blob)
		}, "Spec.Bias is false but 1 bias values"},
		{"unset act", func(w *PackWriter) error {
			l := good.l
			l.Spec.Act = quantcfg.ActMode{}
			return w.AddLayer(l, good.blob)
		}, "must both be set"},
		{"bad spec", func(w *PackWriter) error {
			l := good.l
			l.Spec.Scale = quantcfg.GroupScale(64)
			l.Scales = make([]float32, l.Spec.NumScales())
			return w.AddLayer(l, good.blob)
		}, "scale \"group:64\" with format i2s"},
		{"codebook on i2s", func(w *PackWriter) error {
			l := good.l
			l.Spec.Codebook = quantcfg.DefaultCodebook
			return w.AddLayer(l, good.blob)
		}, "has no code book"},
		{"duplicate", func(w *PackWriter) error {
			w.AddLayer(good.l, good.blob)
			return w.AddTensor(TensorInfo{good.l.Spec.Name, U8, []int64{1}}, []byte{1})
		}, "used twice"},
		{"empty blob", func(w *PackWriter) error { return w.AddLayer(good.l, nil) }, "empty blob"},
		{"tensor short", func(w *PackWriter) error { return w.AddTensor(TensorInfo{"t", F32, []int64{2}}, make([]byte, 4)) }, "4 bytes written, its shape needs 8"},
		{"tensor long", func(w *PackWriter) error { return w.AddTensor(TensorInfo{"t", F32, []int64{1}}, make([]byte, 8)) }, "more than its 4 bytes"},
		{"tensor dtype", func(w *PackWriter) error { return w.AddExternal(TensorInfo{"t", "Q4", nil}) }, "unknown dtype"},
		{"open blob", func(w *PackWriter) error {
			w.BeginLayer(good.l)
			return w.AddTensor(TensorInfo{"t", U8, []int64{1}}, []byte{1})
		}, "still open"},
	} {
		w, err := CreatePack(path, PackOptions{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		err = c.do(w)
		if err == nil {
			err = w.Close()
		} else {
			w.Abort()
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error %v, want ErrInvalid naming %s and %q", c.name, err, path, c.want)
		}
	}
	// Close with a blob still open fails and leaves nothing behind.
	w, _ := CreatePack(path, PackOptions{NoSync: true})
	bw, _ := w.BeginLayer(good.l)
	bw.Write(good.blob)
	if err := w.Close(); !errors.Is(err, ErrInvalid) {
		t.Errorf("Close with an open blob: %v", err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("a failed pack file was left at its path")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if _, err := CreatePack(path, PackOptions{Align: 3000}); !errors.Is(err, ErrInvalid) {
		t.Errorf("align 3000: %v", err)
	}
}

// corrupt returns a copy of the file with f applied.
func corrupt(t *testing.T, src, dst string, f func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, f(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestPackCorruption(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.bitgo")
	layers := testLayers()
	writeTestPack(t, good, layers)
	p, err := OpenPack(good, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	victim := p.Layers[1]
	p.Close()
	bad := filepath.Join(dir, "bad.bitgo")

	// A flipped bit in a blob: refused on open, naming the layer.
	corrupt(t, good, bad, func(b []byte) []byte { b[victim.Blob.Offset+17] ^= 4; return b })
	_, err = OpenPack(bad, OpenOptions{})
	if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), victim.Spec.Name) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("corrupt blob on open: %v", err)
	}
	// Lazily: open succeeds, the bad layer fails when used, the others work.
	p, err = OpenPack(bad, OpenOptions{Verify: VerifyOnFirstUse})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.LayerBlob(victim.Spec.Name); !errors.Is(err, ErrChecksum) {
		t.Errorf("lazy: %v", err)
	}
	if _, err := p.LayerBlob(victim.Spec.Name); !errors.Is(err, ErrChecksum) {
		t.Errorf("lazy, second time: %v", err)
	}
	if _, err := p.LayerBlob(layers[0].l.Spec.Name); err != nil {
		t.Errorf("lazy, good layer: %v", err)
	}
	p.Close()
	// Never: open and blob succeed, VerifyBlob and Verify find it.
	p, err = OpenPack(bad, OpenOptions{Verify: VerifyNever})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.LayerBlob(victim.Spec.Name); err != nil {
		t.Errorf("never: %v", err)
	}
	if err := p.VerifyBlob(victim.Spec.Name); !errors.Is(err, ErrChecksum) {
		t.Errorf("VerifyBlob: %v", err)
	}
	if err := p.VerifyBlob("model.norm.weight"); err != nil {
		t.Errorf("VerifyBlob(tensor): %v", err)
	}
	if err := p.VerifyBlob("model.embed_tokens.weight"); !errors.Is(err, ErrNotFound) {
		t.Errorf("VerifyBlob(external): %v", err)
	}
	if err := p.Verify(); !errors.Is(err, ErrChecksum) || strings.Count(err.Error(), "CRC-32C") != 1 {
		t.Errorf("Verify: %v", err)
	}
	p.Close()

	for _, c := range []struct {
		name string
		edit func([]byte) []byte
		err  error
		want string
	}{
		{"empty", func(b []byte) []byte { return nil }, ErrPack, "shorter than the 64-byte preamble"},
		{"truncated", func(b []byte) []byte { return b[:len(b)-10] }, ErrPack, "outside the file"},
		{"truncated in blobs", func(b []byte) []byte { return b[:victim.Blob.Offset+5] }, ErrPack, "outside the file"},
		{"appended", func(b []byte) []byte { return append(b, 0) }, ErrPack, "the header must end the file"},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }, ErrPack, "not a bitgo pack file"},
		{"major", func(b []byte) []byte { b[8] = 2; return b }, ErrPackVersion, "format version 2.0"},
		{"preamble", func(b []byte) []byte { b[20] ^= 1; return b }, ErrChecksum, "preamble CRC-32C"},
		{"header", func(b []byte) []byte { b[len(b)-3] ^= 1; return b }, ErrChecksum, "header CRC-32C"},
	} {
		corrupt(t, good, bad, c.edit)
		_, err := OpenPack(bad, OpenOptions{})
		if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), bad) {
			t.Errorf("%s: error %v, want %v naming the file and %q", c.name, err, c.err, c.want)
		}
	}
	if _, err := OpenPack(filepath.Join(dir, "missing.bitgo"), OpenOptions{}); !errors.Is(err, ErrPack) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
	if _, err := OpenPack(dir, OpenOptions{}); !errors.Is(err, ErrPack) {
		t.Errorf("directory: %v", err)
	}
}

// buildPack assembles a pack file around a hand-made header, with valid checksums for the
// header and preamble, so that the header checks themselves are exercised. Blob bytes are
// zero; blob CRCs in the header are whatever the caller wrote.
func buildPack(hdr any, blobEnd int64) []byte {
	h, err := msgpack.Marshal(hdr)
	if err != nil {
		panic(err)
	}
	hoff := max(blobEnd, PreambleSize)
	b := make([]byte, hoff, hoff+int64(len(h)))
	b = append(b, h...)
	pre := preamble{Major: PackMajor, Minor: 7, HeaderOffset: uint64(hoff), HeaderLength: uint64(len(h)), HeaderCRC: CRC32C(h)}.encode()
	copy(b, pre[:])
	return b
}

func validWire() wireHeader {
	zero := make([]byte, 4096)
	return wireHeader{
		Model: "m", Layout: "l", Align: 4096,
		Layers: []wireLayer{{
			Name: "a", Format: "i2s", Out: 32, In: 128, Act: "per-token", Scale: "tensor",
			Scales: []float32{1}, Offset: 4096, Length: 1024, CRC32C: CRC32C(zero[:1024]),
		}, {
			Name: "b", Format: "int2", Out: 32, In: 128, Act: "per-token", Scale: "row", Codebook: []int{-3, -1, 1, 3},
			Scales: make([]float32, 32), Bias: make([]float32, 32), Offset: 8192, Length: 1024, CRC32C: CRC32C(zero[:1024]),
		}},
		Tensors: []wireTensor{{Name: "n", DType: "F32", Shape: []uint64{4}, Offset: 12288, Length: 16, CRC32C: CRC32C(zero[:16])}},
	}
}

func TestParsePackHeaderChecks(t *testing.T) {
	if p, err := ParsePack("ok", buildPack(validWire(), 16384)); err != nil {
		t.Fatalf("valid hand-made pack (minor version 7): %v", err)
	} else if err := p.Verify(); err != nil {
		t.Fatal(err)
	}
	// Unknown keys (a later minor version) are ignored.
	withExtra := map[string]any{"model": "m", "layout": "l", "align": 4096, "layers": []any{}, "tensors": []any{}, "future_key": []int{1, 2}}
	if _, err := ParsePack("extra", buildPack(withExtra, 0)); err != nil {
		t.Errorf("unknown key: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(*wireHeader)
		want string
	}{
		{"align", func(w *wireHeader) { w.Align = 5000 }, "alignment 5000"},
		{"misaligned", func(w *wireHeader) { w.Layers[0].Offset = 4100 }, `layer "a": blob offset 4100 is not a multiple`},
		{"in preamble", func(w *wireHeader) { w.Layers[0].Offset = 0 }, `layer "a": blob [0, +1024) is not between`},
		{"past header", func(w *wireHeader) { w.Tensors[0].Offset = 16384 }, `tensor "n": blob [16384, +16) is not between`},
		{"overlap", func(w *wireHeader) { w.Layers[1].Offset = 4096 }, "overlaps"},
		{"empty blob", func(w *wireHeader) { w.Layers[0].Length = 0 }, `layer "a": empty blob`},
		{"format", func(w *wireHeader) { w.Layers[0].Format = "q4_0" }, `format "q4_0"`},
		{"format case", func(w *wireHeader) { w.Layers[0].Format = "I2S" }, `format "I2S"`},
		{"act", func(w *wireHeader) { w.Layers[0].Act = "per-row" }, `act "per-row"`},
		{"act spelling", func(w *wireHeader) { w.Layers[0].Act = "Per-Token" }, "canonical spelling"},
		{"act unset", func(w *wireHeader) { w.Layers[0].Act = "" }, "must both be set"},
		{"scale", func(w *wireHeader) { w.Layers[0].Scale = "group:64" }, `scale "group:64" with format i2s`},
		{"scales count", func(w *wireHeader) { w.Layers[1].Scales = w.Layers[1].Scales[:31] }, `layer "b": 31 scales, want 32`},
		{"inf scale", func(w *wireHeader) { w.Layers[0].Scales[0] = float32(math.Inf(1)) }, `layer "a": scale 0 is +Inf`},
		{"bias count", func(w *wireHeader) { w.Layers[1].Bias = w.Layers[1].Bias[:3] }, `layer "b": 3 bias values, want out_features = 32`},
		{"nan bias", func(w *wireHeader) { w.Layers[1].Bias[5] = float32(math.NaN()) }, `layer "b": bias 5 is NaN`},
		{"codebook missing", func(w *wireHeader) { w.Layers[1].Codebook = nil }, `layer "b": codebook has 0 levels`},
		{"codebook dup", func(w *wireHeader) { w.Layers[1].Codebook = []int{1, 1, 2, 3} }, "levels must be distinct"},
		{"codebook range", func(w *wireHeader) { w.Layers[1].Codebook = []int{1, 300, 2, 3} }, "codebook[1] = 300"},
		{"codebook on i2s", func(w *wireHeader) { w.Layers[0].Codebook = []int{-2, -1, 0, 1} }, "has no code book"},
		{"shape", func(w *wireHeader) { w.Layers[0].Out = 0 }, "out_features (M) = 0"},
		{"shape huge", func(w *wireHeader) { w.Layers[0].In = 1 << 40 }, "exceeds the"},
		{"dup name", func(w *wireHeader) { w.Tensors[0].Name = "a" }, `name "a" appears twice`},
		{"empty name", func(w *wireHeader) { w.Layers[0].Name = "" }, "empty name"},
		{"tensor dtype", func(w *wireHeader) { w.Tensors[0].DType = "f32" }, `tensor "n": unknown dtype "f32"`},
		{"tensor length", func(w *wireHeader) { w.Tensors[0].Length = 12 }, `tensor "n": shape [4] of F32 needs 16 bytes, the blob has 12`},
		{"tensor shape", func(w *wireHeader) { w.Tensors[0].Shape = []uint64{1 << 63} }, "exceeds 2^63"},
		{"external dup", func(w *wireHeader) { w.External = []wireExternal{{Name: "n", DType: "F32", Shape: []uint64{}}} }, `name "n" appears twice`},
	} {
		w := validWire()
		c.edit(&w)
		_, err := ParsePack("h.bitgo", buildPack(w, 16384))
		if !errors.Is(err, ErrPack) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "h.bitgo") {
			t.Errorf("%s: error %v, want ErrPack naming the file and %q", c.name, err, c.want)
		}
	}
	// Structural decoding problems.
	for _, c := range []struct {
		name string
		hdr  any
		want string
	}{
		{"not a map", []int{1, 2}, "does not decode"},
		{"wrong type", map[string]any{"align": "big"}, "does not decode"},
		{"float64 scales", map[string]any{"align": 4096, "layers": []any{map[string]any{"name": "x", "scales": []float64{1}}}}, "does not decode"},
	} {
		_, err := ParsePack("h.bitgo", buildPack(c.hdr, 0))
		if !errors.Is(err, ErrPack) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// Bytes after the msgpack map.
	b := buildPack(validWire(), 16384)
	b = append(b, 0xc0)
	hlen := binary.LittleEndian.Uint64(b[24:]) + 1
	binary.LittleEndian.PutUint64(b[24:], hlen)
	binary.LittleEndian.PutUint32(b[32:], CRC32C(b[len(b)-int(hlen):]))
	binary.LittleEndian.PutUint32(b[60:], CRC32C(b[:60]))
	if _, err := ParsePack("h.bitgo", b); !errors.Is(err, ErrPack) || !strings.Contains(err.Error(), "1 bytes follow the header") {
		t.Errorf("trailing msgpack: %v", err)
	}
}

// TestCRC32CCheckValue pins the checksum FORMAT.md specifies.
func TestCRC32CCheckValue(t *testing.T) {
	if got := CRC32C([]byte("123456789")); got != 0xE3069283 {
		t.Fatalf("CRC-32C check value %#08x, want 0xE3069283", got)
	}
	if string(buildPack(validWire(), 16384)[:8]) != "BITGOPAK" {
		t.Fatal("magic")
	}
}
