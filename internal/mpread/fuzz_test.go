package mpread

import (
	"bytes"
	"errors"
	"runtime/metrics"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// FuzzReader reads arbitrary bytes with every method. None may panic or read out of
// bounds; a failure is an *Error wrapping ErrInvalid that leaves the Reader where it was;
// a success consumes what it says; a typed walk of the input accepts exactly what Skip
// accepts and ends where Skip ends; and nothing allocates more than a small multiple of
// the input.
func FuzzReader(f *testing.F) {
	for _, v := range []any{
		nil, true, 1, -1, 1 << 40, uint64(1 << 63), float32(1.5), 2.5, "s", []byte{1},
		[]any{1, "two", []any{3.5, nil}, map[string]any{"k": []int{1, 2}}},
		map[string]any{"a": 7, "b": "bee", "scales": []float32{1, 2}, "shape": []uint64{2, 3}},
		&msgpack.RawMessage{0xd4, 1, 2}, &msgpack.RawMessage{0xc7, 2, 9, 1, 2},
	} {
		b, err := msgpack.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, b := range [][]byte{
		{0xdd, 0xff, 0xff, 0xff, 0xff}, {0xdf, 0xff, 0xff, 0xff, 0xff}, {0xdb, 0xff, 0xff, 0xff, 0xff},
		{0x91, 0xc1}, bytes.Repeat([]byte{0x91}, 40), {0x82, 0xa1, 'a', 0x01, 0xa1, 'a', 0x02}, {},
	} {
		f.Add(b)
	}
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	allocs := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		before := allocs()
		fuzzMethods(t, b)
		skipped, skipErr := New(b, Limits{}).Raw()
		r := New(b, Limits{})
		walkErr := walk(r, 0)
		if (skipErr == nil) != (walkErr == nil) {
			t.Fatalf("Skip says %v, a typed walk says %v", skipErr, walkErr)
		}
		if skipErr == nil && r.Offset() != len(skipped) {
			t.Fatalf("Skip consumed %d bytes, a typed walk %d", len(skipped), r.Offset())
		}
		// Span-granular accounting makes small allocations look bigger: allow 1 MiB.
		if a := allocs() - before; a > 16*uint64(len(b))+1<<20 {
			t.Fatalf("reading %d bytes allocated %d", len(b), a)
		}
	})
}

// fuzzMethods calls every method on b and checks the contract of each result: read
// returns the input bytes its result needs (headers and elements at their smallest).
func fuzzMethods(t *testing.T, b []byte) {
	check := func(name string, read func(r *Reader) (n int, err error)) {
		r := New(b, Limits{Depth: 8, KeyLen: 16})
		n, err := read(r)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) || e.Offset < 0 || e.Offset > len(b) || strings.Contains(e.Msg, "%!") {
				t.Fatalf("%s: bad error %#v", name, err)
			}
			if r.Offset() != 0 {
				t.Fatalf("%s: failed at %d, left the reader at %d", name, e.Offset, r.Offset())
			}
			return
		}
		if r.Offset() < 1 || r.Offset() > len(b) || n > len(b) {
			t.Fatalf("%s: a result needing %d bytes, %d consumed, from %d", name, n, r.Offset(), len(b))
		}
	}
	check("ArrayLen", func(r *Reader) (int, error) { n, err := r.ArrayLen(1, NoLimit); return r.Offset() + n, err })
	check("ArrayLen/5", func(r *Reader) (int, error) { n, err := r.ArrayLen(5, 3); return r.Offset() + 5*n, err })
	check("MapLen", func(r *Reader) (int, error) { n, err := r.MapLen(NoLimit); return r.Offset() + 2*n, err })
	check("Str", func(r *Reader) (int, error) { s, err := r.Str(NoLimit); return 1 + len(s), err })
	check("Uint", func(r *Reader) (int, error) { _, err := r.Uint(); return 0, err })
	check("UintMax", func(r *Reader) (int, error) { _, err := r.UintMax("u", 1000); return 0, err })
	check("Int", func(r *Reader) (int, error) { _, err := r.Int(); return 0, err })
	check("IntRange", func(r *Reader) (int, error) { _, err := r.IntRange("i", -5, 5); return 0, err })
	check("Float64", func(r *Reader) (int, error) { _, err := r.Float64(); return 0, err })
	check("Float32", func(r *Reader) (int, error) { _, err := r.Float32(); return 0, err })
	check("Float32s", func(r *Reader) (int, error) { v, err := r.Float32s(NoLimit); return 1 + 5*len(v), err })
	check("Uint64s", func(r *Reader) (int, error) { v, err := r.Uint64s(NoLimit); return 1 + len(v), err })
	check("Bool", func(r *Reader) (int, error) { _, err := r.Bool(); return 0, err })
	check("Skip", func(r *Reader) (int, error) { return 0, r.Skip() })
	check("Raw", func(r *Reader) (int, error) { v, err := r.Raw(); return len(v), err })
	check("Fields", func(r *Reader) (int, error) {
		return 0, r.Fields("m", []string{"a"}, func(key string) (bool, error) {
			switch key {
			case "a":
				_, err := r.Uint()
				return true, err
			case "b":
				_, err := r.Str(8)
				return true, err
			case "scales":
				_, err := r.Float32s(NoLimit)
				return true, err
			}
			return false, nil
		})
	})
	if r := New(b, Limits{}); r.Nil() != (len(b) > 0 && b[0] == 0xc0) || r.Offset() > 1 {
		t.Fatal("Nil")
	}
}

// walk reads one value with the typed methods, choosing by its first byte, as a
// decoder of a known schema would; containers nest at most DefaultDepth deep, as Skip's.
func walk(r *Reader, depth int) error {
	rest := r.Rest()
	if len(rest) == 0 {
		return r.Skip() // the error for an empty input
	}
	c := rest[0]
	var err error
	switch {
	case c <= 0x7f || c >= 0xe0 || (c >= 0xd0 && c <= 0xd3) || (c >= 0xcc && c <= 0xce):
		_, err = r.Int()
	case c == 0xcf:
		_, err = r.Uint()
	case c == 0xca:
		_, err = r.Float32()
	case c == 0xcb:
		_, err = r.Float64()
	case c == 0xc2 || c == 0xc3:
		_, err = r.Bool()
	case c == 0xc0:
		r.Nil()
	case (c >= 0xa0 && c <= 0xbf) || (c >= 0xd9 && c <= 0xdb):
		_, err = r.Str(NoLimit)
	case (c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd:
		var n int
		if n, err = r.ArrayLen(1, NoLimit); err == nil && n > 0 && depth >= DefaultDepth {
			return errors.New("too deep")
		}
		for ; err == nil && n > 0; n-- {
			err = walk(r, depth+1)
		}
	case (c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf:
		var n int
		if n, err = r.MapLen(NoLimit); err == nil && n > 0 && depth >= DefaultDepth {
			return errors.New("too deep")
		}
		for n *= 2; err == nil && n > 0; n-- {
			err = walk(r, depth+1)
		}
	default: // binary, extensions, 0xc1
		err = r.Skip()
	}
	return err
}
