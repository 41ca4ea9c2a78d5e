package ipc

import (
	"encoding/binary"
	"fmt"
	"math"
)

// mpReader decodes the msgpack subset the protocol uses (arrays, maps with string keys,
// unsigned and signed integers, strings, booleans, nil) from untrusted bytes. Every
// length is checked against the bytes that remain before anything is allocated or read,
// so a hostile header can neither index out of bounds nor make the daemon allocate more
// than the message's own size. (vmihailenco/msgpack/v5 v5.4.1 pre-allocates slices
// from the length an array header claims, so it is not used on untrusted input.)
type mpReader struct {
	b []byte
	p int
}

func (r *mpReader) errf(format string, args ...any) error {
	return fmt.Errorf("%w: msgpack at byte %d: %s", ErrBadRequest, r.p, fmt.Sprintf(format, args...))
}

func (r *mpReader) remaining() int { return len(r.b) - r.p }

func (r *mpReader) done() error {
	if r.p != len(r.b) {
		return r.errf("%d trailing bytes after the message", len(r.b)-r.p)
	}
	return nil
}

func (r *mpReader) byte1() (byte, error) {
	if r.p >= len(r.b) {
		return 0, r.errf("message ends early")
	}
	c := r.b[r.p]
	r.p++
	return c, nil
}

func (r *mpReader) take(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.p {
		return nil, r.errf("a field claims %d bytes, only %d remain", n, len(r.b)-r.p)
	}
	s := r.b[r.p : r.p+n]
	r.p += n
	return s, nil
}

func (r *mpReader) be(n int) (uint64, error) {
	s, err := r.take(n)
	if err != nil {
		return 0, err
	}
	switch n {
	case 1:
		return uint64(s[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(s)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(s)), nil
	}
	return binary.BigEndian.Uint64(s), nil
}

// peekNil reports whether the next value is nil (and consumes it if so).
func (r *mpReader) peekNil() bool {
	if r.p < len(r.b) && r.b[r.p] == 0xc0 {
		r.p++
		return true
	}
	return false
}

// arrayLen reads an array header. n is at most the bytes that remain (every element
// takes at least one byte).
func (r *mpReader) arrayLen() (int, error) {
	start := r.p
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c&0xf0 == 0x90:
		n = uint64(c & 0x0f)
	case c == 0xdc:
		n, err = r.be(2)
	case c == 0xdd:
		n, err = r.be(4)
	default:
		r.p = start
		return 0, r.errf("want an array, got %s", typeName(c))
	}
	if err != nil {
		return 0, err
	}
	if n > uint64(r.remaining()) {
		return 0, r.errf("array claims %d elements, only %d bytes remain", n, r.remaining())
	}
	return int(n), nil
}

// mapLen reads a map header; n is at most half the bytes that remain.
func (r *mpReader) mapLen() (int, error) {
	start := r.p
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c&0xf0 == 0x80:
		n = uint64(c & 0x0f)
	case c == 0xde:
		n, err = r.be(2)
	case c == 0xdf:
		n, err = r.be(4)
	default:
		r.p = start
		return 0, r.errf("want a map, got %s", typeName(c))
	}
	if err != nil {
		return 0, err
	}
	if n > uint64(r.remaining()/2) {
		return 0, r.errf("map claims %d entries, only %d bytes remain", n, r.remaining())
	}
	return int(n), nil
}

// uint reads a non-negative integer in any msgpack integer encoding.
func (r *mpReader) uint() (uint64, error) {
	start := r.p
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	switch {
	case c <= 0x7f:
		return uint64(c), nil
	case c >= 0xcc && c <= 0xcf: // uint 8/16/32/64
		return r.be(1 << (c - 0xcc))
	case c >= 0xd0 && c <= 0xd3: // int 8/16/32/64
		n := 1 << (c - 0xd0)
		v, err := r.be(n)
		if err != nil {
			return 0, err
		}
		if v>>(uint(n)*8-1)&1 == 1 {
			r.p = start
			return 0, r.errf("want a non-negative integer, got a negative one")
		}
		return v, nil
	case c >= 0xe0:
		r.p = start
		return 0, r.errf("want a non-negative integer, got a negative one")
	}
	r.p = start
	return 0, r.errf("want an integer, got %s", typeName(c))
}

// uintMax reads an integer in [0, max]; what names the field in errors.
func (r *mpReader) uintMax(what string, max uint64) (uint64, error) {
	v, err := r.uint()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	if v > max {
		return 0, fmt.Errorf("%w: %s = %d: must be at most %d", ErrBadRequest, what, v, max)
	}
	return v, nil
}

// int reads a signed integer in any msgpack integer encoding.
func (r *mpReader) int() (int64, error) {
	start := r.p
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	switch {
	case c <= 0x7f:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	case c >= 0xcc && c <= 0xcf:
		v, err := r.be(1 << (c - 0xcc))
		if err != nil {
			return 0, err
		}
		if v > math.MaxInt64 {
			r.p = start
			return 0, r.errf("integer %d overflows int64", v)
		}
		return int64(v), nil
	case c >= 0xd0 && c <= 0xd3:
		n := 1 << (c - 0xd0)
		v, err := r.be(n)
		if err != nil {
			return 0, err
		}
		shift := 64 - uint(n)*8
		return int64(v<<shift) >> shift, nil
	}
	r.p = start
	return 0, r.errf("want an integer, got %s", typeName(c))
}

// str reads a string of at most max bytes.
func (r *mpReader) str(max int) (string, error) {
	start := r.p
	c, err := r.byte1()
	if err != nil {
		return "", err
	}
	var n uint64
	switch {
	case c&0xe0 == 0xa0:
		n = uint64(c & 0x1f)
	case c == 0xd9:
		n, err = r.be(1)
	case c == 0xda:
		n, err = r.be(2)
	case c == 0xdb:
		n, err = r.be(4)
	default:
		r.p = start
		return "", r.errf("want a string, got %s", typeName(c))
	}
	if err != nil {
		return "", err
	}
	if n > uint64(max) {
		r.p = start
		return "", r.errf("string of %d bytes is longer than the limit of %d", n, max)
	}
	s, err := r.take(int(n))
	if err != nil {
		return "", err
	}
	return string(s), nil
}

func (r *mpReader) bool() (bool, error) {
	c, err := r.byte1()
	if err != nil {
		return false, err
	}
	switch c {
	case 0xc2:
		return false, nil
	case 0xc3:
		return true, nil
	}
	r.p--
	return false, r.errf("want a boolean, got %s", typeName(c))
}

func typeName(c byte) string {
	switch {
	case c <= 0x7f, c >= 0xe0, c >= 0xcc && c <= 0xd3:
		return "an integer"
	case c&0xf0 == 0x80, c == 0xde, c == 0xdf:
		return "a map"
	case c&0xf0 == 0x90, c == 0xdc, c == 0xdd:
		return "an array"
	case c&0xe0 == 0xa0, c >= 0xd9 && c <= 0xdb:
		return "a string"
	case c == 0xc0:
		return "nil"
	case c == 0xc2, c == 0xc3:
		return "a boolean"
	case c >= 0xc4 && c <= 0xc6:
		return "binary data"
	case c == 0xca, c == 0xcb:
		return "a float"
	case c == 0xc1:
		return "the reserved byte 0xc1"
	}
	return "an extension"
}

// Append helpers for the fixed-width encodings of the hot path.

func appendU64(b []byte, v uint64) []byte {
	b = append(b, 0xcf)
	return binary.BigEndian.AppendUint64(b, v)
}

func appendU32(b []byte, v uint32) []byte {
	b = append(b, 0xce)
	return binary.BigEndian.AppendUint32(b, v)
}

func appendStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 256:
		b = append(b, 0xd9, byte(n))
	case n < 1<<16:
		b = append(b, 0xda)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0xdb)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	return append(b, s...)
}

// float reads a float32/float64 or an integer as a float64.
func (r *mpReader) float() (float64, error) {
	if r.p < len(r.b) {
		switch r.b[r.p] {
		case 0xca:
			r.p++
			v, err := r.be(4)
			return float64(math.Float32frombits(uint32(v))), err
		case 0xcb:
			r.p++
			v, err := r.be(8)
			return math.Float64frombits(v), err
		}
	}
	v, err := r.int()
	if err != nil {
		u, uerr := r.uint() // a uint64 above MaxInt64
		if uerr != nil {
			return 0, err
		}
		return float64(u), nil
	}
	return float64(v), nil
}

// fields decodes a map with string keys, handing each known key's value to its
// function and skipping unknown keys (a newer daemon may send more).
func (r *mpReader) fields(known map[string]func(*mpReader) error) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		k, err := r.str(maxKeyLen)
		if err != nil {
			return err
		}
		fn, ok := known[k]
		if !ok {
			if err := r.skip(0); err != nil {
				return err
			}
			continue
		}
		if err := fn(r); err != nil {
			return fmt.Errorf("field %q: %w", k, err)
		}
	}
	return nil
}

type integer interface {
	~int | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// intField stores an integer that must fit T.
func intField[T integer](p *T) func(*mpReader) error {
	return func(r *mpReader) error {
		v, err := r.int()
		if err != nil {
			return err
		}
		if T(v) < 0 != (v < 0) || int64(T(v)) != v {
			return r.errf("integer %d does not fit the field", v)
		}
		*p = T(v)
		return nil
	}
}

func uint64Field(p *uint64) func(*mpReader) error {
	return func(r *mpReader) error {
		v, err := r.uint()
		*p = v
		return err
	}
}

func strField(p *string, max int) func(*mpReader) error {
	return func(r *mpReader) error {
		s, err := r.str(max)
		*p = s
		return err
	}
}

func boolField(p *bool) func(*mpReader) error {
	return func(r *mpReader) error {
		v, err := r.bool()
		*p = v
		return err
	}
}
