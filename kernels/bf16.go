package kernels

import "math"

// BF16 converts a float32 to bfloat16 bits, rounding to nearest even. NaN becomes the quiet
// NaN 0x7FC0 (with the sign kept), so no NaN ever rounds to infinity.
func BF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7FFFFFFF > 0x7F800000 {
		return uint16(b>>16) | 0x7FC0
	}
	b += 0x7FFF + (b>>16)&1
	return uint16(b >> 16)
}

// FromBF16 widens bfloat16 bits to float32 exactly.
func FromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// RoundBF16 rounds a float32 to the nearest bfloat16 value, as a float32.
func RoundBF16(f float32) float32 { return FromBF16(BF16(f)) }

// bf16Loops are assembly versions of DecodeBF16 and EncodeBF16 (16 values at a time).
type bf16Loops struct {
	dec func(x *byte, n int, dst *float32)
	enc func(x *float32, n int, dst *byte)
}

// bf16LoopsBy holds the loops by path, set by the amd64 build where the CPU has the path.
var bf16LoopsBy [numISA]bf16Loops

// bf16Asm returns the loops of helperPath, or nil (the Go loops run).
func bf16Asm() *bf16Loops {
	if p := helperPath(); p != noISA && bf16LoopsBy[p].dec != nil {
		return &bf16LoopsBy[p]
	}
	return nil
}

// DecodeBF16 widens the len(dst) little-endian bfloat16 values in src (2*len(dst) bytes)
// to float32, exactly.
func DecodeBF16(dst []float32, src []byte) {
	src = src[:2*len(dst)]
	n := 0
	if asm := bf16Asm(); asm != nil && len(dst) >= 16 {
		n = len(dst) &^ 15
		asm.dec(&src[0], n, &dst[0])
	}
	decodeBF16Generic(dst[n:], src[2*n:])
}

// decodeBF16Generic is DecodeBF16 in Go, the reference of the assembly.
func decodeBF16Generic(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = FromBF16(uint16(src[2*i]) | uint16(src[2*i+1])<<8)
	}
}

// EncodeBF16 rounds src to bfloat16 (BF16: to nearest even, a NaN quieted) into dst as
// little-endian values (2*len(src) bytes).
func EncodeBF16(dst []byte, src []float32) {
	dst = dst[:2*len(src)]
	n := 0
	if asm := bf16Asm(); asm != nil && len(src) >= 16 {
		n = len(src) &^ 15
		asm.enc(&src[0], n, &dst[0])
	}
	encodeBF16Generic(dst[2*n:], src[n:])
}

// encodeBF16Generic is EncodeBF16 in Go, the reference of the assembly.
func encodeBF16Generic(dst []byte, src []float32) {
	for i, v := range src {
		h := BF16(v)
		dst[2*i], dst[2*i+1] = byte(h), byte(h>>8)
	}
}
