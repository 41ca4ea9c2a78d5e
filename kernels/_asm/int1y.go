package main

import (
	"fmt"
	"math/bits"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// (Argument block offsets: int1.go's, kernels.int1Args.)

// int1TabYBlock is the bytes of one block's tabInt1Y tables (kernels.int1TabYBlock): eight
// quads' A and B planes (16 bytes each), then 8 words of the block's constant P.
const int1TabYBlock = 272

// The constants of the AVX2 int1 kernels and their table builder.
var (
	int1YHiBytes  Mem    // words 0xFF00: vpblendvb takes the high bytes from its second source
	int1YMul      [4]Mem // vpmaddubsw factors (signed bytes) per word: (2, 0), (0, 2), (64, 0), (0, 64)
	int1YSigns    [2]Mem // builder: per word c, the signs 1-2*bit_i(c) of inputs 0, 1; of 2, 3
	int1YPopcnt   Mem    // builder: word c = 128*popcount(c)
	int1YLowWords Mem    // builder: words 31
	int1YOnes     Mem    // builder: words 1
	int1YPBias    Mem    // builder: words -4096
)

// genInt1Y writes the AVX2 int1 panel kernels for one and two tokens and their table
// builder (in genGemv, after genGemvAVX2, whose m0fY and m80Y they use).
func genInt1Y() {
	words := func(name string, f func(i int) uint16) Mem {
		var b []byte
		for i := 0; i < 16; i++ {
			v := f(i)
			b = append(b, byte(v), byte(v>>8))
		}
		return table(name, b)
	}
	int1YHiBytes = words("int1YHiBytes", func(int) uint16 { return 0xFF00 })
	for i, m := range [][2]byte{{2, 0}, {0, 2}, {64, 0}, {0, 64}} {
		int1YMul[i] = words(fmt.Sprintf("int1YMul%d", i), func(int) uint16 { return uint16(m[0]) | uint16(m[1])<<8 })
	}
	sign := func(c, i int) uint16 { return uint16(byte(int8(1 - 2*(c>>i&1)))) }
	int1YSigns[0] = words("int1YSigns01", func(c int) uint16 { return sign(c, 0) | sign(c, 1)<<8 })
	int1YSigns[1] = words("int1YSigns23", func(c int) uint16 { return sign(c, 2) | sign(c, 3)<<8 })
	int1YPopcnt = words("int1YPopcnt", func(c int) uint16 { return uint16(128 * bits.OnesCount(uint(c))) })
	int1YLowWords = words("int1YLowWords", func(int) uint16 { return 31 })
	int1YOnes = words("int1YOnes", func(int) uint16 { return 1 })
	int1YPBias = words("int1YPBias", func(int) uint16 { return uint16(0x10000 - 4096) })

	genInt1BuildY()
	for T := 1; T <= 2; T++ {
		if T == 1 {
			withL1(func() { genInt1PanelY(T) })
		} else {
			genInt1PanelY(T)
		}
	}
}

// genInt1BuildY writes int1BuildTabYAVX2, the tabInt1Y builder. Per quad, two vpmaddubsw of
// the biased pairs (x0+128, x1+128) and (x2+128, x3+128), each word broadcast, with the
// signs 1-2*bit_i(c) give T_q[c] + 128*sum_i(1-2*bit_i(c)) = T_q[c] + 512 - 256*popcount(c)
// in word c; halved (an arithmetic shift: the subtrahend is even) and with 128*popcount(c)
// added that is V = (T_q[c] >> 1) + 256, whose low five bits (A) and the rest (B) are packed
// to bytes and put in order (vpackuswb, vpermq). The low bit of the sum is p_q in every
// word; the eight quads' are added to -4096, which leaves P in every word.
func genInt1BuildY() {
	name := "int1BuildTabYAVX2"
	TEXT(name, NOSPLIT, "func(x *int8, blocks int, dst *byte)")
	Pragma("noescape")
	Doc(name+" writes blocks tabInt1Y tables (int1TabYBlock bytes each) for the activations",
		"at x (32 a block); buildInt1TabYGeneric is its reference.")
	x, n, d := Load(Param("x"), GP64()), Load(Param("blocks"), GP64()), Load(Param("dst"), GP64())
	p := newPool(false)
	m80, s01, s23, pc, m31, one := p.get(), p.get(), p.get(), p.get(), p.get(), p.get()
	VMOVDQU(m80Y, m80)
	VMOVDQU(int1YSigns[0], s01)
	VMOVDQU(int1YSigns[1], s23)
	VMOVDQU(int1YPopcnt, pc)
	VMOVDQU(int1YLowWords, m31)
	VMOVDQU(int1YOnes, one)
	par := p.get()
	u, v := p.getn(2), p.getn(2)
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	Label(name + "_blk")
	VMOVDQU(int1YPBias, par)
	for q := 0; q < 8; q++ {
		a, b := u[q%2], v[q%2] // (two quads in flight)
		VPBROADCASTW(at(x, 4*q), a)
		VPBROADCASTW(at(x, 4*q+2), b)
		VPXOR(m80, a, a)
		VPXOR(m80, b, b)
		VPMADDUBSW(s01, a, a)
		VPMADDUBSW(s23, b, b)
		VPADDW(b, a, a)
		VPAND(one, a, b)
		VPADDW(b, par, par)
		VPSRAW(U8(1), a, a)
		VPADDW(pc, a, a)
		VPSRLW(U8(5), a, b)
		VPAND(m31, a, a)
		VPACKUSWB(b, a, a) // per lane: A (8 entries), B (8 entries)
		VPERMQ(U8(0xD8), a, a)
		VMOVDQU(a, at(d, 32*q))
	}
	VMOVDQU(par.AsX(), at(d, 256))
	ADDQ(U8(32), x)
	ADDQ(U32(int1TabYBlock), d)
	DECQ(n)
	JNZ(LabelRef(name + "_blk"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// int1PanelAheadY is how far ahead the two-token AVX2 int1 panel kernel prefetches its
// weights into L2 (prefetcht1, the row block's two lines). Measured (one thread, from DRAM,
// a 1 GiB working set, 15 rounds of every variant in turn in one process, medians, GB/s of
// weights; 4096x14336, 14336x4096, 2560x2560): two tokens none 12.2, 11.9, 12.1; 4 KiB
// ahead 12.9, 12.9, 13.2; 8 KiB 12.6, 12.4, 12.4; 16 KiB 12.4, 12.3, 12.5.
const int1PanelAheadY = 4096

// genInt1PanelY writes int1PanelT<T>AVX2, the int1 GEMV of T (1 or 2) tokens over the row
// blocks of one panel of a kernels/9 blob (see kernels.int1Args; more tokens run in passes
// of these), from tabInt1Y tables (token t's at Tab + t*TabStride, block b's int1TabYBlock*b
// further; X is not read); int1PanelGeneric is its reference. Block by block, every row
// block of the panel in turn, so the weights stream in order and a block's tables, read
// from memory for each row block, stay in L1 over the panel.
//
// AVX2 has no vpermw; vpshufb looks every byte of a 128-bit lane up in one 16-byte table.
// A row block's block is two planes of 32 words (rows 0-15 in one ymm, 16-31 in the
// next), and a word's two bytes hold four quads' codes, two in each byte, so each plane's
// bytes are regrouped first: C = (byte 0 of row r, byte 0 of row r+16) and D = (byte 1 of
// row r, byte 1 of row r+16), one vpblendvb each of a load and a load one byte off (the
// misaligned load moves the bytes by 8 bits for free). C & 0x0f, C >> 4 & 0x0f, D & 0x0f
// and D >> 4 & 0x0f then hold one quad's codes for all 32 rows, row r in the low byte of
// word r and row r+16 in the high byte: with one table for both bytes every byte of every
// vpshufb is a wanted entry. Each is looked up in the quad's A and B planes (tabInt1Y) and
// added as bytes (eight A at most 248, eight B at most 128). At the row block's end
// vpmaddubsw with factors (2, 0), (64, 0) and (0, 2), (0, 64) separate the rows and weigh
// the parts into int16 sums of rows 0-15 and 16-31. Per row block and token: 16 vpshufb
// (the fewest for 16-bit entries in byte tables), 14 vpaddb, 4 vpmaddubsw, 2 vpaddw;
// shared by the tokens: 4 vpblendvb, 4 shifts, 8 ands.
//
// A row block's int16 sums over up to int1Flush blocks wait in Acc between blocks,
// then are widened into Sums, and the sum of the group's P (one word a block, added up in
// a general register at the group's start) is added to them once, when they are widened
// (int16 arithmetic wraps, so the sums need not fit until the end).
//
// Measured on the 2-vCPU Zen 4 guest, one thread: L2-resident (a 1024x2560 layer, 300
// calls a round, 11 rounds, medians, ns per row block and block) and from DRAM (a 1 GiB
// working set, 9-15 rounds in turn); instruction rates from loops of independent
// instructions: vpshufb, vpblendvb, vpsrlw, vpmaddubsw and vpmovsxwd 2 a cycle, vpaddb and
// vpand 4; vpshufb with vpblendvb 1 pair a cycle (the same two pipes), with vpaddb 0.56
// cycles a pair, with vpmaddubsw 0.79 (about 3.7 GHz). The kernel is bound by its count
// of vector operations (one token: about 54 a row block and block in 4.9 ns, some 3 a
// cycle), not by its loads. Timing-only variants, one token, before software pipelining
// (5.22): without the table loads (a register in their place) 5.05; without the B lookups
// 3.90; without the index building 4.78; without the row block's end 4.02. So:
//   - vpblendvb against and/or regrouping (one op against three, all on the other pipes):
//     5.22 against 5.50; vpmulhuw for the shifts (the multiply pipes): 5.57.
//   - Software pipelining: a row block's lookups come before the previous row block's end,
//     whose chain of dependent operations (vpaddb chain, vpmaddubsw, Acc) they overlap (two
//     sets of accumulators): one token 4.96 against 5.25, two 8.67 against 8.99; from DRAM
//     on 4096x14336 with one token 20.4 against 19.5 GB/s.
//   - P once a group instead of a vpaddw of its broadcast every block: one token 4.86
//     against 4.95, two 8.44 against 8.64.
//   - Tables broadcast from 16 bytes (vbroadcasti128) against 32-byte copies (vmovdqu):
//     5.22 against 5.25 aligned (5.60 where a load crossed a line), so 16 bytes a plane.
func genInt1PanelY(T int) {
	name := l1Name(fmt.Sprintf("int1PanelT%dAVX2", T))
	a := fn(name, fmt.Sprintf("%s is the int1 GEMV of %d token(s) over the row blocks of one panel (see int1Args) from tabInt1Y tables, AVX2; int1PanelGeneric is its reference.", name, T))
	p := newPool(false)
	m0f, hib := p.get(), p.get()
	VMOVDQU(m0fY, m0f)
	VMOVDQU(int1YHiBytes, hib)
	// two sets of byte accumulators: the row block being looked up, the one being finished
	type accs struct{ a, b []VecPhysical }
	sets := []accs{{p.getn(T), p.getn(T)}, {p.getn(T), p.getn(T)}}
	c, d, x1, x3 := p.get(), p.get(), p.get(), p.get()
	tmp := p.getn(2)
	w0, nb := ld(a, iW), ld(a, iBlocks)
	tp := tokenPtrs(a, T, iTab, iTabStride) // token t's tables of the block
	w, sp, ap, n, g := GP64(), GP64(), GP64(), GP64(), GP64()
	pg := AllocLocal(32 * T) // token t's sum of P over the group's blocks, 16 words
	TESTQ(nb, nb)
	JZ(LabelRef(name + "_end"))

	// groupP stores each token's sum of P over the group's g blocks.
	groupP := func() {
		for t := 0; t < T; t++ {
			sum, v, q, cnt := GP32(), GP32(), GP64(), GP64()
			XORL(sum, sum)
			MOVQ(tp[t], q)
			MOVQ(g, cnt)
			Label(fmt.Sprintf("%s_p%d", name, t))
			MOVWLSX(at(q, 256), v)
			ADDL(v, sum)
			ADDQ(U32(int1TabYBlock), q)
			DECQ(cnt)
			JNZ(LabelRef(fmt.Sprintf("%s_p%d", name, t)))
			MOVD(sum, tmp[0].AsX())
			VPBROADCASTW(tmp[0].AsX(), tmp[0])
			VMOVDQU(tmp[0], pg.Offset(32*t))
		}
	}
	// lookRB adds the row block's block at w into the accumulators s and moves w on.
	lookRB := func(s accs) {
		if T > 1 { // (see int1PanelAheadY)
			PREFETCHT1(at(w, int1PanelAheadY))
			PREFETCHT1(at(w, int1PanelAheadY+64))
		} else if l1Only { // (the default's one token has no software prefetch: see withL1)
			prefetchAhead(w, 0)
			prefetchAhead(w, 64)
		}
		k := 0
		look := func(t, off int, idx, acc VecPhysical, first bool) {
			if first {
				VBROADCASTI128(at(tp[t], off), acc)
				VPSHUFB(idx, acc, acc)
				return
			}
			r := tmp[k%2]
			k++
			VBROADCASTI128(at(tp[t], off), r)
			VPSHUFB(idx, r, r)
			VPADDB(r, acc, acc)
		}
		for h := 0; h < 2; h++ {
			VMOVDQU(at(w, 64*h), c)
			VPBLENDVB(hib, at(w, 64*h+31), c, c) // (byte 0 of row r, byte 0 of row r+16)
			VMOVDQU(at(w, 64*h+1), d)
			VPBLENDVB(hib, at(w, 64*h+32), d, d) // (byte 1 of row r, byte 1 of row r+16)
			VPSRLW(U8(4), c, x1)
			VPAND(m0f, x1, x1)
			VPAND(m0f, c, c)
			VPSRLW(U8(4), d, x3)
			VPAND(m0f, x3, x3)
			VPAND(m0f, d, d)
			for f, idx := range []VecPhysical{c, x1, d, x3} {
				q := 4*h + f
				for t := 0; t < T; t++ {
					look(t, 32*q, idx, s.a[t], q == 0)
					look(t, 32*q+16, idx, s.b[t], q == 0)
				}
			}
		}
		ADDQ(U32(128), w)
	}
	// endRB finishes the row block of ap and sp from the accumulators s (clobbering them
	// and c, d, x1, x3) and moves ap and sp on: load adds its int16 sums so far from Acc,
	// widen adds them and the group's P into Sums (else they go to Acc).
	endRB := func(s accs, load, widen bool) {
		for t := 0; t < T; t++ {
			lo, hi, e := c, s.a[t], d
			VPMADDUBSW(int1YMul[0], s.a[t], lo) // 2*A, rows 0-15
			VPMADDUBSW(int1YMul[2], s.b[t], e)  // 64*B
			VPADDW(e, lo, lo)
			VPMADDUBSW(int1YMul[1], s.a[t], hi) // rows 16-31
			VPMADDUBSW(int1YMul[3], s.b[t], s.b[t])
			VPADDW(s.b[t], hi, hi)
			if load {
				VPADDW(at(ap, 64*t), lo, lo)
				VPADDW(at(ap, 64*t+32), hi, hi)
			}
			if !widen {
				VMOVDQU(lo, at(ap, 64*t))
				VMOVDQU(hi, at(ap, 64*t+32))
				continue
			}
			VPADDW(pg.Offset(32*t), lo, lo)
			VPADDW(pg.Offset(32*t), hi, hi)
			for i, v := range []VecPhysical{lo, hi} { // rows 16i..16i+15
				for half := 0; half < 2; half++ {
					l := []VecPhysical{x1, x3}[half]
					if half == 0 {
						VPMOVSXWD(v.AsX(), l)
					} else {
						VEXTRACTI128(U8(1), v, l.AsX())
						VPMOVSXWD(l.AsX(), l)
					}
					m := at(sp, 128*t+32*(2*i+half))
					VPADDD(m, l, l)
					VMOVDQU(l, m)
				}
			}
		}
		ADDQ(U32(64*T), ap)
		ADDQ(at(a, iSStride), sp)
	}

	// block emits one block over the panel's row blocks, software-pipelined: each row
	// block's lookups come before the previous row block's end (the two sets of
	// accumulators in turn).
	block := func(lbl string, load, widen bool) {
		MOVQ(w0, w)
		MOVQ(at(a, iSums), sp)
		MOVQ(at(a, iAcc), ap)
		MOVQ(at(a, iNRB), n)
		lookRB(sets[0])
		DECQ(n)
		JZ(LabelRef(lbl + "_last0"))
		Label(lbl)
		lookRB(sets[1])
		endRB(sets[0], load, widen)
		DECQ(n)
		JZ(LabelRef(lbl + "_last1"))
		lookRB(sets[0])
		endRB(sets[1], load, widen)
		DECQ(n)
		JNZ(LabelRef(lbl))
		Label(lbl + "_last0")
		endRB(sets[0], load, widen)
		JMP(LabelRef(lbl + "_done"))
		Label(lbl + "_last1")
		endRB(sets[1], load, widen)
		Label(lbl + "_done")
		ADDQ(at(a, iBStride), w0)
		for _, t := range tp {
			ADDQ(U32(int1TabYBlock), t)
		}
	}
	panelGroupsN(name, nb, g, int1Flush, groupP, block)
	Label(name + "_end")
	VZEROUPPER()
	RET()
}
