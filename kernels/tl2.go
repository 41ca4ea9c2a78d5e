package kernels

import (
	"encoding/binary"
	"fmt"
)

// tl2: ternary weights in triples; the triple (w0, w1, w2) at inputs (3t, 3t+1, 3t+2) is the
// balanced-ternary value v = 9*w0 + 3*w1 + w2 in [-13, 13], stored as a sign bit (v < 0) and
// a 4-bit index |v| in 0..13 (14, 15 invalid). A per-call table holds the 14 sums of the
// non-negative triples; the sign negates. 5 bits per 3 weights: 1.67 bits per weight.
//
// Block-fitting split: inputs [0, K3) with K3 = 48*floor(K/48) are stored as tl2 blocks of 16
// triples; the remainder [K3, K) is stored as tl1 (see tl1.go), padded to Kp1 = roundup(K-K3, 4).
// Row block rb is 320*(K3/48) + 8*Kp1 contiguous bytes: its tl2 blocks, then its tl1 units.
// tl2 block b (inputs 48b..48b+47) of a row block, 320 bytes:
//
//	bytes [32u, 32u+32), u = 0..7:  byte r (row r): bits 3..0 = index of triple 2u,
//	                                                bits 7..4 = index of triple 2u+1
//	bytes [256+4t, 260+4t), t = 0..15: little-endian uint32, bit r = sign of triple t, row r
//
// Triple t of block b covers inputs 48b+3t .. 48b+3t+2.

func tl2Encode(l Layout, w []int8, blk []byte) {
	nb := l.K3 / TL2Block
	for r := 0; r < RowBlock; r++ {
		row := w[r*l.Kp:][:l.K3]
		for b := 0; b < nb; b++ {
			p := blk[320*b:][:320:320]
			tri := row[TL2Block*b:][:TL2Block:TL2Block]
			for t := 0; t < 16; t++ {
				v := 9*int(tri[3*t]) + 3*int(tri[3*t+1]) + int(tri[3*t+2])
				if v < 0 {
					p[256+4*t+r/8] |= 1 << (r % 8) // bit r of the little-endian uint32
					v = -v
				}
				p[32*(t/2)+r] |= byte(v) << (4 * (t % 2))
			}
		}
	}
	tl1EncodeUnits(l, w, l.K3, l.Kp1, blk[320*nb:])
}

func tl2Decode(l Layout, blk []byte, w []int8) error {
	nb := l.K3 / TL2Block
	for b := 0; b < nb; b++ {
		p := blk[320*b:][:320]
		for t := 0; t < 16; t++ {
			signs := binary.LittleEndian.Uint32(p[256+4*t:])
			for r := 0; r < RowBlock; r++ {
				v := int(p[32*(t/2)+r]>>(4*(t%2))) & 15
				k := TL2Block*b + 3*t
				if v > 13 {
					return fmt.Errorf("%w: tl2 index %d at row %d, inputs %d-%d (indices are 0..13)", ErrWeights, v, r, k, k+2)
				}
				if signs>>r&1 != 0 {
					v = -v
				}
				// balanced ternary digits of v
				d0 := (v + 13) / 9
				rem := v + 13 - 9*d0
				w[r*l.Kp+k] = int8(d0 - 1)
				w[r*l.Kp+k+1] = int8(rem/3 - 1)
				w[r*l.Kp+k+2] = int8(rem%3 - 1)
			}
		}
	}
	return tl1DecodeUnits(l, blk[320*nb:], l.K3, l.Kp1, w)
}
