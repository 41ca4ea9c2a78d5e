package mpread

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func enc(t testing.TB, v any, compact bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	e.UseCompactInts(compact)
	e.UseCompactFloats(false)
	if err := e.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func fixstr(s string) []byte { return append([]byte{0xa0 | byte(len(s))}, s...) }

// checkErr asserts the contract of a failed read: an *Error wrapping ErrInvalid whose
// message has want, and a Reader that consumed nothing.
func checkErr(t *testing.T, name string, r *Reader, start int, err error, want string) {
	t.Helper()
	var e *Error
	switch {
	case err == nil:
		t.Errorf("%s: no error, want %q", name, want)
	case !errors.Is(err, ErrInvalid) || !errors.As(err, &e):
		t.Errorf("%s: %v is not an *Error wrapping ErrInvalid", name, err)
	case !strings.Contains(err.Error(), want):
		t.Errorf("%s: error %q, want %q", name, err, want)
	case e.Offset < 0 || e.Offset > len(r.b):
		t.Errorf("%s: error offset %d outside the %d-byte input", name, e.Offset, len(r.b))
	}
	if r.Offset() != start {
		t.Errorf("%s: a failed read moved the reader from %d to %d", name, start, r.Offset())
	}
}

// TestRoundTrip reads back what vmihailenco/msgpack writes, compact integers or not.
func TestRoundTrip(t *testing.T) {
	for _, compact := range []bool{false, true} {
		uints := []uint64{0, 1, 127, 128, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, math.MaxInt64, math.MaxUint64}
		ints := []int64{0, 1, -1, -32, -33, 127, -128, -129, 32767, -32768, -32769, 1 << 31, -1 << 31, -1<<31 - 1, math.MaxInt64, math.MinInt64}
		strs := []string{"", "a", strings.Repeat("b", 31), strings.Repeat("c", 32), strings.Repeat("d", 255), strings.Repeat("e", 256), strings.Repeat("f", 70000)}
		f32s := []float32{0, -1.5, math.MaxFloat32, float32(math.Inf(-1))}
		b := enc(t, []any{uints, ints, strs, true, false, nil, f32s, 2.25, float32(0.5), 7, -7, uint64(math.MaxUint64)}, compact)
		r := New(b, Limits{})
		if n, err := r.ArrayLen(1, 12); err != nil || n != 12 {
			t.Fatalf("outer array: %d %v", n, err)
		}
		if got, err := r.Uint64s(len(uints)); err != nil || !slices.Equal(got, uints) {
			t.Fatalf("compact=%v uints: %v %v", compact, got, err)
		}
		n, err := r.ArrayLen(1, NoLimit)
		if err != nil || n != len(ints) {
			t.Fatalf("ints: %d %v", n, err)
		}
		for _, want := range ints {
			if got, err := r.Int(); err != nil || got != want {
				t.Fatalf("compact=%v int %d: %d %v", compact, want, got, err)
			}
		}
		if n, err := r.ArrayLen(1, NoLimit); err != nil || n != len(strs) {
			t.Fatalf("strs: %d %v", n, err)
		}
		for _, want := range strs {
			if got, err := r.Str(len(want)); err != nil || got != want {
				t.Fatalf("string of %d: %d %v", len(want), len(got), err)
			}
		}
		if v, err := r.Bool(); err != nil || !v {
			t.Fatalf("true: %v %v", v, err)
		}
		if v, err := r.Bool(); err != nil || v {
			t.Fatalf("false: %v %v", v, err)
		}
		if !r.Nil() || r.Nil() {
			t.Fatal("nil")
		}
		if got, err := r.Float32s(4); err != nil || !slices.Equal(got, f32s) {
			t.Fatalf("float32s: %v %v", got, err)
		}
		for _, want := range []float64{2.25, 0.5, 7, -7, math.MaxUint64} {
			if got, err := r.Float64(); err != nil || got != want {
				t.Fatalf("float64 %v: %v %v", want, got, err)
			}
		}
		if err := r.Done(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSkipsEverything skips one value of every msgpack type, as vmihailenco encodes them,
// and lands exactly after it; Raw returns the same bytes.
func TestSkipsEverything(t *testing.T) {
	vals := []any{nil, true, false, 0, 127, 128, 70000, 1 << 40, -1, -200, -70000, -1 << 40, float32(1.5), 2.5, "", "short",
		strings.Repeat("x", 300), strings.Repeat("y", 70000), []byte{1, 2}, bytes.Repeat([]byte{3}, 300), bytes.Repeat([]byte{3}, 70000),
		[]int{}, make([]int, 20), make([]int, 70000), map[string]int{"a": 1}, map[int]int{}, bigMap(20), bigMap(70000),
		[]any{[]any{[]any{map[string]any{"k": []any{nil}}}}},
		&msgpack.RawMessage{0xd4, 1, 2}, &msgpack.RawMessage{0xd8, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		&msgpack.RawMessage{0xc7, 2, 9, 1, 2}, &msgpack.RawMessage{0xc8, 0, 1, 9, 1}, &msgpack.RawMessage{0xc9, 0, 0, 0, 1, 9, 1}}
	for _, v := range vals {
		e := enc(t, v, true)
		b := append(bytes.Clone(e), 0x2a)
		r := New(b, Limits{})
		if err := r.Skip(); err != nil {
			t.Errorf("%T: %v", v, err)
			continue
		}
		if r.Remaining() != 1 || r.Rest()[0] != 0x2a {
			t.Errorf("%T (%x...): skip stopped at %d of %d", v, b[:min(len(b), 8)], r.Offset(), len(b))
		}
		raw, err := New(b, Limits{}).Raw()
		if err != nil || !bytes.Equal(raw, e) {
			t.Errorf("%T: Raw %x... %v", v, raw[:min(len(raw), 8)], err)
		}
		// Every proper prefix is refused, never read past (the first and last 100 of
		// long values: all of them would be quadratic).
		for n := range len(e) {
			if n > 100 && n < len(e)-100 {
				continue
			}
			r := New(e[:n], Limits{})
			checkErr(t, fmt.Sprintf("%T cut at %d", v, n), r, 0, r.Skip(), "")
		}
	}
}

func bigMap(n int) map[int]int {
	m := make(map[int]int, n)
	for i := range n {
		m[i] = i
	}
	return m
}

// TestHostile: lying headers, wrong types, truncations and limits each give an *Error
// naming the problem, at the right offset, with nothing consumed.
func TestHostile(t *testing.T) {
	type readFn func(r *Reader) error
	arr := func(min, lim int) readFn { return func(r *Reader) error { _, err := r.ArrayLen(min, lim); return err } }
	mapLen := func(lim int) readFn { return func(r *Reader) error { _, err := r.MapLen(lim); return err } }
	str := func(lim int) readFn { return func(r *Reader) error { _, err := r.Str(lim); return err } }
	uintR := func(r *Reader) error { _, err := r.Uint(); return err }
	intR := func(r *Reader) error { _, err := r.Int(); return err }
	f32 := func(r *Reader) error { _, err := r.Float32(); return err }
	f64 := func(r *Reader) error { _, err := r.Float64(); return err }
	f32s := func(r *Reader) error { _, err := r.Float32s(NoLimit); return err }
	u64s := func(r *Reader) error { _, err := r.Uint64s(NoLimit); return err }
	boolean := func(r *Reader) error { _, err := r.Bool(); return err }
	skip := func(r *Reader) error { return r.Skip() }
	for _, c := range []struct {
		name string
		in   []byte
		read readFn
		want string
		at   int // the error's offset
	}{
		{"array 2^32-1", []byte{0xdd, 0xff, 0xff, 0xff, 0xff, 1, 2}, arr(1, NoLimit), "an array of 4294967295 elements cannot fit in the 2 bytes left", 0},
		{"array 65535", []byte{0xdc, 0xff, 0xff, 0x02}, arr(1, NoLimit), "65535 elements", 0},
		{"array of 3 5-byte elements in 14", cat([]byte{0x93}, make([]byte, 14)), arr(5, NoLimit), "an array of 3 elements cannot fit in the 14 bytes left", 0},
		{"array over the limit", []byte{0x93, 1, 2, 3}, arr(1, 2), "an array of 3 elements exceeds the limit of 2", 0},
		{"array header cut", []byte{0xdd, 0, 0}, arr(1, NoLimit), "ends inside an array", 0},
		{"array is a map", []byte{0x80}, arr(1, NoLimit), "want an array, got a map", 0},
		{"array of nothing", nil, arr(1, NoLimit), "unexpected end: the input ends early (want an array)", 0},
		{"reserved byte", []byte{0xc1}, arr(1, NoLimit), "want an array, got the reserved byte 0xc1", 0},
		{"map 2^32-1", []byte{0xdf, 0xff, 0xff, 0xff, 0xff}, mapLen(NoLimit), "a map of 4294967295 entries cannot fit in the 0 bytes left", 0},
		{"map of 2 in 3 bytes", []byte{0x82, 1, 2, 3}, mapLen(NoLimit), "a map of 2 entries cannot fit", 0},
		{"map over the limit", []byte{0x82, 1, 2, 3, 4}, mapLen(1), "a map of 2 entries exceeds the limit of 1", 0},
		{"map is a string", []byte{0xa1, 'x'}, mapLen(NoLimit), "want a map, got a string", 0},
		{"string 4 GB", []byte{0xdb, 0xff, 0xff, 0xff, 0xff, 'x'}, str(NoLimit), "a string of 4294967295 bytes runs past the end of the input (1 bytes left)", 0},
		{"string over the limit", cat([]byte{0xa5}, []byte("hello")), str(4), "a string of 5 bytes is longer than the limit of 4", 0},
		{"string header cut", []byte{0xda, 0}, str(NoLimit), "ends inside a string", 0},
		{"string is binary", []byte{0xc4, 0}, str(NoLimit), "want a string, got binary data", 0},
		{"uint negative fixint", []byte{0xff}, uintR, "want a non-negative integer, got a negative one", 0},
		{"uint negative int64", []byte{0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0}, uintR, "want a non-negative integer, got a negative one", 0},
		{"uint negative int8", []byte{0xd0, 0x80}, uintR, "got a negative one", 0},
		{"uint is a float", []byte{0xcb, 0, 0, 0, 0, 0, 0, 0, 0}, uintR, "want a non-negative integer, got a float64", 0},
		{"uint cut", []byte{0xcf, 1, 2, 3}, uintR, "unexpected end: the input ends inside an integer", 0},
		{"int over int64", []byte{0xcf, 0x80, 0, 0, 0, 0, 0, 0, 0}, intR, "integer 9223372036854775808 does not fit in int64", 0},
		{"int is a string", []byte{0xa0}, intR, "want an integer, got a string", 0},
		{"int cut", []byte{0xd2, 0xff}, intR, "ends inside an integer", 0},
		{"float32 is a float64", []byte{0xcb, 0, 0, 0, 0, 0, 0, 0, 0}, f32, "want a float32 (0xca), got a float64", 0},
		{"float32 cut", []byte{0xca, 0}, f32, "ends inside a float32", 0},
		{"float64 is nil", []byte{0xc0}, f64, "want a number, got nil", 0},
		{"float64 cut", []byte{0xcb, 0}, f64, "ends inside a float64", 0},
		{"float32s with an integer", []byte{0x92, 0xca, 0, 0, 0, 0, 0x01, 0, 0, 0, 0}, f32s, "element 1: msgpack at byte 6: want a float32", 6},
		{"float32s claim", []byte{0x92, 0xca, 0, 0, 0, 0}, f32s, "an array of 2 elements cannot fit in the 5 bytes left", 0},
		{"uint64s with a string", []byte{0x92, 0x01, 0xa0}, u64s, "element 1: msgpack at byte 2: want a non-negative integer, got a string", 2},
		{"bool is an integer", []byte{0x01}, boolean, "want a boolean, got an integer", 0},
		{"skip reserved", []byte{0x91, 0xc1}, skip, "invalid msgpack code 0xc1", 1},
		{"skip huge array", []byte{0x91, 0xdd, 0x7f, 0xff, 0xff, 0xff}, skip, "an array of 2147483647 elements cannot fit in the 0 bytes left", 1},
		{"skip huge map", []byte{0xde, 0x00, 0x02, 0x01, 0x02, 0x03}, skip, "a map of 2 entries cannot fit in the 3 bytes left", 0},
		{"skip long binary", []byte{0xc5, 0x01, 0x00, 0x00}, skip, "binary data of 256 bytes runs past the end of the input (1 bytes left)", 0},
		{"skip long extension", []byte{0xc7, 0x02, 0x01, 0x00}, skip, "an extension of 3 bytes runs past the end", 0},
		{"skip cut fixext", []byte{0xd8, 0x01, 0x00}, skip, "an extension of 17 bytes runs past the end", 0},
		{"skip cut header", []byte{0x92, 0x01, 0xc6, 0x00}, skip, "ends inside binary data", 2},
		{"skip missing element", []byte{0x92, 0x92, 0x01, 0x01}, skip, "ends early (want a value)", 4},
		{"skip deep", cat(bytes.Repeat([]byte{0x91}, 100000), []byte{0xc0}), skip, "values nested more than 32 deep", 32},
	} {
		r := New(c.in, Limits{})
		err := c.read(r)
		checkErr(t, c.name, r, 0, err, c.want)
		var e *Error
		if errors.As(err, &e) && e.Offset != c.at {
			t.Errorf("%s: error at byte %d, want %d (%v)", c.name, e.Offset, c.at, err)
		}
	}
}

// TestReaderStaysPut: after a failed read the next read sees the same value, and the
// offset in the message is the value's own.
func TestReaderStaysPut(t *testing.T) {
	b := []byte{0x92, 0xa2, 'h', 'i', 0xcd, 0x01, 0x00}
	r := New(b, Limits{})
	if _, err := r.ArrayLen(1, NoLimit); err != nil {
		t.Fatal(err)
	}
	_, err := r.Uint()
	checkErr(t, "uint of a string", r, 1, err, "msgpack at byte 1: want a non-negative integer, got a string")
	if s, err := r.Str(2); err != nil || s != "hi" {
		t.Fatalf("%q %v", s, err)
	}
	if _, err := r.UintMax("count", 255); err == nil || !strings.Contains(err.Error(), "msgpack at byte 4: count = 256: must be at most 255") || r.Offset() != 4 {
		t.Fatalf("UintMax: %v at %d", err, r.Offset())
	}
	if _, err := r.IntRange("level", -128, 127); err == nil || !strings.Contains(err.Error(), "level = 256: must be in [-128, 127]") || r.Offset() != 4 {
		t.Fatalf("IntRange: %v at %d", err, r.Offset())
	}
	if v, err := r.IntRange("level", 0, 256); err != nil || v != 256 {
		t.Fatalf("IntRange: %d %v", v, err)
	}
	if err := r.Done(); err != nil {
		t.Fatal(err)
	}
	r = New([]byte{0x01, 0x02}, Limits{})
	if _, err := r.UintMax("x", 0); err == nil || !strings.Contains(err.Error(), "x = 1") {
		t.Fatal(err)
	}
	if _, err := r.Uint(); err != nil {
		t.Fatal(err)
	}
	if err := r.Done(); err == nil || !strings.Contains(err.Error(), "msgpack at byte 1: 1 trailing bytes after the value") {
		t.Fatalf("Done: %v", err)
	}
	if _, err := New([]byte{0xa1}, Limits{}).UintMax("n", 5); err == nil || !strings.HasPrefix(err.Error(), "n: msgpack at byte 0: want a non-negative integer, got a string") {
		t.Fatalf("UintMax names the value: %v", err)
	}
}

// TestDepth: Limits.Depth is the deepest a value may sit inside containers; an empty
// container at the limit is fine.
func TestDepth(t *testing.T) {
	nest := func(n int, inner byte) []byte { return append(bytes.Repeat([]byte{0x91}, n), inner) }
	for _, c := range []struct {
		depth int
		in    []byte
		ok    bool
	}{
		{8, nest(8, 0x01), true},      // the integer sits at depth 8
		{8, nest(9, 0x01), false},     // at depth 9
		{8, nest(8, 0x90), true},      // an empty array at depth 8
		{8, nest(9, 0x90), false},     // an empty array at depth 9
		{8, nest(8, 0x80), true},      // an empty map at depth 8
		{0, nest(32, 0x01), true},     // the default, 32
		{0, nest(33, 0x01), false},    //
		{100, nest(100, 0x01), true},  // deeper than the on-stack part of the stack
		{100, nest(101, 0x01), false}, //
	} {
		r := New(c.in, Limits{Depth: c.depth})
		err := r.Skip()
		if c.ok && (err != nil || r.Remaining() != 0) {
			t.Errorf("depth %d, %d bytes: %v", c.depth, len(c.in), err)
		}
		if !c.ok {
			checkErr(t, fmt.Sprintf("depth %d, %d bytes", c.depth, len(c.in)), r, 0, err, "nested more than")
		}
	}
}

func TestFields(t *testing.T) {
	type rec struct {
		A    uint64
		B    string
		Seen []string
	}
	read := func(b []byte, lim Limits, required ...string) (rec, *Reader, error) {
		var x rec
		r := New(b, lim)
		err := r.Fields("rec", required, func(key string) (bool, error) {
			x.Seen = append(x.Seen, key)
			var err error
			switch key {
			case "a":
				x.A, err = r.Uint()
			case "b":
				x.B, err = r.Str(8)
			default:
				return false, nil
			}
			return true, err
		})
		return x, r, err
	}
	good := enc(t, map[string]any{"a": 7, "b": "bee", "future": []any{1, map[string]any{"x": nil}}}, true)
	x, r, err := read(good, Limits{}, "a", "b")
	if err != nil || x.A != 7 || x.B != "bee" || len(x.Seen) != 3 || r.Remaining() != 0 {
		t.Fatalf("%+v %v", x, err)
	}
	if _, _, err := read(enc(t, map[string]any{"b": "x"}, true), Limits{}); err != nil {
		t.Fatalf("optional key: %v", err)
	}
	for _, c := range []struct {
		name string
		in   []byte
		lim  Limits
		want string
	}{
		{"missing", enc(t, map[string]any{"b": "x"}, true), Limits{}, `rec: msgpack at byte 0: required key "a" is missing`},
		{"repeated", cat([]byte{0x82}, fixstr("a"), []byte{1}, fixstr("a"), []byte{2}), Limits{}, `rec: msgpack at byte 0: key "a" appears twice`},
		{"repeated unknown", cat([]byte{0x83}, fixstr("a"), []byte{1}, fixstr("z"), []byte{1}, fixstr("z"), []byte{2}), Limits{}, `key "z" appears twice`},
		{"integer key", []byte{0x81, 0x01, 0x01}, Limits{}, "rec: key: msgpack at byte 1: want a string, got an integer"},
		{"long key", cat([]byte{0x81}, fixstr("abcdef"), []byte{1}), Limits{KeyLen: 5}, "a string of 6 bytes is longer than the limit of 5"},
		{"bad value", cat([]byte{0x81}, fixstr("a"), fixstr("x")), Limits{}, `rec: "a": msgpack at byte 3: want a non-negative integer, got a string`},
		{"bad unknown value", cat([]byte{0x81}, fixstr("q"), []byte{0xc1}), Limits{}, `rec: "q": msgpack at byte 3: invalid msgpack code 0xc1`},
		{"not a map", []byte{0x90}, Limits{}, "rec: msgpack at byte 0: want a map, got an array"},
	} {
		_, r, err := read(c.in, c.lim, "a")
		checkErr(t, c.name, r, 0, err, c.want)
	}
}

// TestAllocationBounded: claims the input cannot back allocate nothing, and what a read
// allocates is a small multiple of the bytes it consumed.
func TestAllocationBounded(t *testing.T) {
	const mib = 1 << 20
	allocated := func(f func()) uint64 {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		f()
		runtime.ReadMemStats(&m1)
		return m1.TotalAlloc - m0.TotalAlloc
	}
	claim := []byte{0xdd, 0xff, 0xff, 0xff, 0xff}
	for name, read := range map[string]func(r *Reader) error{
		"Uint64s":  func(r *Reader) error { _, err := r.Uint64s(NoLimit); return err },
		"Float32s": func(r *Reader) error { _, err := r.Float32s(NoLimit); return err },
		"Skip":     func(r *Reader) error { return r.Skip() },
		"Fields":   func(r *Reader) error { return r.Fields("", nil, func(string) (bool, error) { return false, nil }) },
	} {
		const runs = 1000
		if a := allocated(func() {
			for range runs {
				_ = read(New(claim, Limits{}))
			}
		}) / runs; a > 256 { // the error
			t.Errorf("%s of a hostile header: %d bytes allocated", name, a)
		}
	}
	// A megabyte of real elements: the slices cost 8 and 4 bytes per element.
	ints := cat([]byte{0xdd, 0, 0x10, 0, 0}, make([]byte, mib))
	a := allocated(func() { _, _ = New(ints, Limits{}).Uint64s(NoLimit) })
	t.Logf("Uint64s of %d bytes allocated %d (%.2f per input byte)", len(ints), a, float64(a)/float64(len(ints)))
	if a > 8*mib+mib/2 {
		t.Errorf("Uint64s of %d bytes allocated %d", len(ints), a)
	}
	// A map of 2^20/5 short distinct keys: the key list is 16 bytes a key.
	n := mib / 5
	keys := []byte{0xdf, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	for i := range n {
		keys = append(keys, 0xa3, byte(i>>16), byte(i>>8), byte(i), 0xc0)
	}
	var err error
	a = allocated(func() { err = New(keys, Limits{}).Fields("", nil, func(string) (bool, error) { return false, nil }) })
	t.Logf("Fields of %d keys (%d bytes) allocated %d (%.2f per input byte)", n, len(keys), a, float64(a)/float64(len(keys)))
	if err != nil || a > 10*uint64(len(keys)) {
		t.Errorf("Fields of %d keys (%d bytes) allocated %d: %v", n, len(keys), a, err)
	}
}

func BenchmarkRead(b *testing.B) {
	msg := enc(b, []any{8, uint64(101), uint32(1), 1, uint64(0), uint64(16384), uint64(16384), uint64(16384)}, false)
	b.Run("ForwardHeader", func(b *testing.B) {
		b.SetBytes(int64(len(msg)))
		b.ReportAllocs()
		for b.Loop() {
			r := New(msg, Limits{})
			n, err := r.ArrayLen(1, NoLimit)
			for i := 0; i < n && err == nil; i++ {
				_, err = r.Uint()
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	hdr := enc(b, map[string]any{"name": "model.layers.0.self_attn.q_proj", "format": "i2s", "out": 2560, "in": 2560,
		"scales": make([]float32, 64), "offset": 4096, "length": 1 << 20, "future": map[string]any{"x": []int{1, 2, 3}}}, true)
	b.Run("Fields", func(b *testing.B) {
		b.SetBytes(int64(len(hdr)))
		b.ReportAllocs()
		for b.Loop() {
			r := New(hdr, Limits{})
			err := r.Fields("layer", []string{"name"}, func(key string) (bool, error) {
				var err error
				switch key {
				case "name", "format":
					_, err = r.Str(NoLimit)
				case "out", "in", "offset", "length":
					_, err = r.Uint()
				case "scales":
					_, err = r.Float32s(NoLimit)
				default:
					return false, nil
				}
				return true, err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
