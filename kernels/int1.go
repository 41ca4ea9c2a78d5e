package kernels

import "encoding/binary"

// int1: binary weights, bit 0 -> +1, bit 1 -> -1, in blocks of 32 inputs whose bits a kernel
// reads four at a time as the index of a 16-entry table of signed activation sums (layout
// kernels/9; kernels/1 to kernels/8 stored them VNNI4-interleaved, int1DecodeV8).
//
// K is padded to Kp = roundup(K, 32): nb = Kp/32 blocks. Row block rb's stream is 4*Kp bytes,
// its blocks in order, 128 bytes each: block b (inputs 32b..32b+31) holds two planes of 32
// little-endian uint16 words,
//
//	bytes [64h, 64h+64), h = 0, 1: word r (row r of the row block):
//	    bit j (j = 0..15) = 1 where w[r][32b+16h+j] = -1
//
// so nibble f of plane h's word is the code of quad q = 4h+f (inputs 32b+4q..32b+4q+3), its
// bit i the sign of input 32b+4q+i. A kernel looks a code up in the quad's table T_q[c] =
// sum_i (1 - 2*bit_i(c)) * x[32b+4q+i]: a 32-entry word lookup (vpermw) ignores the bits
// above the low five, so with T_q stored twice over (entries 16-31 = 0-15) one load and three
// shifts bring every code of a plane down in turn, whatever bit 4 holds.
//
// The blob is panel-major: panels of P = ceil(Mrb/(2n)) row blocks, n = ceil(Mrb/64), one
// after another (int1PanelRows; P <= Int1Panel, the last panel may have fewer): 2n panels
// but at a large Mrb sometimes one fewer. Panel p holds row blocks P*p.. (g of them) from byte P*p*S (S = 4*Kp), block by
// block, the g row blocks' 128 bytes of a block side by side:
//
//	row block P*p+i's block b:   P*p*S + 128*(b*g + i)
//
// so a kernel that builds a block's tables once and sweeps them over the panel's row blocks
// reads one stretch of memory in order (Layout.BlockAt), and a worker's whole panels are one
// stretch too. Workers take whole panels (RowGranule): two threads each sweeping half of
// every block of 2560x2560's panels of 32 row blocks read 0.48-0.71x as fast as the VNNI4
// kernel, with whole panels 1.03-1.04x. The panels come in pairs of (nearly) the same size
// so that two workers' shares of them are even at every M (6912 rows, 216 row blocks: 8
// panels of 27, where panels of 32 would split 128/88); where more workers would share the
// panels out unevenly or sit idle, a call runs in parts of the blob's blocks instead
// (int1PartUnits), each worker one stretch of it. A panel's tables are built once per
// block, about 32 operations against a row block's 40 lookups and adds, so panels of 17-32
// row blocks cost 2-5% of the call for it. Groups (quantcfg.MinGroup = 32) start at block
// boundaries.
//
// Why. kernels/8's VNNI4 layout (Georganas et al.) decoded each bit plane with an and and
// multiplied it with vpdpbusd: 17 vector operations for 64 bytes of weights on zmm (a vpermb,
// 8 ands, 8 vpdpbusd), one multiply-pipe operation per 64 weights of a row. On Zen 4, where
// vpermb and the broadcasts share vpdpbusd's pipes, its one-token kernel read about 24 GB/s
// from any level of memory at one thread, 75-84% of the DRAM roofline. A lookup does 4
// vpermw (32 codes of 4 weights each), 3 shifts and 4 vpaddw for the same 64 bytes, plus the
// tables' build, once per block and panel. A prototype of the one-token kernel (the tables
// of a block built in registers from its activations) read, from DRAM at one thread (1 GiB
// working set, 15 rounds in turn with the old kernel in one process): 29.6-29.7 GB/s on the
// 8B shapes against 23.9-24.2 (1.23-1.24x, 94-95% of the read rate measured there), 28.2
// against 24.6 on 2560x2560 (1.14x). Blocks of 64 inputs (four planes, 16 tables) read 1-3%
// more but would split groups of 32.

// Int1Panel is the most row blocks in one panel of an int1 blob.
const Int1Panel = 32

// int1PanelRows returns the row blocks per panel of an int1 blob of mrb row blocks: 2*n
// panels (n = ceil(mrb/64)) of ceil(mrb/(2n)), the last possibly fewer.
func int1PanelRows(mrb int) int {
	np := 2 * ((mrb + 2*Int1Panel - 1) / (2 * Int1Panel))
	return (mrb + np - 1) / np
}

// int1BlockBytes is one row block's bytes of an int1 block (32 rows x 32 inputs).
const int1BlockBytes = 128

func int1Encode(l Layout, w []int8, blk []byte) {
	for b := 0; b < l.Kp/32; b++ {
		for h := 0; h < 2; h++ {
			for r := 0; r < RowBlock; r++ {
				row := w[r*l.Kp+32*b+16*h:][:16]
				var v uint16
				for j, x := range row {
					v |= uint16(byte(x)>>7) << j // bit 1 for -1: the sign bit of the int8
				}
				binary.LittleEndian.PutUint16(blk[128*b+64*h+2*r:], v)
			}
		}
	}
}

func int1Decode(l Layout, blk []byte, w []int8) error {
	for b := 0; b < l.Kp/32; b++ {
		for h := 0; h < 2; h++ {
			for r := 0; r < RowBlock; r++ {
				v := binary.LittleEndian.Uint16(blk[128*b+64*h+2*r:])
				row := w[r*l.Kp+32*b+16*h:][:16]
				for j := range row {
					row[j] = int8(1 - 2*int(v>>j&1))
				}
			}
		}
	}
	return nil
}

// int1DecodeV8 decodes a row block of an int1 blob of layout kernels/1 to kernels/8 (Relayout):
// row block rb at rb*4*Kp, units of 32 bytes holding 32 rows x inputs 8u..8u+7, byte p =
// 4*r8 + k4 (r8 = 0..7, k4 = 0..3), bit j (j = 0..3) row 8j+r8 at input 8u+k4, bit 4+j row
// 8j+r8 at input 8u+4+k4.
func int1DecodeV8(l Layout, blk []byte, w []int8) {
	for u := 0; u < l.Kp/8; u++ {
		unit := blk[32*u:][:32]
		for p := 0; p < 32; p++ {
			r8, k4 := p/4, p%4
			for h := 0; h < 2; h++ {
				for j := 0; j < 4; j++ {
					w[(8*j+r8)*l.Kp+8*u+4*h+k4] = int8(1 - 2*int(unit[p]>>(4*h+j)&1))
				}
			}
		}
	}
}
