package paged

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// DType is a tensor element type, spelled as safetensors spells it ("F32", "BF16", ...).
// Pack files use the same names for their unquantized tensors.
type DType string

// The element types safetensors defines (except the sub-byte ones, which this reader
// refuses).
const (
	BOOL    DType = "BOOL"
	U8      DType = "U8"
	I8      DType = "I8"
	F8E5M2  DType = "F8_E5M2"
	F8E4M3  DType = "F8_E4M3"
	I16     DType = "I16"
	U16     DType = "U16"
	F16     DType = "F16"
	BF16    DType = "BF16"
	I32     DType = "I32"
	U32     DType = "U32"
	F32     DType = "F32"
	I64     DType = "I64"
	U64     DType = "U64"
	F64     DType = "F64"
	dtNames       = "BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64"
)

// Size is the element size in bytes, 0 for an unknown dtype.
func (d DType) Size() int {
	switch d {
	case BOOL, U8, I8, F8E5M2, F8E4M3:
		return 1
	case I16, U16, F16, BF16:
		return 2
	case I32, U32, F32:
		return 4
	case I64, U64, F64:
		return 8
	}
	return 0
}

// IsFloat reports whether DecodeFloat32 reads this dtype (F16, BF16, F32, F64).
func (d DType) IsFloat() bool { return d == F16 || d == BF16 || d == F32 || d == F64 }

// ParseDType reads a dtype name (exactly as safetensors writes it).
func ParseDType(s string) (DType, error) {
	if DType(s).Size() == 0 {
		return "", fmt.Errorf("%w: dtype %q: known dtypes are %s", ErrInvalid, s, dtNames)
	}
	return DType(s), nil
}

// TensorInfo names a tensor and gives its element type and shape. An empty shape is a
// scalar (one element).
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int64
}

// Elements is the number of elements, or -1 if a dimension is negative or the product
// overflows int64 (or exceeds maxBytes / element size).
func (t TensorInfo) Elements() int64 { return elements(t.Shape, t.DType.Size()) }

// Bytes is the byte length the shape and dtype call for, or -1 (see Elements).
func (t TensorInfo) Bytes() int64 {
	n := t.Elements()
	if n < 0 {
		return -1
	}
	return n * int64(t.DType.Size())
}

func (t TensorInfo) shapeString() string {
	parts := make([]string, len(t.Shape))
	for i, d := range t.Shape {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// elements multiplies the shape, refusing negative dimensions and products whose byte size
// would exceed 2^62.
func elements(shape []int64, size int) int64 {
	if size <= 0 {
		return -1
	}
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		if d == 0 {
			n = 0
			continue
		}
		if n > (1<<62)/int64(size)/d {
			return -1
		}
		n *= d
	}
	return n
}

// DecodeFloat32 converts little-endian elements of dtype dt (F16, BF16, F32 or F64) from
// src into dst, len(dst) elements. F16 and BF16 convert exactly; F64 rounds to nearest.
func DecodeFloat32(dst []float32, src []byte, dt DType) error {
	if !dt.IsFloat() {
		return fmt.Errorf("%w: dtype %s is not a float type (F16, BF16, F32, F64)", ErrInvalid, dt)
	}
	if len(src) < len(dst)*dt.Size() {
		return fmt.Errorf("%w: %d bytes of %s hold fewer than %d elements", ErrInvalid, len(src), dt, len(dst))
	}
	switch dt {
	case BF16:
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
		}
	case F16:
		for i := range dst {
			dst[i] = HalfToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case F64:
		for i := range dst {
			dst[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:])))
		}
	}
	return nil
}

// HalfToFloat32 converts an IEEE-754 binary16 value exactly (subnormals, infinities and
// NaN payloads included).
func HalfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0: // ±0
		return math.Float32frombits(sign)
	}
	// Subnormal: normalize. The value is man * 2^-24.
	e := uint32(113)
	for man&0x400 == 0 {
		man <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
}
