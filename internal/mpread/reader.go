package mpread

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// NoLimit, as a maximum length or count, leaves only the limit every read has anyway:
// what the remaining input can hold.
const NoLimit = math.MaxInt

// DefaultDepth is the nesting Skip accepts when Limits.Depth is 0.
const DefaultDepth = 32

// Limits bound what a Reader accepts beyond the size of its input. Zero fields take the
// defaults.
type Limits struct {
	// Depth is how deeply Skip (and Raw, and Fields for unknown keys) follows nested
	// values: a value inside more than Depth arrays or maps is refused. Default
	// DefaultDepth.
	Depth int
	// KeyLen is the longest map key Fields accepts, in bytes. Default: no limit.
	KeyLen int
}

// Reader reads msgpack values one at a time from a byte slice. Every method checks the
// input before using it; on an error the Reader has consumed nothing.
type Reader struct {
	b      []byte
	off    int
	depth  int
	keyLen int
}

// New returns a Reader at the start of b. The Reader does not copy b: strings it
// returns are copies, but Raw and Rest alias b.
func New(b []byte, lim Limits) *Reader {
	r := &Reader{b: b, depth: lim.Depth, keyLen: lim.KeyLen}
	if r.depth <= 0 {
		r.depth = DefaultDepth
	}
	if r.keyLen <= 0 {
		r.keyLen = NoLimit
	}
	return r
}

// Offset is the byte offset of the next value.
func (r *Reader) Offset() int { return r.off }

// Remaining is the number of unread bytes.
func (r *Reader) Remaining() int { return len(r.b) - r.off }

// Rest returns the unread bytes (aliasing the input) without consuming them.
func (r *Reader) Rest() []byte { return r.b[r.off:len(r.b):len(r.b)] }

// Done returns an error if any bytes remain unread.
func (r *Reader) Done() error {
	if n := r.Remaining(); n != 0 {
		return r.Errorf("%d trailing bytes after the value", n)
	}
	return nil
}

// Errorf returns an *Error at the Reader's offset, for a caller's own check of what it
// has read (a repeated name, a value out of range).
func (r *Reader) Errorf(format string, args ...any) error {
	return errAt(r.off, format, args...)
}

func errAt(at int, format string, args ...any) error {
	return &Error{Offset: at, Msg: fmt.Sprintf(format, args...)}
}

// fail rewinds the Reader to at, where the value it could not read starts, and reports
// the error there.
func (r *Reader) fail(at int, format string, args ...any) error {
	r.off = at
	return errAt(at, format, args...)
}

// code consumes the type byte of the next value; want names the value expected.
func (r *Reader) code(want string) (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.ended(want)
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

// ended reports the end of the input where a value should start.
func (r *Reader) ended(want string) error {
	return errAt(r.off, "unexpected end: the input ends early (want %s)", want)
}

// be consumes a big-endian unsigned integer of n = 1, 2, 4 or 8 bytes.
func (r *Reader) be(n int) (uint64, bool) {
	if n > len(r.b)-r.off {
		return 0, false
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	switch n {
	case 1:
		return uint64(s[0]), true
	case 2:
		return uint64(binary.BigEndian.Uint16(s)), true
	case 4:
		return uint64(binary.BigEndian.Uint32(s)), true
	}
	return binary.BigEndian.Uint64(s), true
}

// fixedLen is the payload of the fixed-size codes 0xca (float32) to 0xd3 (int64).
var fixedLen = [10]uint64{4, 8, 1, 2, 4, 8, 1, 2, 4, 8}

// size consumes the length prefix, if any, that follows the type byte c (just consumed)
// and returns the element count of an array, the entry count of a map, or else the bytes
// of payload that follow (0 when the type byte is the whole value). ok is false if the
// input ends inside the length prefix.
func (r *Reader) size(c byte) (n uint64, ok bool) {
	switch {
	case c <= 0x7f, c >= 0xe0, c >= 0xc0 && c <= 0xc3: // fixint, nil, 0xc1, booleans
		return 0, true
	case c <= 0x9f: // fixmap, fixarray
		return uint64(c & 0x0f), true
	case c <= 0xbf: // fixstr
		return uint64(c & 0x1f), true
	case c <= 0xc6: // bin 8/16/32
		return r.be(1 << (c - 0xc4))
	case c <= 0xc9: // ext 8/16/32: length, type byte, data
		n, ok = r.be(1 << (c - 0xc7))
		return n + 1, ok
	case c <= 0xd3: // float32/64, uint 8-64, int 8-64
		return fixedLen[c-0xca], true
	case c <= 0xd8: // fixext 1-16: type byte, data
		return 1 + 1<<(c-0xd4), true
	case c <= 0xdb: // str 8/16/32
		return r.be(1 << (c - 0xd9))
	case c <= 0xdd: // array 16/32
		return r.be(2 << (c - 0xdc))
	}
	return r.be(2 << (c - 0xde)) // map 16/32
}

// header consumes the type byte and length prefix of a value that must be of type want
// (an array, a map or a string) and returns its count or length.
func (r *Reader) header(want typ) (uint64, error) {
	at := r.off
	c, err := r.code(typeNames[want])
	if err != nil {
		return 0, err
	}
	if t := typeOf(c); t != want {
		return 0, r.fail(at, "want %s, got %s", typeNames[want], typeNames[t])
	}
	n, ok := r.size(c)
	if !ok {
		return 0, r.short(at, c)
	}
	return n, nil
}

// short reports a value whose type byte is there but whose body is cut off.
func (r *Reader) short(at int, c byte) error {
	return r.fail(at, "unexpected end: the input ends inside %s", typeName(c))
}

// Nil consumes the next value and reports true if it is nil; otherwise it consumes
// nothing and reports false.
func (r *Reader) Nil() bool {
	if r.off < len(r.b) && r.b[r.off] == 0xc0 {
		r.off++
		return true
	}
	return false
}

// ArrayLen reads an array header and returns its element count n. Each element takes at
// least minElem bytes (at least 1 whatever minElem says), so n is at most the bytes that
// remain divided by minElem; n is also at most limit (NoLimit for none). The caller then
// reads the n elements.
func (r *Reader) ArrayLen(minElem, limit int) (int, error) { return r.count(tArray, minElem, limit) }

// MapLen reads a map header and returns its entry count n: at most half the bytes that
// remain (a key and a value take at least a byte each) and at most limit (NoLimit for
// none). The caller then reads n keys and values, alternating; Fields does it for maps
// with string keys.
func (r *Reader) MapLen(limit int) (int, error) { return r.count(tMap, 2, limit) }

// count reads the header of an array or a map (want) and returns its count n, checked
// against the input (each of the n takes at least minBytes) and the caller's limit.
func (r *Reader) count(want typ, minBytes, limit int) (int, error) {
	at := r.off
	n, err := r.header(want)
	if err != nil {
		return 0, err
	}
	if left := r.Remaining(); n > uint64(left/max(minBytes, 1)) {
		return 0, r.fail(at, "%s of %d %s cannot fit in the %d bytes left", typeNames[want], n, unitNames[want], left)
	}
	if n > uint64(max(limit, 0)) {
		return 0, r.fail(at, "%s of %d %s exceeds the limit of %d", typeNames[want], n, unitNames[want], limit)
	}
	return int(n), nil
}

// Str reads a string of at most limit bytes (NoLimit for none). The result is a copy.
// It does not check that the bytes are UTF-8.
func (r *Reader) Str(limit int) (string, error) {
	at := r.off
	n, err := r.header(tStr)
	if err != nil {
		return "", err
	}
	if left := r.Remaining(); n > uint64(left) {
		return "", r.fail(at, "a string of %d bytes runs past the end of the input (%d bytes left)", n, left)
	}
	if n > uint64(max(limit, 0)) {
		return "", r.fail(at, "a string of %d bytes is longer than the limit of %d", n, limit)
	}
	s := string(r.b[r.off : r.off+int(n)])
	r.off += int(n)
	return s, nil
}

// integer reads an integer in any msgpack encoding and returns its two's-complement bits
// and whether it is negative; want names the value expected.
func (r *Reader) integer(want string) (v uint64, neg bool, err error) {
	at := r.off
	if at >= len(r.b) { // code's work, spelled out: integers are the hot path
		return 0, false, r.ended(want)
	}
	c := r.b[at]
	r.off++
	switch {
	case c <= 0x7f:
		return uint64(c), false, nil
	case c >= 0xe0:
		return uint64(int64(int8(c))), true, nil
	case c >= 0xcc && c <= 0xd3: // uint 8-64, int 8-64
		n := 1 << ((c - 0xcc) & 3)
		v, ok := r.be(n)
		if !ok {
			return 0, false, r.short(at, c)
		}
		if c >= 0xd0 {
			shift := 64 - 8*uint(n)
			s := int64(v<<shift) >> shift
			return uint64(s), s < 0, nil
		}
		return v, false, nil
	}
	return 0, false, r.fail(at, "want %s, got %s", want, typeName(c))
}

// Uint reads a non-negative integer in any msgpack integer encoding (a signed encoding
// of a non-negative value included).
func (r *Reader) Uint() (uint64, error) {
	at := r.off
	v, neg, err := r.integer("a non-negative integer")
	if err == nil && neg {
		return 0, r.fail(at, "want a non-negative integer, got a negative one")
	}
	return v, err
}

// UintMax reads an integer in [0, limit]; what names it in errors.
func (r *Reader) UintMax(what string, limit uint64) (uint64, error) {
	at := r.off
	v, err := r.Uint()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	if v > limit {
		return 0, r.fail(at, "%s = %d: must be at most %d", what, v, limit)
	}
	return v, nil
}

// Int reads a signed integer in any msgpack integer encoding; an unsigned one above
// math.MaxInt64 is an error.
func (r *Reader) Int() (int64, error) {
	at := r.off
	v, neg, err := r.integer("an integer")
	if err == nil && !neg && v > math.MaxInt64 {
		return 0, r.fail(at, "integer %d does not fit in int64", v)
	}
	return int64(v), err
}

// IntRange reads an integer in [lo, hi]; what names it in errors.
func (r *Reader) IntRange(what string, lo, hi int64) (int64, error) {
	at := r.off
	v, err := r.Int()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	if v < lo || v > hi {
		return 0, r.fail(at, "%s = %d: must be in [%d, %d]", what, v, lo, hi)
	}
	return v, nil
}

// Float64 reads a number: a float64, a float32 or an integer, as a float64 (integers
// beyond 2^53 round).
func (r *Reader) Float64() (float64, error) {
	at := r.off
	if at < len(r.b) && (r.b[at] == 0xca || r.b[at] == 0xcb) {
		c := r.b[at]
		r.off++
		v, ok := r.be(4 << (c - 0xca))
		switch {
		case !ok:
			return 0, r.short(at, c)
		case c == 0xca:
			return float64(math.Float32frombits(uint32(v))), nil
		}
		return math.Float64frombits(v), nil
	}
	v, neg, err := r.integer("a number")
	if neg {
		return float64(int64(v)), err
	}
	return float64(v), err
}

// Float32 reads a msgpack float32 (0xca) and nothing else: a float64 or an integer where
// a float32 belongs means a writer that rounds or a field of another type.
func (r *Reader) Float32() (float32, error) {
	at := r.off
	c, err := r.code("a float32")
	if err != nil {
		return 0, err
	}
	if c != 0xca {
		return 0, r.fail(at, "want a float32 (0xca), got %s", typeName(c))
	}
	v, ok := r.be(4)
	if !ok {
		return 0, r.short(at, c)
	}
	return math.Float32frombits(uint32(v)), nil
}

// Float32s reads an array of at most limit float32 values (5 bytes each on the wire, 4
// in memory).
func (r *Reader) Float32s(limit int) ([]float32, error) {
	return readArray(r, 5, limit, (*Reader).Float32)
}

// Uint64s reads an array of at most limit non-negative integers.
func (r *Reader) Uint64s(limit int) ([]uint64, error) {
	return readArray(r, 1, limit, (*Reader).Uint)
}

// readArray reads an array of at most limit elements of at least minElem bytes each,
// each with read.
func readArray[T any](r *Reader, minElem, limit int, read func(*Reader) (T, error)) ([]T, error) {
	at := r.off
	n, err := r.ArrayLen(minElem, limit)
	if err != nil {
		return nil, err
	}
	out := make([]T, n)
	for i := range out {
		if out[i], err = read(r); err != nil {
			r.off = at
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
	}
	return out, nil
}

// Bool reads a boolean.
func (r *Reader) Bool() (bool, error) {
	at := r.off
	c, err := r.code("a boolean")
	if err != nil {
		return false, err
	}
	if c != 0xc2 && c != 0xc3 {
		return false, r.fail(at, "want a boolean, got %s", typeName(c))
	}
	return c == 0xc3, nil
}

// Raw steps over the next value, as Skip does, and returns its encoding (aliasing the
// input).
func (r *Reader) Raw() ([]byte, error) {
	at := r.off
	if err := r.Skip(); err != nil {
		return nil, err
	}
	return r.b[at:r.off:r.off], nil
}

// Skip steps over the next value of any type, checking every length in it against the
// input; containers may nest at most Limits.Depth deep. It walks the value with an
// explicit stack, not by recursion, so hostile nesting costs neither goroutine stack nor
// more than one pass over its bytes.
func (r *Reader) Skip() error {
	at := r.off
	if err := r.skip(); err != nil {
		r.off = at
		return err
	}
	return nil
}

func (r *Reader) skip() error {
	var stack [DefaultDepth + 1]int
	left := append(stack[:0], 1) // values still to step over at each open level
	for len(left) > 0 {
		top := len(left) - 1
		if left[top] == 0 {
			left = left[:top]
			continue
		}
		left[top]--
		at := r.off
		c, err := r.code("a value")
		if err != nil {
			return err
		}
		t := typeOf(c)
		if t == tReserved {
			return errAt(at, "invalid msgpack code %#02x", c)
		}
		n, ok := r.size(c)
		if !ok {
			return errAt(at, "unexpected end: the input ends inside %s", typeNames[t])
		}
		rem := uint64(r.Remaining())
		if t != tArray && t != tMap { // n bytes of payload
			if n > rem {
				return errAt(at, "%s of %d bytes runs past the end of the input (%d bytes left)", typeNames[t], n, rem)
			}
			r.off += int(n)
			continue
		}
		values := n // of n elements or entries; each value takes a byte at least
		if t == tMap {
			values = 2 * n
		}
		switch {
		case values == 0:
			continue
		case values > rem:
			return errAt(at, "%s of %d %s cannot fit in the %d bytes left", typeNames[t], n, unitNames[t], rem)
		case len(left) > r.depth: // the values of this container would sit at depth len(left)
			return errAt(at, "values nested more than %d deep", r.depth)
		}
		left = append(left, int(values))
	}
	return nil
}

// Fields reads a map with string keys (of at most Limits.KeyLen bytes), calling f with
// each key and the Reader at its value. For a key it knows, f reads the value and
// returns known = true; for any other key it reads nothing and returns false, and Fields
// skips the value (a newer writer may add keys). A key that appears twice, or a required
// key that does not appear, is an error. what names the map in errors ("" for none).
func (r *Reader) Fields(what string, required []string, f func(key string) (known bool, err error)) error {
	at := r.off
	if err := r.fields(required, f); err != nil {
		r.off = at
		if what != "" {
			return fmt.Errorf("%s: %w", what, err)
		}
		return err
	}
	return nil
}

func (r *Reader) fields(required []string, f func(key string) (bool, error)) error {
	at := r.off
	n, err := r.MapLen(NoLimit)
	if err != nil {
		return err
	}
	// The keys, to find repeated and missing ones once the map is read. A list sized by
	// the count costs 16 bytes a key, at most 8 bytes per input byte since an entry takes
	// at least two; a set, or a list grown by append, would cost several times that.
	var small [16]string
	keys := small[:0]
	if n > len(small) {
		keys = make([]string, 0, n)
	}
	for range n {
		key, err := r.Str(r.keyLen)
		if err != nil {
			return fmt.Errorf("key: %w", err)
		}
		keys = append(keys, key)
		known, err := f(key)
		if err == nil && !known {
			err = r.Skip()
		}
		if err != nil {
			return fmt.Errorf("%q: %w", key, err)
		}
	}
	slices.Sort(keys)
	for i := 1; i < len(keys); i++ {
		if keys[i] == keys[i-1] {
			return errAt(at, "key %q appears twice", keys[i])
		}
	}
	for _, k := range required {
		if _, found := slices.BinarySearch(keys, k); !found {
			return errAt(at, "required key %q is missing", k)
		}
	}
	return nil
}

// typ is the type of a msgpack value, as its first byte tells.
type typ uint8

const (
	tInt typ = iota
	tNil
	tBool
	tFloat32
	tFloat64
	tStr
	tBin
	tArray
	tMap
	tExt
	tReserved // 0xc1, never used
)

var typeNames = [...]string{tInt: "an integer", tNil: "nil", tBool: "a boolean", tFloat32: "a float32", tFloat64: "a float64",
	tStr: "a string", tBin: "binary data", tArray: "an array", tMap: "a map", tExt: "an extension", tReserved: "the reserved byte 0xc1"}

func typeOf(c byte) typ {
	switch {
	case c <= 0x7f, c >= 0xe0, c >= 0xcc && c <= 0xd3:
		return tInt
	case c <= 0x8f, c == 0xde, c == 0xdf:
		return tMap
	case c <= 0x9f, c == 0xdc, c == 0xdd:
		return tArray
	case c <= 0xbf, c >= 0xd9 && c <= 0xdb:
		return tStr
	case c == 0xc0:
		return tNil
	case c == 0xc1:
		return tReserved
	case c == 0xc2, c == 0xc3:
		return tBool
	case c >= 0xc4 && c <= 0xc6:
		return tBin
	case c == 0xca:
		return tFloat32
	case c == 0xcb:
		return tFloat64
	}
	return tExt // 0xc7-0xc9, 0xd4-0xd8
}

// unitNames are what arrays and maps count, for errors.
var unitNames = [...]string{tArray: "elements", tMap: "entries"}

// typeName names the type a msgpack code starts, for errors.
func typeName(c byte) string { return typeNames[typeOf(c)] }
