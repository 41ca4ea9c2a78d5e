package kernels

import (
	"encoding/binary"
	"math"
)

// bf16 and f32: unquantized weights, 32 rows per input, so a kernel keeps one accumulator
// lane per row and walks the inputs in order (the order the reference sums in).
//
// bf16: the blob is [Mp/32 row blocks][K][32 rows] little-endian bfloat16; row block rb,
// input k is the 64-byte line at (rb*K + k)*64, row r at byte 2r of it.
// f32: the same with float32: (rb*K + k)*128, row r at byte 4r.

func floatEncode(l Layout, w []float32, blk []byte) {
	for k := 0; k < l.K; k++ {
		for r := 0; r < RowBlock; r++ {
			v := w[r*l.K+k]
			if l.Format == "bf16" {
				binary.LittleEndian.PutUint16(blk[(k*32+r)*2:], BF16(v))
			} else {
				binary.LittleEndian.PutUint32(blk[(k*32+r)*4:], math.Float32bits(v))
			}
		}
	}
}

func floatDecode(l Layout, blk []byte, w []float32) {
	for k := 0; k < l.K; k++ {
		for r := 0; r < RowBlock; r++ {
			if l.Format == "bf16" {
				w[r*l.K+k] = FromBF16(binary.LittleEndian.Uint16(blk[(k*32+r)*2:]))
			} else {
				w[r*l.K+k] = math.Float32frombits(binary.LittleEndian.Uint32(blk[(k*32+r)*4:]))
			}
		}
	}
}
