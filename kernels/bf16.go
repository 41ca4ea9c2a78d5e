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
