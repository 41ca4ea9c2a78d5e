package kernels

import (
	"encoding/binary"
	"fmt"
)

// tl2: ternary weights in triples; the triple (w0, w1, w2) at inputs (3t, 3t+1, 3t+2) is the
// balanced-ternary value v = 9*w0 + 3*w1 + w2 in [-13, 13], stored as the 5-bit code
// |v| + 16*(v < 0) (codes 14, 15, 30 and 31 are invalid; 16, a negative zero, reads as 0).
// A per-call table holds the sums of the non-negative triples and their negations, so the
// code indexes it directly. 5 bits per 3 weights: 1.67 bits per weight.
//
// Block-fitting split: inputs [0, K3) with K3 = 48*floor(K/48) are stored as tl2 blocks of 16
// triples; the remainder [K3, K) is stored as tl1 (see tl1.go), padded to Kp1 = roundup(K-K3, 4).
// Row block rb's stream is 320*(K3/48) + 8*Kp1 bytes: its tl2 blocks, then its tl1 units.
// The blob interleaves the streams chunk-major, so that a kernel sweeping one K chunk over a
// range of row blocks reads contiguous memory. With nb = K3/48 blocks, Mrb = Mp/32 row
// blocks and nc = max(1, ceil(nb/10)) chunks, chunk c holds blocks b0 = c*nb/nc up to (not
// including) (c+1)*nb/nc, bc of them (at most TL2Chunk = 10; evenly spread, so no chunk is
// a short straggler); the last chunk also holds the tl1 tail:
//
//	piece size of chunk c:     P = 320*bc (+ 8*Kp1 for the last chunk)
//	row block rb's piece:      at Mrb*320*b0 + rb*P: its blocks b0..b0+bc-1 (then its tail)
//
// (Layout.Piece computes these offsets, Layout.RowBlockData gathers a row block's stream.)
// tl2 block b (inputs 48b..48b+47) of a row block, 320 bytes, five planes of 32 words:
//
//	bytes [64j, 64j+64), j = 0..4: little-endian uint16, word r (row r):
//	    bits  0..4  = code of triple 3j
//	    bits  5..9  = code of triple 3j+1
//	    bits 10..14 = code of triple 3j+2
//	    bit  15     = bit j of the code of triple 15
//
// Triple t of block b covers inputs 48b+3t .. 48b+3t+2. A word's low five bits are a code as
// they stand and two shifts bring the others down (a 32-entry word lookup ignores the bits
// above), so a kernel reads 32 rows' codes of three triples with one load and two shifts.
//
// Measured and not adopted: panels of 16 row blocks stored block-major (panel, then block,
// then row block), so that a one-token kernel holds a block's 16 tables in registers for
// every row block of the panel. Tables of all of K are built per call, 2 KiB apart a
// block, in two copies that consecutive panels alternate between (with one copy the
// panels ran 0.88-1.01x on K of 2544-4080, for no reason found; the second copy in the
// first's gaps gained less); each row block keeps int16 sums in memory, widened every 5
// blocks. A prototype was bit for bit the reference; its rate over the one-token kernel on
// this layout, tables rebuilt every call (Zen 4 guest, DRAM, 7 rounds in turn), on K =
// 2544, 4080, 14304 and 6912:
//   - one thread: 1.01x, 1.09x, 1.15x, 1.14x;
//   - two threads (each its half of the panels, two runs): 1.17-1.18x, 1.09-1.17x,
//     1.13-1.16x, 0.99-1.04x.
// From L3 it ran at 0.90-0.99x: the gain is the memory stream's. Adopting it would touch
// every tl2 kernel (AVX2, two to four tokens, the GEMM, Xe2), the Python reference and
// the layout revision.

// tl2Code returns the code of triple t (0..15) of row r in the 320-byte block p.
func tl2Code(p []byte, t, r int) int {
	if t < 15 {
		return int(binary.LittleEndian.Uint16(p[64*(t/3)+2*r:])>>(5*(t%3))) & 31
	}
	c := 0
	for j := 0; j < 5; j++ {
		c |= int(p[64*j+2*r+1]>>7) << j
	}
	return c
}

// setTL2Code stores code c (0..31) of triple t of row r in the zeroed block p.
func setTL2Code(p []byte, t, r, c int) {
	if t < 15 {
		o := 64*(t/3) + 2*r
		binary.LittleEndian.PutUint16(p[o:], binary.LittleEndian.Uint16(p[o:])|uint16(c)<<(5*(t%3)))
		return
	}
	for j := 0; j < 5; j++ {
		p[64*j+2*r+1] |= byte(c>>j&1) << 7
	}
}

// tl2Value is the triple value of a valid code (tl2Code(...)&15 <= 13).
func tl2Value(c int) int {
	if c&16 != 0 {
		return -(c & 15)
	}
	return c & 15
}

func tl2Encode(l Layout, w []int8, blk []byte) {
	nb := l.K3 / TL2Block
	for r := 0; r < RowBlock; r++ {
		row := w[r*l.Kp:][:l.K3]
		for b := 0; b < nb; b++ {
			p := blk[320*b:][:320:320]
			tri := row[TL2Block*b:][:TL2Block:TL2Block]
			for t := 0; t < 16; t++ {
				v := 9*int(tri[3*t]) + 3*int(tri[3*t+1]) + int(tri[3*t+2])
				c := v
				if v < 0 {
					c = 16 - v
				}
				setTL2Code(p, t, r, c)
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
			for r := 0; r < RowBlock; r++ {
				c := tl2Code(p, t, r)
				k := TL2Block*b + 3*t
				if c&15 > 13 {
					return fmt.Errorf("%w: tl2 code %d at row %d, inputs %d-%d (codes are 0..13 and 16..29)", ErrWeights, c, r, k, k+2)
				}
				v := tl2Value(c)
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
