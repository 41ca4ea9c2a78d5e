package paged

import (
	"encoding/binary"
	"fmt"
	"math"
)

// mpReader decodes the msgpack subset the pack header uses, straight from a byte slice.
// The header is untrusted input: every length is checked against the bytes that remain
// before anything is allocated, and skipping unknown values is iterative-depth-bounded,
// so a hostile header costs at most its own size in time and memory. (A reflection-based
// decoder pre-allocates a slice from the length prefix, and a claimed 4-billion-element
// array of structs exhausts memory.)
type mpReader struct {
	b   []byte
	off int
}

// maxSkipDepth bounds the nesting of values that are skipped (unknown keys).
const maxSkipDepth = 32

func (r *mpReader) errf(format string, args ...any) error {
	return fmt.Errorf("header byte %d: %s", r.off, fmt.Sprintf(format, args...))
}

func (r *mpReader) remaining() int { return len(r.b) - r.off }

func (r *mpReader) peek() (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.errf("unexpected end of the header")
	}
	return r.b[r.off], nil
}

func (r *mpReader) next(n int) ([]byte, error) {
	if n < 0 || n > r.remaining() {
		return nil, r.errf("a value of %d bytes runs past the end of the header (%d left)", n, r.remaining())
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s, nil
}

func (r *mpReader) code() (byte, error) {
	c, err := r.peek()
	if err == nil {
		r.off++
	}
	return c, err
}

// length reads a big-endian length of size bytes (1, 2 or 4).
func (r *mpReader) length(size int) (int, error) {
	b, err := r.next(size)
	if err != nil {
		return 0, err
	}
	switch size {
	case 1:
		return int(b[0]), nil
	case 2:
		return int(binary.BigEndian.Uint16(b)), nil
	}
	return int(binary.BigEndian.Uint32(b)), nil
}

// isNil consumes a nil and reports whether there was one.
func (r *mpReader) isNil() bool {
	if c, err := r.peek(); err == nil && c == 0xc0 {
		r.off++
		return true
	}
	return false
}

// mapLen reads a map header; each entry needs at least 2 bytes, which bounds n.
func (r *mpReader) mapLen() (int, error) {
	at := r.off
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	var n int
	switch {
	case c >= 0x80 && c <= 0x8f:
		n = int(c & 0x0f)
	case c == 0xde:
		n, err = r.length(2)
	case c == 0xdf:
		n, err = r.length(4)
	default:
		r.off = at
		return 0, r.errf("want a map, got %s", codeName(c))
	}
	if err != nil {
		return 0, err
	}
	if n > r.remaining()/2 {
		return 0, r.errf("a map of %d entries cannot fit in the %d bytes left", n, r.remaining())
	}
	return n, nil
}

// arrayLen reads an array header; each element needs at least minElem bytes.
func (r *mpReader) arrayLen(minElem int) (int, error) {
	at := r.off
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	var n int
	switch {
	case c >= 0x90 && c <= 0x9f:
		n = int(c & 0x0f)
	case c == 0xdc:
		n, err = r.length(2)
	case c == 0xdd:
		n, err = r.length(4)
	default:
		r.off = at
		return 0, r.errf("want an array, got %s", codeName(c))
	}
	if err != nil {
		return 0, err
	}
	if n > r.remaining()/max(minElem, 1) {
		return 0, r.errf("an array of %d elements cannot fit in the %d bytes left", n, r.remaining())
	}
	return n, nil
}

func (r *mpReader) str() (string, error) {
	at := r.off
	c, err := r.code()
	if err != nil {
		return "", err
	}
	var n int
	switch {
	case c >= 0xa0 && c <= 0xbf:
		n = int(c & 0x1f)
	case c == 0xd9:
		n, err = r.length(1)
	case c == 0xda:
		n, err = r.length(2)
	case c == 0xdb:
		n, err = r.length(4)
	default:
		r.off = at
		return "", r.errf("want a string, got %s", codeName(c))
	}
	if err != nil {
		return "", err
	}
	b, err := r.next(n)
	return string(b), err
}

// uint reads any msgpack integer that is non-negative.
func (r *mpReader) uint() (uint64, error) {
	at := r.off
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	if c <= 0x7f {
		return uint64(c), nil
	}
	size := map[byte]int{0xcc: 1, 0xcd: 2, 0xce: 4, 0xcf: 8, 0xd0: 1, 0xd1: 2, 0xd2: 4, 0xd3: 8}[c]
	if size == 0 {
		r.off = at
		return 0, r.errf("want a non-negative integer, got %s", codeName(c))
	}
	b, err := r.next(size)
	if err != nil {
		return 0, err
	}
	var u uint64
	var neg bool
	switch size {
	case 1:
		u, neg = uint64(b[0]), int8(b[0]) < 0
	case 2:
		u, neg = uint64(binary.BigEndian.Uint16(b)), int16(binary.BigEndian.Uint16(b)) < 0
	case 4:
		u, neg = uint64(binary.BigEndian.Uint32(b)), int32(binary.BigEndian.Uint32(b)) < 0
	case 8:
		u, neg = binary.BigEndian.Uint64(b), int64(binary.BigEndian.Uint64(b)) < 0
	}
	if c >= 0xd0 && neg {
		r.off = at
		return 0, r.errf("want a non-negative integer, got a negative one")
	}
	return u, nil
}

// int reads any msgpack integer that fits in an int64.
func (r *mpReader) int() (int64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if c >= 0xe0 {
		r.off++
		return int64(int8(c)), nil
	}
	if c >= 0xd0 && c <= 0xd3 {
		r.off++
		size := 1 << (c - 0xd0)
		b, err := r.next(size)
		if err != nil {
			return 0, err
		}
		switch size {
		case 1:
			return int64(int8(b[0])), nil
		case 2:
			return int64(int16(binary.BigEndian.Uint16(b))), nil
		case 4:
			return int64(int32(binary.BigEndian.Uint32(b))), nil
		}
		return int64(binary.BigEndian.Uint64(b)), nil
	}
	at := r.off
	u, err := r.uint()
	if err != nil {
		return 0, err
	}
	if u > math.MaxInt64 {
		r.off = at
		return 0, r.errf("integer %d does not fit in int64", u)
	}
	return int64(u), nil
}

// float32 reads a msgpack float32 (0xca) and nothing else: the format stores scales and
// biases as float32, and a float64 or an integer would mean a writer that rounds.
func (r *mpReader) float32() (float32, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if c != 0xca {
		return 0, r.errf("want a float32 (0xca), got %s", codeName(c))
	}
	b, err := r.next(5)
	if err != nil {
		return 0, err
	}
	return math.Float32frombits(binary.BigEndian.Uint32(b[1:])), nil
}

// float32s reads an array of float32: 5 bytes per element.
func (r *mpReader) float32s() ([]float32, error) {
	n, err := r.arrayLen(5)
	if err != nil {
		return nil, err
	}
	out := make([]float32, n)
	for i := range out {
		if out[i], err = r.float32(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (r *mpReader) uints() ([]uint64, error) {
	n, err := r.arrayLen(1)
	if err != nil {
		return nil, err
	}
	out := make([]uint64, n)
	for i := range out {
		if out[i], err = r.uint(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// skip passes over one value of any type, nested at most maxSkipDepth deep. It walks
// iteratively with a stack of "values left at this level", so hostile nesting cannot
// exhaust the goroutine stack.
func (r *mpReader) skip() error {
	left := []int{1}
	for len(left) > 0 {
		top := len(left) - 1
		if left[top] == 0 {
			left = left[:top]
			continue
		}
		left[top]--
		c, err := r.code()
		if err != nil {
			return err
		}
		var n, children int
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			children = 2 * int(c&0x0f)
		case c >= 0x90 && c <= 0x9f:
			children = int(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf:
			n = int(c & 0x1f)
		case c == 0xc4 || c == 0xd9:
			n, err = r.length(1)
		case c == 0xc5 || c == 0xda:
			n, err = r.length(2)
		case c == 0xc6 || c == 0xdb:
			n, err = r.length(4)
		case c == 0xc7:
			n, err = r.length(1)
			n++ // the ext type byte
		case c == 0xc8:
			n, err = r.length(2)
			n++
		case c == 0xc9:
			n, err = r.length(4)
			n++
		case c == 0xca || c == 0xce || c == 0xd2:
			n = 4
		case c == 0xcb || c == 0xcf || c == 0xd3:
			n = 8
		case c == 0xcc || c == 0xd0:
			n = 1
		case c == 0xcd || c == 0xd1:
			n = 2
		case c >= 0xd4 && c <= 0xd8: // fixext: type byte + 1..16 bytes
			n = 1 + 1<<(c-0xd4)
		case c == 0xdc:
			children, err = r.length(2)
		case c == 0xdd:
			children, err = r.length(4)
		case c == 0xde:
			children, err = r.length(2)
			children *= 2
		case c == 0xdf:
			children, err = r.length(4)
			children *= 2
		default:
			return r.errf("invalid msgpack code %#02x", c)
		}
		if err != nil {
			return err
		}
		if _, err := r.next(n); err != nil {
			return err
		}
		if children > 0 {
			if children > r.remaining() {
				return r.errf("a container of %d values cannot fit in the %d bytes left", children, r.remaining())
			}
			if len(left) > maxSkipDepth {
				return r.errf("values nested more than %d deep", maxSkipDepth)
			}
			left = append(left, children)
		}
	}
	return nil
}

func codeName(c byte) string {
	switch {
	case c <= 0x7f || c >= 0xe0:
		return "an integer"
	case c <= 0x8f || c == 0xde || c == 0xdf:
		return "a map"
	case c <= 0x9f || c == 0xdc || c == 0xdd:
		return "an array"
	case c <= 0xbf || (c >= 0xd9 && c <= 0xdb):
		return "a string"
	case c == 0xc0:
		return "nil"
	case c == 0xc2 || c == 0xc3:
		return "a boolean"
	case c >= 0xc4 && c <= 0xc6:
		return "binary data"
	case c == 0xca:
		return "a float32"
	case c == 0xcb:
		return "a float64"
	case c >= 0xcc && c <= 0xd3:
		return "an integer"
	}
	return fmt.Sprintf("msgpack code %#02x", c)
}
