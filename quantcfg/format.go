package quantcfg

import (
	"fmt"
	"strings"
)

// Format names a weight format. The string is what configs, flags and the wire use.
type Format string

// The weight formats. DESIGN.md's "Formats" table and the layout pictures in package
// kernels give their exact meaning.
const (
	I2S  Format = "i2s"  // ternary {-1,0,1}, 2-bit codes, multiply-add kernels (bitnet.cpp I2_S)
	TL1  Format = "tl1"  // ternary, pairs as 4-bit indices into a lookup table of pair sums
	TL2  Format = "tl2"  // ternary, triples as 5-bit codes (sign, magnitude index); K remainder in TL1
	Int2 Format = "int2" // 2-bit codes through a 4-level int8 code book
	Int1 Format = "int1" // binary ±1 (bit 0 -> +1, bit 1 -> -1)
	Int8 Format = "int8" // int8 weights, the int8 roofline reference
	BF16 Format = "bf16" // bfloat16 weights, unquantized baseline
	F32  Format = "f32"  // float32 weights, unquantized baseline
)

// FormatInfo describes what a format stores and which settings it accepts.
type FormatInfo struct {
	Format Format
	// BitsNum/BitsDen is the storage cost per weight in bits, excluding scales and
	// padding (tl2 stores 5 bits per 3 weights: 5/3).
	BitsNum, BitsDen int
	// Ternary formats store weights in {-1, 0, 1}.
	Ternary bool
	// Float formats compute in float32 and take activation mode "none".
	Float bool
	// Scales lists the scale granularities the format accepts; the first is the default.
	Scales []ScaleKind
	// Acts lists the activation modes the format accepts; the first is the default.
	Acts []ActKind
	// MaxK bounds the input dimension so that the kernels' int32 accumulators cannot
	// overflow (including the +128 offset the u8 x s8 dot products use).
	MaxK int
	// Summary is one line for `bitd info` and docs.
	Summary string
}

// Bits returns the storage cost per weight as a float, for display.
func (fi FormatInfo) Bits() float64 { return float64(fi.BitsNum) / float64(fi.BitsDen) }

// MaxDim bounds every layer dimension (rows and columns); larger layers should be split.
const MaxDim = 1 << 20

var intActs = []ActKind{ActPerToken, ActPerTensor, ActPerGroup}

var formatTable = []FormatInfo{
	{I2S, 2, 1, true, false, []ScaleKind{ScaleTensor, ScaleRow}, intActs, MaxDim,
		"ternary, 2-bit codes (w+1), multiply-add kernel (bitnet.cpp I2_S)"},
	{TL1, 2, 1, true, false, []ScaleKind{ScaleTensor, ScaleRow}, []ActKind{ActPerToken, ActPerTensor}, MaxDim,
		"ternary, weight pairs as 4-bit indices into a 9-entry table of activation pair sums"},
	{TL2, 5, 3, true, false, []ScaleKind{ScaleTensor, ScaleRow}, []ActKind{ActPerToken, ActPerTensor}, MaxDim,
		"ternary, weight triples as 5-bit codes (sign and magnitude 0..13) indexing a table of sums and negations; K remainder as tl1"},
	{Int2, 2, 1, false, false, []ScaleKind{ScaleRow, ScaleTensor, ScaleGroup}, intActs, 1 << 16,
		"2-bit codes mapped through a 4-entry int8 code book, VNNI4-interleaved"},
	{Int1, 1, 1, false, false, []ScaleKind{ScaleRow, ScaleTensor, ScaleGroup}, intActs, MaxDim,
		"binary ±1 (bit 0 -> +1, bit 1 -> -1), 16 inputs of a row to a word, looked up four at a time"},
	{Int8, 8, 1, false, false, []ScaleKind{ScaleRow, ScaleTensor, ScaleGroup}, intActs, 1 << 16,
		"int8 weights, VNNI4 blocks: the int8 roofline reference"},
	{BF16, 16, 1, false, true, []ScaleKind{ScaleNone}, []ActKind{ActNone}, MaxDim,
		"bfloat16 weights, float32 math: the unquantized baseline"},
	{F32, 32, 1, false, true, []ScaleKind{ScaleNone}, []ActKind{ActNone}, MaxDim,
		"float32 weights and math"},
}

// Formats returns every format in a stable order.
func Formats() []FormatInfo {
	out := make([]FormatInfo, len(formatTable))
	copy(out, formatTable)
	return out
}

func formatNames() string {
	names := make([]string, len(formatTable))
	for i, fi := range formatTable {
		names[i] = string(fi.Format)
	}
	return strings.Join(names, ", ")
}

// ParseFormat reads a format name (case-insensitive, surrounding space ignored).
func ParseFormat(s string) (Format, error) {
	f := Format(strings.ToLower(strings.TrimSpace(s)))
	if _, ok := f.Info(); ok {
		return f, nil
	}
	return "", fmt.Errorf("%w: format %q: allowed formats are %s", ErrInvalid, s, formatNames())
}

// Info returns the format's description, and false for an unknown format.
func (f Format) Info() (FormatInfo, bool) {
	for _, fi := range formatTable {
		if fi.Format == f {
			return fi, true
		}
	}
	return FormatInfo{}, false
}

// Validate reports an unknown format.
func (f Format) Validate() error {
	_, err := ParseFormat(string(f))
	if err != nil || Format(strings.ToLower(string(f))) != f {
		return fmt.Errorf("%w: format %q: allowed formats are %s", ErrInvalid, string(f), formatNames())
	}
	return nil
}

// IsTernary reports whether the format stores ternary weights.
func (f Format) IsTernary() bool { fi, _ := f.Info(); return fi.Ternary }

// IsFloat reports whether the format is an unquantized float baseline.
func (f Format) IsFloat() bool { fi, _ := f.Info(); return fi.Float }
