package paged

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"
)

func f32bytes(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func sampleEntries() []STEntry {
	bf := make([]byte, 2*6)
	for i := range 6 {
		binary.LittleEndian.PutUint16(bf[2*i:], uint16(math.Float32bits(float32(i)-2.5)>>16))
	}
	return []STEntry{
		{TensorInfo{"model.layers.0.self_attn.q_proj.weight", U8, []int64{2, 8}}, bytes.Repeat([]byte{0x99}, 16)},
		{TensorInfo{"model.layers.0.self_attn.q_proj.weight_scale", F32, []int64{1}}, f32bytes(0.25)},
		{TensorInfo{"model.norm.weight", BF16, []int64{2, 3}}, bf},
		{TensorInfo{"scalar", F64, nil}, make([]byte, 8)},
		{TensorInfo{"empty", I32, []int64{0, 5}}, nil},
		{TensorInfo{"flags", BOOL, []int64{3}}, []byte{1, 0, 1}},
	}
}

func TestSafetensorsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	entries := sampleEntries()
	md := map[string]string{"format": "pt"}
	if err := WriteSafetensors(path, entries, md); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	if n := binary.LittleEndian.Uint64(raw); n%8 != 0 {
		t.Errorf("header length %d not padded to 8", n)
	}
	s, err := OpenSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Metadata["format"] != "pt" || len(s.Metadata) != 1 {
		t.Errorf("metadata %v", s.Metadata)
	}
	if len(s.Tensors) != len(entries) {
		t.Fatalf("%d tensors, want %d", len(s.Tensors), len(entries))
	}
	for _, e := range entries {
		info, data, err := s.Tensor(e.Name)
		if err != nil {
			t.Fatal(err)
		}
		if info.DType != e.DType || len(info.Shape) != len(e.Shape) || !bytes.Equal(data, e.Data) {
			t.Errorf("%s: got %+v %x, want %+v %x", e.Name, info, data, e.TensorInfo, e.Data)
		}
		// Zero copy: the bytes are inside the file mapping.
		if len(data) > 0 {
			p := uintptr(unsafe.Pointer(&data[0]))
			lo := uintptr(unsafe.Pointer(&s.mapped[0]))
			if p < lo || p >= lo+uintptr(len(s.mapped)) {
				t.Errorf("%s: data is not in the mapping", e.Name)
			}
		}
	}
	if _, _, err := s.Tensor("nope"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), path) {
		t.Errorf("missing tensor: %v", err)
	}
	if !faults(func() { s.Data(s.Tensors[len(s.Tensors)-1])[0] = 1 }) {
		t.Error("the mapping is writable")
	}
	if err := s.Close(); err != nil || s.Close() != nil {
		t.Fatal("close twice", err)
	}
}

func TestWriteSafetensorsRefuses(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		e    []STEntry
		want string
	}{
		{[]STEntry{{TensorInfo{"a", F32, []int64{2}}, make([]byte, 4)}}, "needs 8 bytes, got 4"},
		{[]STEntry{{TensorInfo{"a", "F17", []int64{1}}, make([]byte, 4)}}, "unknown dtype"},
		{[]STEntry{{TensorInfo{"a", U8, nil}, []byte{1}}, {TensorInfo{"a", U8, nil}, []byte{1}}}, "given twice"},
		{[]STEntry{{TensorInfo{"__metadata__", U8, nil}, []byte{1}}}, "not allowed"},
	} {
		path := filepath.Join(dir, "x.safetensors")
		err := WriteSafetensors(path, c.e, nil)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.e, err, c.want)
		}
		if _, err := os.Stat(path); err == nil {
			t.Errorf("a refused file was written")
		}
	}
	// A directory as the path is refused before anything is written beside it.
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	ok := []STEntry{{TensorInfo{"a", U8, []int64{1}}, []byte{1}}}
	if err := WriteSafetensors(sub, ok, nil); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), sub+": invalid argument: is a directory") {
		t.Errorf("a directory as the path: error %v", err)
	}
	if _, err := CreatePack(sub, PackOptions{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "pack "+sub+": invalid argument: is a directory") {
		t.Errorf("CreatePack of a directory: error %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// stFile builds a safetensors file from a literal header and a data section.
func stFile(header string, data []byte) []byte {
	b := make([]byte, 8, 8+len(header)+len(data))
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

func TestParseSafetensorsBadInput(t *testing.T) {
	huge := make([]byte, 8)
	binary.LittleEndian.PutUint64(huge, MaxSafetensorsHeader+1)
	past := make([]byte, 16)
	binary.LittleEndian.PutUint64(past, 100)
	t8 := `"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}`
	for _, c := range []struct {
		name string
		file []byte
		want string
	}{
		{"short", []byte{1, 2, 3}, "shorter than the 8-byte header length"},
		{"huge header", huge, "exceeds the 100000000-byte limit"},
		{"header past end", past, "runs past the end of the file"},
		{"not an object", stFile(`[1,2]`, nil), "does not start with '{'"},
		{"not json", stFile(`{"t":`, nil), "not valid JSON"},
		{"bad utf8", stFile("{\"\xff\":1}", nil), "not valid UTF-8"},
		{"duplicate key", stFile(`{`+t8+`,`+t8+`}`, make([]byte, 8)), `key "t" appears twice`},
		{"trailing junk", stFile(`{`+t8+`}xx`, make([]byte, 8)), "unexpected data after the JSON object"},
		{"unknown dtype", stFile(`{"t":{"dtype":"F12","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)), `tensor "t": unknown dtype "F12"`},
		{"unknown field", stFile(`{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}}`, make([]byte, 8)), `tensor "t": unknown field "x"`},
		{"missing field", stFile(`{"t":{"dtype":"F32","shape":[2]}}`, make([]byte, 8)), `tensor "t": field "data_offsets" is missing`},
		{"negative dim", stFile(`{"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, make([]byte, 8)), "not a non-negative integer"},
		{"float dim", stFile(`{"t":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}}`, make([]byte, 8)), "not a non-negative integer"},
		{"three offsets", stFile(`{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}}`, make([]byte, 8)), "want [begin, end]"},
		{"begin after end", stFile(`{"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}`, make([]byte, 8)), "begin is after end"},
		{"shape mismatch", stFile(`{"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, make([]byte, 8)), `tensor "t": shape [3] of F32 needs 12 bytes, data_offsets [0, 8] hold 8`},
		{"overflow", stFile(`{"t":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`, make([]byte, 8)), "overflows"},
		{"past data", stFile(`{`+t8+`}`, make([]byte, 4)), `tensor "t": data_offsets [0, 8]: past the end of the data section (4 bytes)`},
		{"gap", stFile(`{"t":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 12)), `tensor "t": data_offsets [4, 12] leave a gap of 4 bytes`},
		{"overlap", stFile(`{`+t8+`,"u":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, make([]byte, 8)), `tensor "u": data_offsets [4, 8] overlap tensor "t"`},
		{"tail", stFile(`{`+t8+`}`, make([]byte, 12)), `4 bytes follow the last tensor's data (tensor "t"`},
		{"bad metadata", stFile(`{"__metadata__":{"a":1}}`, nil), `__metadata__["a"]: want a string`},
		{"entry not object", stFile(`{"t":[1]}`, nil), `tensor "t": want an object`},
	} {
		_, err := ParseSafetensors("f.safetensors", c.file)
		if !errors.Is(err, ErrSafetensors) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "f.safetensors") {
			t.Errorf("%s: error %v, want ErrSafetensors naming the file and %q", c.name, err, c.want)
		}
	}
	// Accepted edge cases: empty header object, padding, null metadata.
	for _, ok := range [][]byte{stFile(`{}`, nil), stFile(`{`+t8+`}     `, make([]byte, 8)), stFile(`{"__metadata__":null}`, nil)} {
		if _, err := ParseSafetensors("ok", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}

func TestOpenSafetensorsFileErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenSafetensors(filepath.Join(dir, "missing.safetensors")); !errors.Is(err, ErrSafetensors) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := OpenSafetensors(dir); !errors.Is(err, ErrSafetensors) {
		t.Errorf("directory: %v", err)
	}
	// A truncated real file names the tensor that runs past the end.
	path := filepath.Join(dir, "m.safetensors")
	if err := WriteSafetensors(path, sampleEntries(), nil); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	os.Truncate(path, st.Size()-1)
	_, err := OpenSafetensors(path)
	if !errors.Is(err, ErrSafetensors) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("truncated: %v", err)
	}
}

func TestCheckpointSharded(t *testing.T) {
	dir := t.TempDir()
	e := sampleEntries()
	if err := WriteSafetensors(filepath.Join(dir, "model-00001-of-00002.safetensors"), e[:3], nil); err != nil {
		t.Fatal(err)
	}
	if err := WriteSafetensors(filepath.Join(dir, "model-00002-of-00002.safetensors"), e[3:], nil); err != nil {
		t.Fatal(err)
	}
	wm := map[string]string{}
	for i, x := range e {
		wm[x.Name] = "model-00001-of-00002.safetensors"
		if i >= 3 {
			wm[x.Name] = "model-00002-of-00002.safetensors"
		}
	}
	if err := WriteSafetensorsIndex(dir, wm, map[string]any{"total_size": 42}); err != nil {
		t.Fatal(err)
	}
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Files) != 2 || len(c.Names()) != len(e) {
		t.Fatalf("%d files, names %v", len(c.Files), c.Names())
	}
	for _, x := range e {
		info, data, err := c.Tensor(x.Name)
		if err != nil || info.DType != x.DType || !bytes.Equal(data, x.Data) {
			t.Errorf("%s: %+v %x %v", x.Name, info, data, err)
		}
	}
	if _, _, err := c.Tensor("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing: %v", err)
	}
	c.Close()

	// Broken indexes, each named.
	bad := func(name string, edit func(map[string]string), want string) {
		t.Helper()
		m := map[string]string{}
		for k, v := range wm {
			m[k] = v
		}
		edit(m)
		if err := WriteSafetensorsIndex(dir, m, nil); err != nil {
			t.Fatal(err)
		}
		c, err := OpenCheckpoint(dir)
		if err == nil {
			c.Close()
		}
		if !errors.Is(err, ErrSafetensors) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), SafetensorsIndex) {
			t.Errorf("%s: error %v, want %q", name, err, want)
		}
	}
	bad("missing shard", func(m map[string]string) { m["extra"] = "model-00003-of-00003.safetensors" }, `shard "model-00003-of-00003.safetensors", named in weight_map, does not exist`)
	bad("path escape", func(m map[string]string) { m["extra"] = "../evil.safetensors" }, "not a plain file name")
	bad("wrong shard", func(m map[string]string) { m["scalar"] = "model-00001-of-00002.safetensors" }, `holds tensor "scalar", which weight_map places in "model-00001-of-00002.safetensors"`)
	bad("unlisted", func(m map[string]string) { delete(m, "flags") }, `holds tensor "flags", which weight_map does not list`)
	bad("empty", func(m map[string]string) { clear(m) }, "weight_map is missing or empty")
	os.WriteFile(filepath.Join(dir, SafetensorsIndex), []byte("{nope"), 0o644)
	if _, err := OpenCheckpoint(dir); !errors.Is(err, ErrSafetensors) || !strings.Contains(err.Error(), "not a valid index") {
		t.Errorf("bad json: %v", err)
	}

	// Without an index, several shards are ambiguous; none is an error; one is used.
	os.Remove(filepath.Join(dir, SafetensorsIndex))
	if _, err := OpenCheckpoint(dir); !errors.Is(err, ErrSafetensors) || !strings.Contains(err.Error(), "2 .safetensors files") {
		t.Errorf("ambiguous: %v", err)
	}
	if _, err := OpenCheckpoint(t.TempDir()); !errors.Is(err, ErrSafetensors) {
		t.Errorf("empty dir: %v", err)
	}
	os.Remove(filepath.Join(dir, "model-00002-of-00002.safetensors"))
	c, err = OpenCheckpoint(dir)
	if err != nil || len(c.Names()) != 3 {
		t.Fatalf("single unnamed shard: %v", err)
	}
	c.Close()
}

func TestDecodeFloat32(t *testing.T) {
	// F16: one, -2, max, min subnormal, largest subnormal, inf, nan, -0.
	halves := []uint16{0x3c00, 0xc000, 0x7bff, 0x0001, 0x03ff, 0x7c00, 0x7e00, 0x8000}
	want := []float32{1, -2, 65504, float32(math.Ldexp(1, -24)), float32(math.Ldexp(1023, -24)), float32(math.Inf(1)), float32(math.NaN()), float32(math.Copysign(0, -1))}
	src := make([]byte, 2*len(halves))
	for i, h := range halves {
		binary.LittleEndian.PutUint16(src[2*i:], h)
	}
	got := make([]float32, len(halves))
	if err := DecodeFloat32(got, src, F16); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(math.IsNaN(float64(got[i])) && math.IsNaN(float64(want[i]))) {
			t.Errorf("half %#04x -> %v, want %v", halves[i], got[i], want[i])
		}
	}
	// Every F16 value converts exactly: back-conversion through float64 agrees.
	for h := range 1 << 16 {
		f := HalfToFloat32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		exp := (h >> 10) & 0x1f
		man := float64(h & 0x3ff)
		var v float64
		if exp == 0 {
			v = math.Ldexp(man, -24)
		} else if exp == 31 {
			v = math.Inf(1)
		} else {
			v = math.Ldexp(1024+man, exp-25)
		}
		if h&0x8000 != 0 {
			v = -v
		}
		if float64(f) != v {
			t.Fatalf("half %#04x -> %v, want %v", h, f, v)
		}
	}
	bf := []byte{0x80, 0x3f, 0x00, 0xc0} // 1.0, -2.0
	g2 := make([]float32, 2)
	if err := DecodeFloat32(g2, bf, BF16); err != nil || g2[0] != 1 || g2[1] != -2 {
		t.Errorf("bf16: %v %v", g2, err)
	}
	f64 := make([]byte, 8)
	binary.LittleEndian.PutUint64(f64, math.Float64bits(0.1))
	if err := DecodeFloat32(g2[:1], f64, F64); err != nil || g2[0] != float32(0.1) {
		t.Errorf("f64: %v %v", g2, err)
	}
	if err := DecodeFloat32(g2, f32bytes(1, 2), F32); err != nil || g2[1] != 2 {
		t.Errorf("f32: %v %v", g2, err)
	}
	if err := DecodeFloat32(g2, bf, I8); !errors.Is(err, ErrInvalid) {
		t.Errorf("I8: %v", err)
	}
	if err := DecodeFloat32(g2, bf[:3], BF16); !errors.Is(err, ErrInvalid) {
		t.Errorf("short: %v", err)
	}
}
