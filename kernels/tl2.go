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
// Row block rb's stream is S = 320*(K3/48) + 8*Kp1 bytes: its tl2 blocks, then its tl1 units.
// With nb = K3/48 blocks and Mrb = Mp/32 row blocks, the blob interleaves the streams one of
// two ways, by shape (Layout.Paneled, Layout.Chunked):
//
// Panel-major, where nb >= 21 and Mrb >= 64 (K >= 1008, M > 2016): panels of up to G row
// blocks one after another, so that a kernel holding a block's tables reads the panel's
// row blocks' 320 bytes of the block one after another, and a worker's whole panels are
// one stretch of memory. G = TL2Panel = 32 where Mrb >= 120 (M > 3808), and below that G =
// ceil(Mrb/2): two panels, one for each of two workers (Layout.PanelRows). Panel p holds
// row blocks G*p.. (g of them, G but in a short last panel) and starts at byte G*p*S:
//
//	row block G*p+i's block b:    G*p*S + 320*(b*g + i)
//	row block G*p+i's tl1 tail:   G*p*S + 320*nb*g + 8*Kp1*i
//
// (Layout kernels/5 had panels of 16 row blocks, where nb >= 85 and Mrb >= 128; kernels/6
// panels of 32 where nb >= 53 and Mrb >= 120, and no two-panel blobs; kernels/7 the rule of
// now but from nb >= 53, K >= 2544.)
//
// Chunk-major, the other shapes: a kernel sweeping one K chunk over a range of row blocks
// reads contiguous memory. With nc = max(1, ceil(nb/10)) chunks, chunk c holds blocks b0 =
// c*nb/nc up to (not including) (c+1)*nb/nc, bc of them (at most TL2Chunk = 10; evenly
// spread, so no chunk is a short straggler); the last chunk also holds the tl1 tail:
//
//	piece size of chunk c:     P = 320*bc (+ 8*Kp1 for the last chunk)
//	row block rb's piece:      at Mrb*320*b0 + rb*P: its blocks b0..b0+bc-1 (then its tail)
//
// (Layout.BlockAt, TailAt and Piece compute these offsets, Layout.RowBlockData gathers a row
// block's stream.)
//
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
// Why the rule. Layout kernels/5 (panels of 16, K >= 4080 and M > 4064): tl2 per token
// over i2s from DRAM on the Zen 4 guest (`bitd bench`, zen4+adapt, three runs of its build
// and the chunk-major one's in turn, 7 rounds each; median of the runs' ratios, new against
// old):
//   - one token, one thread: 4096x14336 1.15-1.21 against 1.06-1.11 (+8.8%), 4096x4096
//     1.13-1.19 against 1.05-1.18 (+4.4%), 14336x4096 1.15-1.16 against 1.08-1.24 (-0.6%);
//   - one token, two threads: -1% to +3%; two tokens: -2% to -7%; four: -5% to +7%.
//
// Two workers sharing a panel each stream the other's half of every block past their
// caches (2560x2560 at two threads split 40/40 row blocks: 0.39-0.43x), so a call splits by
// whole panels (RowGranule), or, where those would not share out evenly (more workers than
// panels), in parts: a row block's block a unit (panelUnits). With AVX2 the panel kernels
// ran as fast as the chunk-major ones (one, two and four tokens).
//
// With panels of 16 the shapes of K = 2560 lost to chunk-major at one token and one
// thread (0.85-0.95; 4096 rows by K: 2560 0.85, 3072 0.95, 3600 1.03, 4080 1.04, 6144 1.09).
// A panel ran at a steady rate from DRAM that grew with K (21-23 GB/s up to K = 2688, 26-29
// from 4080) and from cache as fast as the chunk-major kernel; what cost was the tables: a
// block loads its 1 KiB of tables once per 16 row blocks' 5 KiB of weights. With every
// block reading one and the same 1 KiB (timing only) the panel kernel ran 1.04-1.12x the
// chunk-major one at K = 2560 instead of 0.85-0.92, while prefetching the next block's
// tables (prefetcht0 or prefetcht1, one or two blocks ahead) gained nothing, nor did the
// tables' addresses or the int16 sums' (4 KiB aliasing); the tl1 tails cost 2-3%.
//
// Panels of 32 (kernels/6) halve the tables' share. Measured in one process (a blob set of
// each layout and i2s's, 9-11 rounds in turn, 200 ms trials; panel-major's speed over
// chunk-major's, medians; 1T / 2T):
//   - one token, K = 2560: 3840x2560 1.02-1.05 / 1.05-1.11, 6912x2560 1.03-1.04 /
//     1.01-1.07, 13824x2560 1.01 / 1.06; 4096x3072 1.09 / 1.07; two and four tokens
//     on those of K = 2560 0.96-1.01 / 0.96-1.09;
//   - the shapes of kernels/5's rule, panels of 32 over 16: 14336x4096, 4096x14336,
//     4096x4096 and 6144x4096 0.99-1.03 / 0.99-1.02 at one token, 1.00-1.07 / 0.97-1.06
//     at two and four;
//   - fewer rows, one token: 2048x8192 1.08 / 1.07, 3072x8192 1.07 / 1.05, 3200x8640
//     1.10 / 1.09, 2560x6912 1.12-1.16 / 0.95-1.03; 2560x2560 0.99-1.05 / 1.02-1.12; one
//     panel (512x4096, 640x2560, 1024x2560, 1024x4096) 1.02-1.09 / 1.05-1.19. But where two
//     workers cannot split by whole panels (2560 rows: 32, 32 and 16 row blocks; 1536:
//     32 and 16) two tokens and more at two threads lost: 2560x2560 0.85-0.98 (two),
//     0.85-0.94 (four), 0.84-0.87 (eight), 1536x2560 0.82-0.91, 2560x6912 0.82-1.02, split
//     in parts (units of whole blocks or of a row block's block) or by rows (whole panels
//     or row blocks). Panels sized so that two workers take one each (two of 40 row
//     blocks at 2560 rows, two runs; four of 20 no better) did not settle it: 2560x2560
//     1.02-1.11 at two threads (one to eight tokens) but 0.95-1.02 at one; 2560x6912
//     1.13-1.27 at one thread and one token, 0.97 at two threads and one token, 0.96-1.06
//     for two to eight tokens. BitNet's decode at two threads would gain on o_proj what
//     it lost on down_proj, three times o_proj's size. Two panels at other M (a third
//     run, one / two / four tokens): one thread 1.02-1.16 / 0.94-1.01 / 0.98-1.02 (2048x8192,
//     3072x8192, 3072x3072 with panels of 48, 2560x2560, 2560x6912); two threads, one token,
//     the short K gain (2560x2560 1.21, 3072x3072 1.09) and the long lose (2048x8192,
//     2560x6912, 3072x8192 0.95-0.99). Which of the VM's two states a run met decides
//     that. Where its two vCPUs share one core (kbench.CoreProbe's compute_scale 1.1-1.4,
//     the fast memory), chunk-major ran at two threads 0.74-0.83x i2s's speed on 2560x2560
//     and 0.86-0.98x on 2560x6912 (ten paired runs), and without its table build (timing
//     only) only 1.01-1.07x and 1.04-1.13x faster. Two panels of 40 row blocks against
//     chunk-major, one token at two threads, 14 paired runs of each shape with the cores
//     probed before and after each (three rounds of 150 ms; the cores were shared in one
//     run of 2560x2560 and two of 2560x6912): shared, 2560x2560 1.21x and 2560x6912
//     1.17-1.23x (chunk-major 0.88-0.90x i2s, panels 1.07-1.09x); on cores of their own
//     2560x2560 0.97-1.17x (mostly 1.05-1.09) and 2560x6912 0.83-0.99x (mostly 0.94-0.97),
//     panels then 1.05-1.19x i2s. A guess: the two threads' chunk tables share one L1 when
//     the cores are shared, where the panel kernel keeps a block's tables in registers.
//     At two threads the same loop found two tokens 0.97-1.05x on cores of their own (six
//     runs of each shape) and four tokens 1.00x on their own (one run), 1.03-1.10x shared
//     (eight runs of the two shapes).
//
// So kernels/6 made a shape panel-major from K >= 2544 where it has at least 120 row blocks
// (3840 rows, the QKV projection of BitNet b1.58 2B, splits 64/56 between two workers), and
// chunk-major otherwise.
//
// Two panels (kernels/7). A second run of the loop above (20 paired runs of each shape and
// token count, two threads, two panels of 40 row blocks over chunk-major; medians, ranges):
//   - one token, the cores shared in all 40: 2560x2560 1.26 (1.17-1.30), 2560x6912 1.18
//     (1.08-1.27);
//   - two tokens, on cores of their own (13 of 20): 1.03 (1.00-1.05) and 0.99 (0.97-1.09);
//     shared (7): 1.05 (1.00-1.09) and 1.05 (0.98-1.12);
//   - four tokens, shared in all 40: 1.04 (1.02-1.06) and 1.09 (1.03-1.15);
//   - one thread (six runs): one token 1.04 (1.03-1.07) and 1.14 (1.14-1.16); two tokens
//     (four) 0.97 (0.95-0.97) and 0.95 (0.95-0.97);
//   - AVX2 (BITD_DISABLE_AVX512=1), one token: two threads 1.07 (1.02-1.08) and 1.11
//     (0.97-1.22), one thread 1.01 (1.01-1.03) and 1.02 (1.02-1.03);
//   - the GEMM (prefill), 64 tokens at two threads: 0.96 (0.95-0.98) and 0.96 (0.94-0.96),
//     the gathers' reads 12.8 KiB apart; 256 tokens 0.97-0.99 and 0.92-1.00 (three runs, a
//     noisy machine). Gathering 16 row blocks at a time (the GEMM then gathered 4) gained
//     nothing: 64 tokens 0.94-0.98 against 0.95-0.99 with 4 (two runs of each, in turn).
//     The GEMM now unpacks a row block where its blocks lie (prefetchPanelRB).
//
// Against what it loses (2560x6912, one token at two threads on cores of their own, mostly
// 0.94-0.97 in the first run; two tokens at one thread 0.94-0.97; the GEMM 1-5%) that is
// the better layout wherever it is not known which state a call meets, so from kernels/7
// on a blob of 64 to 119 row blocks (M = 2017 to 3808) and K >= 2544 is two panels:
// BitNet b1.58 2B's o_proj (2560x2560) and down_proj (2560x6912). Below 64 row blocks no
// two-panel shape was measured, and one panel split in parts at two threads lost at two
// tokens and more (above).
//
// A shorter K (kernels/8). The rule's K >= 2544 came from the table loads' share at a short
// K, with one token's tables built beforehand. Since its kernel builds them in registers
// (genTL2Panel), panels of 32 against chunk-major, the same loop, one token (one thread /
// two threads on cores of their own / shared; runs of each in parentheses where few):
// 16384x2048 0.98-1.01 / 1.20 (2) / 1.11 (2); 3072x2048 1.08-1.14 / - / 1.14-1.22;
// 2048x2048 1.13-1.16 / 1.21 (1) / 1.41-1.63 (3); 6144x1536 1.05-1.14 / 1.03-1.07 / 1.35
// (1); 4096x1024 1.07-1.08 / 1.07 (1) / 1.27-1.31 (2); 2048x1536 1.17-1.22 / 1.10 (1) /
// 1.49-1.60 (2). Two tokens (K = 2048): one thread 0.99-1.04, two 0.94-1.05. So from
// kernels/8 on the rule holds from 21 blocks (K >= 1008); below that nothing was measured.

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
	nb := l.TL2Blocks()
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
	nb := l.TL2Blocks()
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
