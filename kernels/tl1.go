package kernels

import "fmt"

// tl1: ternary weights in pairs; the pair (w0, w1) at inputs (2p, 2p+1) is the 4-bit index
// 3*w0 + w1 + 4 in 0..8 (9..15 invalid), which selects one of the 9 sums ±x0 ±x1 from a
// per-call lookup table.
//
// K is padded to Kp = roundup(K, 4). The blob is [Mp/32 row blocks][Kp/4 units][32 B]; unit u
// of row block rb is at rb*8*Kp + 32*u, and covers inputs 4u..4u+3 of the block's 32 rows:
//
//	byte r (row 32*rb + r):  bits 7..4 = index of pair 2u+1 (inputs 4u+2, 4u+3)
//	                         bits 3..0 = index of pair 2u   (inputs 4u,   4u+1)
//
// so v & 15 and v >> 4 over the 32 bytes are 32 rows' indices for one pair each: a vpshufb
// of a pair's table by them yields 32 rows' partial sums.

func tl1Index(w0, w1 int8) byte { return byte(3*int(w0) + int(w1) + 4) }

func tl1EncodeUnits(l Layout, w []int8, k0, kp int, units []byte) {
	for u := 0; u < kp/4; u++ {
		for r := 0; r < RowBlock; r++ {
			var v byte
			for h := 0; h < 2; h++ {
				k := k0 + 4*u + 2*h
				v |= tl1Index(w[r*l.Kp+k], w[r*l.Kp+k+1]) << (4 * h)
			}
			units[32*u+r] = v
		}
	}
}

// tl1DecodeUnits decodes units covering inputs [k0, k0+kp) into rows of stride l.Kp.
func tl1DecodeUnits(l Layout, units []byte, k0, kp int, w []int8) error {
	for u := 0; u < kp/4; u++ {
		for r := 0; r < RowBlock; r++ {
			v := units[32*u+r]
			for h := 0; h < 2; h++ {
				idx := int(v>>(4*h)) & 15
				if idx > 8 {
					return fmt.Errorf("%w: tl1 index %d at row %d, inputs %d-%d (indices are 0..8)", ErrWeights, idx, r, k0+4*u+2*h, k0+4*u+2*h+1)
				}
				k := k0 + 4*u + 2*h
				w[r*l.Kp+k] = int8(idx/3 - 1)
				w[r*l.Kp+k+1] = int8(idx%3 - 1)
			}
		}
	}
	return nil
}

func tl1Encode(l Layout, w []int8, blk []byte) { tl1EncodeUnits(l, w, 0, l.Kp, blk) }

func tl1Decode(l Layout, blk []byte, w []int8) error { return tl1DecodeUnits(l, blk, 0, l.Kp, w) }
