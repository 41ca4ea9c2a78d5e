package paged

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// rawPack wraps raw header bytes in a pack file with valid checksums.
func rawPack(h []byte) []byte {
	b := make([]byte, PreambleSize, PreambleSize+len(h))
	b = append(b, h...)
	pre := preamble{Major: PackMajor, HeaderOffset: PreambleSize, HeaderLength: uint64(len(h)), HeaderCRC: CRC32C(h)}.encode()
	copy(b, pre[:])
	return b
}

func TestHeaderHostileLengths(t *testing.T) {
	key := func(s string) []byte { return append([]byte{0xa0 | byte(len(s))}, s...) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, c := range []struct {
		name string
		h    []byte
		want string
	}{
		{"layers 2^32", cat([]byte{0x81}, key("layers"), []byte{0xdd, 0xff, 0xff, 0xff, 0xff}), "an array of 4294967295 elements cannot fit"},
		{"map 2^32", []byte{0xdf, 0xff, 0xff, 0xff, 0xff}, "a map of 4294967295 entries cannot fit"},
		{"string 2^32", cat([]byte{0x81}, key("model"), []byte{0xdb, 0xff, 0xff, 0xff, 0xff}), "runs past the end"},
		{"unknown key deep", cat([]byte{0x81}, key("x"), bytes.Repeat([]byte{0x91}, 100000), []byte{0xc0}), "nested more than 32 deep"},
		{"unknown key huge array", cat([]byte{0x81}, key("x"), []byte{0xdd, 0x7f, 0xff, 0xff, 0xff}), "cannot fit"},
		{"unknown key bad code", cat([]byte{0x81}, key("x"), []byte{0xc1}), "invalid msgpack code 0xc1"},
		{"missing keys", []byte{0x80}, `required key "model" is missing`},
		{"duplicate key", cat([]byte{0x82}, key("model"), key("a"), key("model"), key("b")), `key "model" appears twice`},
		{"trailing", cat(mustMarshal(validWire()), []byte{0xc0}), "1 bytes follow the header's msgpack map"},
		{"negative align", cat([]byte{0x81}, key("align"), []byte{0xff}), "want a non-negative integer"},
		{"negative int64 offset", cat([]byte{0x81}, key("align"), []byte{0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0}), "want a non-negative integer, got a negative one"},
		{"empty", nil, "unexpected end"},
	} {
		_, err := ParsePack("h.bitgo", rawPack(c.h))
		if !errors.Is(err, ErrPack) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

func mustMarshal(v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func TestHeaderOptionalNilAndUnknown(t *testing.T) {
	w := validWire()
	m := map[string]any{
		"model": w.Model, "layout": w.Layout, "align": w.Align, "tensors": w.Tensors,
		"created_by": nil, "metadata": nil, "external": nil,
		"future": map[string]any{"nested": []any{1, "two", 3.5, []byte{4}, map[string]any{"x": nil}, true, -7, int64(-1 << 40), uint64(1 << 63)}},
	}
	layers := make([]map[string]any, len(w.Layers))
	for i, l := range w.Layers {
		layers[i] = map[string]any{"name": l.Name, "format": l.Format, "out": l.Out, "in": l.In, "act": l.Act, "scale": l.Scale,
			"scales": l.Scales, "offset": l.Offset, "length": l.Length, "crc32c": l.CRC32C, "codebook": nil, "bias": nil, "later": "x"}
		if l.Codebook != nil {
			layers[i]["codebook"] = l.Codebook
		}
	}
	m["layers"] = layers
	p, err := ParsePack("h.bitgo", buildPack(m, 16384))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Layers) != 2 || p.Layers[1].Spec.Codebook != [4]int8{-3, -1, 1, 3} || p.Layers[1].Bias != nil || p.Layers[1].Spec.Bias {
		t.Fatalf("%+v", p.Layers)
	}
}
