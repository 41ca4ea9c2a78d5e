package kernels

import (
	"encoding/binary"
	"fmt"
	"math"

	"bitgo/quantcfg"
)

// Weights are a layer's logical weights, row-major [M][K].
//
// Integer formats use Q: ternary formats (i2s, tl1, tl2) hold -1, 0, 1; int2 holds code
// indices 0..3 (the level is the layer's codebook[code]); int1 holds +1 or -1; int8 holds the
// values. Float formats use F; Pack rounds F to bfloat16 (nearest even) for bf16.
type Weights struct {
	Q []int8
	F []float32
}

// Bytes encodes the weights as bitd's wire carries logical weights (ipc/PROTOCOL.md,
// register): int8 values for the integer formats, little-endian float32 for f32, and
// little-endian bfloat16 (F rounded to nearest even) for bf16.
func (w Weights) Bytes(f quantcfg.Format) []byte {
	switch f {
	case quantcfg.F32:
		b := make([]byte, 4*len(w.F))
		for i, v := range w.F {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		return b
	case quantcfg.BF16:
		b := make([]byte, 2*len(w.F))
		for i, v := range w.F {
			binary.LittleEndian.PutUint16(b[2*i:], BF16(v))
		}
		return b
	}
	b := make([]byte, len(w.Q))
	for i, v := range w.Q {
		b[i] = byte(v)
	}
	return b
}

// checkWeights validates logical weights for a format and shape.
func checkWeights(f quantcfg.Format, m, k int, w Weights) error {
	if f.IsFloat() {
		if len(w.F) != m*k {
			return fmt.Errorf("%w: %s weights: %d float values, want %d (M=%d x K=%d)", ErrShape, f, len(w.F), m*k, m, k)
		}
		for i, v := range w.F {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("%w: %s weight at row %d, input %d is %v", ErrNonFinite, f, i/k, i%k, v)
			}
		}
		return nil
	}
	if len(w.Q) != m*k {
		return fmt.Errorf("%w: %s weights: %d int8 values, want %d (M=%d x K=%d)", ErrShape, f, len(w.Q), m*k, m, k)
	}
	var lo, hi int8
	var what string
	switch {
	case f.IsTernary():
		lo, hi, what = -1, 1, "ternary weights are -1, 0 or 1"
	case f == quantcfg.Int2:
		lo, hi, what = 0, 3, "int2 weights are code indices 0..3"
	case f == quantcfg.Int1:
		lo, hi, what = -1, 1, "int1 weights are +1 or -1"
	default:
		return nil
	}
	if i := firstOutside(w.Q, lo, hi, f == quantcfg.Int1); i >= 0 {
		return fmt.Errorf("%w: %s weight at row %d, input %d is %d: %s", ErrWeights, f, i/k, i%k, w.Q[i], what)
	}
	return nil
}

// firstOutside returns the index of the first value outside [lo, hi] (or equal to 0 when
// noZero), or -1. One unsigned compare per value: it runs on every packed weight.
func firstOutside(q []int8, lo, hi int8, noZero bool) int {
	span := uint8(hi - lo)
	if noZero { // ±1: v+1 must be 0 or 2
		for i, v := range q {
			if uint8(v+1)&^2 != 0 {
				return i
			}
		}
		return -1
	}
	for i, v := range q {
		if uint8(v-lo) > span {
			return i
		}
	}
	return -1
}

// Pack writes logical weights into dst in the format's layout. dst must have exactly
// Layout.Bytes() bytes (it is typically arena memory); it is fully overwritten, padding
// included.
func Pack(f quantcfg.Format, m, k int, w Weights, dst []byte) error {
	l, err := NewLayout(f, m, k)
	if err != nil {
		return err
	}
	if len(dst) != l.Bytes() {
		return fmt.Errorf("%w: %s %dx%d packs into %d bytes, destination has %d", ErrShape, f, m, k, l.Bytes(), len(dst))
	}
	if err := checkWeights(f, m, k, w); err != nil {
		return err
	}
	var scratch []int8
	var stream []byte
	for rb := 0; rb < l.RowBlocks(); rb++ {
		r0, r1 := rb*RowBlock, min((rb+1)*RowBlock, m)
		blk := l.RowBlockData(dst, rb, stream) // tl1, tl2: a scratch stream, stored below
		stream = blk
		clear(blk)
		switch {
		case f.IsFloat():
			rows := make([]float32, RowBlock*k) // padding rows are 0
			copy(rows, w.F[r0*k:r1*k])
			floatEncode(l, rows, blk)
		case r1-r0 == RowBlock && l.Kp == k:
			encoders[f](l, w.Q[r0*k:r1*k], blk)
		default:
			scratch = padRows(l, w.Q, r0, r1, scratch)
			encoders[f](l, scratch, blk)
		}
		l.SetRowBlockData(dst, rb, blk)
	}
	return nil
}

// padRows returns rows [r0, r1) of the logical weights as a [32][Kp] row block, every
// padding position (rows >= M, inputs >= K) holding the format's padding value: 0 where the
// format has a zero weight (ternary formats, int8), code 0 for int2, +1 (bit 0) for int1.
func padRows(l Layout, q []int8, r0, r1 int, rows []int8) []int8 {
	var pad int8
	if l.Format == quantcfg.Int1 {
		pad = 1
	}
	rows = resize(rows, RowBlock*l.Kp)
	for i := range rows {
		rows[i] = pad
	}
	for r := r0; r < r1; r++ {
		copy(rows[(r-r0)*l.Kp:], q[r*l.K:(r+1)*l.K])
	}
	return rows
}

// PackNew is Pack into a new Go slice (tests and tools; the daemon packs into arenas).
func PackNew(f quantcfg.Format, m, k int, w Weights) ([]byte, error) {
	l, err := NewLayout(f, m, k)
	if err != nil {
		return nil, err
	}
	dst := make([]byte, l.Bytes())
	if err := Pack(f, m, k, w, dst); err != nil {
		return nil, err
	}
	return dst, nil
}

var encoders = map[quantcfg.Format]func(Layout, []int8, []byte){
	quantcfg.I2S: i2sEncode, quantcfg.TL1: tl1Encode, quantcfg.TL2: tl2Encode,
	quantcfg.Int2: int2Encode, quantcfg.Int1: int1Encode, quantcfg.Int8: int8Encode,
}

var decoders = map[quantcfg.Format]func(Layout, []byte, []int8) error{
	quantcfg.I2S: i2sDecode, quantcfg.TL1: tl1Decode, quantcfg.TL2: tl2Decode,
	quantcfg.Int2: int2Decode, quantcfg.Int1: int1Decode, quantcfg.Int8: int8Decode,
}

// Unpack returns the logical weights of a packed blob (the inverse of Pack).
func Unpack(f quantcfg.Format, m, k int, blob []byte) (Weights, error) {
	l, err := NewLayout(f, m, k)
	if err != nil {
		return Weights{}, err
	}
	if len(blob) != l.Bytes() {
		return Weights{}, fmt.Errorf("%w: %s %dx%d blob has %d bytes, want %d", ErrShape, f, m, k, len(blob), l.Bytes())
	}
	if f.IsFloat() {
		out := make([]float32, m*k)
		tmp := make([]float32, RowBlock*k)
		for rb := 0; rb < l.RowBlocks(); rb++ {
			floatDecode(l, l.RowBlockData(blob, rb, nil), tmp)
			r1 := min((rb+1)*RowBlock, m)
			copy(out[rb*RowBlock*k:r1*k], tmp)
		}
		return Weights{F: out}, nil
	}
	out := make([]int8, m*k)
	tmp := make([]int8, RowBlock*l.Kp)
	var stream []byte
	for rb := 0; rb < l.RowBlocks(); rb++ {
		stream = l.RowBlockData(blob, rb, stream)
		if err := decoders[f](l, stream, tmp); err != nil {
			return Weights{}, fmt.Errorf("row block %d: %w", rb, err)
		}
		for r := 0; r < RowBlock && rb*RowBlock+r < m; r++ {
			copy(out[(rb*RowBlock+r)*k:][:k], tmp[r*l.Kp:][:k])
		}
	}
	return Weights{Q: out}, nil
}

// CheckBlob verifies that every code in a packed blob is valid for its format (a blob from
// an untrusted peer must pass this before a kernel reads it).
func CheckBlob(l Layout, blob []byte) error {
	if len(blob) != l.Bytes() {
		return fmt.Errorf("%w: %s %dx%d blob has %d bytes, want %d", ErrShape, l.Format, l.M, l.K, len(blob), l.Bytes())
	}
	dec, ok := decoders[l.Format]
	if !ok {
		return nil // every bit pattern is a valid int8 or float... floats are checked below
	}
	tmp := make([]int8, RowBlock*l.Kp)
	var stream []byte
	for rb := 0; rb < l.RowBlocks(); rb++ {
		stream = l.RowBlockData(blob, rb, stream)
		if err := dec(l, stream, tmp); err != nil {
			return fmt.Errorf("row block %d: %w", rb, err)
		}
	}
	return nil
}
