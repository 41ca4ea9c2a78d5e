package kernels

import "fmt"

// tl1: ternary weights in pairs; the pair (w0, w1) at inputs (2p, 2p+1) is the 4-bit index
// 3*w0 + w1 + 4 in 0..8 (9..15 invalid), which selects one of the 9 sums ±x0 ±x1 from a
// per-call lookup table.
//
// K is padded to Kp = roundup(K, 4). A row block's stream is Kp/4 units of 32 bytes: unit u
// covers inputs 4u..4u+3 of the block's 32 rows:
//
//	byte r (row 32*rb + r):  bits 7..4 = index of pair 2u+1 (inputs 4u+2, 4u+3)
//	                         bits 3..0 = index of pair 2u   (inputs 4u,   4u+1)
//
// so v & 15 and v >> 4 over the 32 bytes are 32 rows' indices for one pair each: a word
// lookup of a pair's table by them yields 32 rows' partial sums.
//
// The blob interleaves the streams chunk-major (as tl2 does), so that a kernel sweeping one
// K chunk over a range of row blocks reads contiguous memory. With nu = Kp/4 units, Mrb =
// Mp/32 row blocks and nc = ceil(nu/256) chunks, chunk c holds units u0 = c*nu/nc up to (not
// including) (c+1)*nu/nc, uc of them (at most TL1Chunk = 256, evenly spread):
//
//	piece size of chunk c:     P = 32*uc
//	row block rb's piece:      at Mrb*32*u0 + rb*P: its units u0..u0+uc-1
//
// (Layout.Piece computes these offsets, Layout.RowBlockData gathers a row block's stream.)
// A tl2 blob's tl1 tail is a row block's units as above, inside its last chunk's piece.

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
