package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Argument block offsets: kernels.gemmArgs and kernels.unpackArgs.
const (
	mB, mX, mXQ, mSums, mSegQ, mNSeg, mLastQ, mSumsSeg, mChunkQ = 0, 8, 16, 24, 32, 40, 48, 56, 64
	uW, uB, uN, uTab, uN2, uStride, uTail                       = 0, 8, 16, 24, 32, 40, 48
)

// gemmLoop is gemmArgs' segment loop (ChunkQ is tileT2AVX2x16's chunk).
var gemmLoop = loopArgs{mSegQ, mLastQ, mNSeg, mChunkQ}

var (
	tl1Div3, tl1Mod3 Mem // nibble -> idx/3, idx%3
	tl2W             Mem // 3 x 16 bytes: magnitude m -> balanced ternary digit i of m (-1, 0, 1)
	tl2Bits          Mem // 3 x 32 bytes: 2, 4, 8
	int1Spread       Mem // 2 x 32 bytes: byte 4d+i = 2d+k (k = 0, 1): byte k of word d of a lane's 8
	wordOnes         Mem
)

// tl1CodeBytes are the vpshufb/vpermb tables of a tl1 pair index (a nibble, 0..8) to the
// codes u = w+1 of its two weights: idx/3 and idx%3 (indices 9..15 are invalid; they map
// into 0..2 all the same).
func tl1CodeBytes() (div3, mod3 []byte) {
	for i := 0; i < 16; i++ {
		div3 = append(div3, byte(i/3%3))
		mod3 = append(mod3, byte(i%3))
	}
	return div3, mod3
}

func genGemm() {
	var tw, tb []byte
	d3, m3 := tl1CodeBytes()
	for d := 9; d >= 1; d /= 3 {
		for m := 0; m < 16; m++ {
			v := m
			if v > 13 {
				v = 0
			}
			tw = append(tw, byte(int8((v+13)/d%3-1)))
		}
	}
	for j := 1; j < 4; j++ {
		for i := 0; i < 32; i++ {
			tb = append(tb, 1<<j)
		}
	}
	tl1Div3, tl1Mod3 = table("tl1Div3", d3), table("tl1Mod3", m3)
	tl2W, tl2Bits = table("tl2W", tw), table("tl2Bits", tb)
	var sp []byte
	for k := 0; k < 2; k++ {
		for i := 0; i < 32; i++ {
			sp = append(sp, byte(2*(i/4)+k))
		}
	}
	int1Spread = table("int1Spread", sp)
	var ones []byte
	for i := 0; i < 16; i++ {
		ones = append(ones, 1, 0)
	}
	wordOnes = table("wordOnes", ones)

	for T := 1; T <= 12; T++ {
		tileZ(T)
	}
	gemmAMX()
	amxPeak()
	gemvAMXI2S()
	gemvAMXInt2()
	for T := 1; T <= 2; T++ {
		tileY(T, false)
	}
	tileY2x16()
	for T := 1; T <= 3; T++ {
		tileY(T, true)
	}
	unpackInt2()
	unpackInt1()
	unpackInt8()
	unpackI2S()
	unpackTL1()
	unpackTL2()
}

// tileZ: the AVX-512 GEMM micro-kernel, 32 rows (two zmm of dwords) x T tokens, one
// vpdpbusd per row half and token per quad of inputs, the token's activations an embedded
// broadcast ({1to16}) rather than a vpbroadcastd into a register: 26 instructions a quad
// for twelve tokens instead of 38. On an Emerald Rapids Xeon (4096x4096, 512 tokens, test
// binaries in turn: i2s and tl2 over 8 pairs, i2s and int2 over 16) the GEMM ran a median
// 5-8% faster at one thread and 1-5% at two.
func tileZ(T int) {
	name := fmt.Sprintf("tileT%dAVX512", T)
	a := fn(name, fmt.Sprintf("%s is the GEMM micro-kernel for %d token(s) (see gemmArgs); tileGeneric is its reference.", name, T))
	p := newPool(true)
	b, x, xq, sums, nseg := ld(a, mB), ld(a, mX), ld(a, mXQ), ld(a, mSums), ld(a, mNSeg)
	acc := make([][2]VecPhysical, T)
	for t := range acc {
		copy(acc[t][:], p.getn(2))
	}
	b0, b1 := p.get(), p.get()
	Label(name + "_seg")
	cnt := segCount(a, nseg, gemmLoop)
	zeroAll(flat2(acc)...)
	Label(name + "_q")
	VMOVDQU64(at(b, 0), b0)
	VMOVDQU64(at(b, 64), b1)
	for t := range acc {
		VPDPBUSD_BCST(at(x, 4*t), b0, acc[t][0])
		VPDPBUSD_BCST(at(x, 4*t), b1, acc[t][1])
	}
	ADDQ(U8(128), b)
	ADDQ(xq, x)
	DECQ(cnt)
	JNZ(LabelRef(name + "_q"))
	for t := range acc {
		VMOVDQU32(acc[t][0], at(sums, 128*t))
		VMOVDQU32(acc[t][1], at(sums, 128*t+64))
	}
	ADDQ(at(a, mSumsSeg), sums)
	DECQ(nseg)
	JNZ(LabelRef(name + "_seg"))
	VZEROUPPER()
	RET()
}

// tileY: the AVX2 micro-kernel (vpmaddubsw + vpmaddwd; weights must be <= 127) or, with
// vnni, the AVX-VNNI one (VEX vpdpbusd), 32 rows (four ymm) x T tokens.
func tileY(T int, vnni bool) {
	isa := "AVX2"
	if vnni {
		isa = "AVXVNNI"
	}
	name := fmt.Sprintf("tileT%d%s", T, isa)
	a := fn(name, fmt.Sprintf("%s is the GEMM micro-kernel for %d token(s) (see gemmArgs); tileGeneric is its reference.", name, T))
	p := newPool(false)
	b, x, xq, sums, nseg := ld(a, mB), ld(a, mX), ld(a, mXQ), ld(a, mSums), ld(a, mNSeg)
	acc := make([][4]VecPhysical, T)
	var all []VecPhysical
	for t := range acc {
		copy(acc[t][:], p.getn(4))
		all = append(all, acc[t][:]...)
	}
	xv := p.getn(T)
	bv := p.get()
	var ones, prod VecPhysical
	if !vnni {
		ones, prod = p.get(), p.get()
		VMOVDQU(wordOnes, ones)
	}
	Label(name + "_seg")
	cnt := segCount(a, nseg, gemmLoop)
	zeroAll(all...)
	Label(name + "_q")
	for t := range acc {
		VPBROADCASTD(at(x, 4*t), xv[t])
	}
	for g := 0; g < 4; g++ {
		VMOVDQU(at(b, 32*g), bv)
		for t := range acc {
			if vnni {
				VPDPBUSD(xv[t], bv, acc[t][g])
			} else {
				VPMADDUBSW(xv[t], bv, prod)
				VPMADDWD(ones, prod, prod)
				VPADDD(prod, acc[t][g], acc[t][g])
			}
		}
	}
	ADDQ(U8(128), b)
	ADDQ(xq, x)
	DECQ(cnt)
	JNZ(LabelRef(name + "_q"))
	for t := range acc {
		for g := 0; g < 4; g++ {
			VMOVDQU(acc[t][g], at(sums, 128*t+32*g))
		}
	}
	ADDQ(at(a, mSumsSeg), sums)
	DECQ(nseg)
	JNZ(LabelRef(name + "_seg"))
	VZEROUPPER()
	RET()
}

// tileY2x16 (AVX2, two tokens): tileY with int16 sums that last a chunk of up to ChunkQ quads
// (set from the layer's largest unsigned weight: int16Chunk), each vpmaddubsw going straight
// into them with a vpaddw; the two tokens' sums are widened and added to Sums in memory
// (zeroed at each segment's start) once per chunk. Per quad 8 multiplies and 8 adds, not 16
// multiplies and 8 adds.
func tileY2x16() {
	name := "tileT2AVX2x16"
	a := fn(name, name+" is the GEMM micro-kernel for 2 tokens with int16 sums over ChunkQ quads (see gemmArgs); tileGeneric is its reference.")
	p := newPool(false)
	b, x, xq, sums := ld(a, mB), ld(a, mX), ld(a, mXQ), ld(a, mSums)
	acc := [2][]VecPhysical{p.getn(4), p.getn(4)} // [token][row group]
	all := append(append([]VecPhysical{}, acc[0]...), acc[1]...)
	xv := p.getn(2)
	bv, prod := p.get(), p.get()
	segStart, chunkEnd := memSums2(sums, acc, bv, wordOnes)
	chunkLoop(name, a, gemmLoop, 0, nil, nil, segStart, func() { zeroAll(all...) }, func() {
		for t := range acc {
			VPBROADCASTD(at(x, 4*t), xv[t])
		}
		for g := 0; g < 4; g++ {
			VMOVDQU(at(b, 32*g), bv)
			for t := range acc {
				VPMADDUBSW(xv[t], bv, prod)
				VPADDW(prod, acc[t][g], acc[t][g])
			}
		}
		ADDQ(U8(128), b)
		ADDQ(xq, x)
	}, chunkEnd, func() { ADDQ(at(a, mSumsSeg), sums) })
}

func unpackDoc(name, f string) string {
	return fmt.Sprintf("%s decodes one %s row block into the GEMM layout (see unpackArgs); unpackGeneric is its reference.", name, f)
}

// unpackInt2 (AVX2 code, used by every path): nibble tables give 8 rows' dwords per
// vpshufb.
func unpackInt2() {
	name := "unpackInt2AVX2"
	a := fn(name, unpackDoc(name, "int2"))
	p := newPool(false)
	w, b, n, tab := ld(a, uW), ld(a, uB), ld(a, uN), ld(a, uTab)
	la, lb, m0f := p.get(), p.get(), p.get()
	VBROADCASTI128(at(tab, 0), la)
	VBROADCASTI128(at(tab, 16), lb)
	bcastByte(m0f, 0x0f)
	v, lo, hi := p.get(), p.get(), p.get()
	Label(name + "_u")
	VMOVDQU(at(w, 0), v)
	VPAND(m0f, v, lo)
	VPSRLW(U8(4), v, hi)
	VPAND(m0f, hi, hi)
	VPSHUFB(lo, la, v)
	VMOVDQU(v, at(b, 0))
	VPSHUFB(lo, lb, v)
	VMOVDQU(v, at(b, 32))
	VPSHUFB(hi, la, v)
	VMOVDQU(v, at(b, 64))
	VPSHUFB(hi, lb, v)
	VMOVDQU(v, at(b, 96))
	ADDQ(U8(32), w)
	SUBQ(I8(-128), b)
	DECQ(n)
	JNZ(LabelRef(name + "_u"))
	VZEROUPPER()
	RET()
}

// int1UnpackAhead is how many blocks ahead unpackInt1 prefetches, into L2 (prefetcht1): a
// panel-major row block's blocks lie 4 KiB apart and so share their L1 sets, and into L1
// (prefetcht0) 8 blocks ahead took 7-9% longer than into L2, 16 ahead 1.7x. Into L2, 16, 24
// and 32 ahead took the same where the panel stays in L2 (K = 4096: 0.98-0.99x the speed of
// the kernels/8 unpack on its contiguous stream), and 24 and 32 were a little faster than 16
// where it does not (K = 14336, 1.8 MiB a panel: 1.01-1.10x against 1.00-1.05x; 8 ahead
// 0.94-0.98x). Measured on Zen 4 (BenchmarkUnpackInt1's blob case, medians of 201
// interleaved rounds of thread CPU time, two runs).
const int1UnpackAhead = 24

// unpackInt1: per block (int1.go: two planes of 32 rows' words) and 8 rows of a plane, the
// rows' 16 bytes go to both lanes (vbroadcasti128); vpshufb spreads byte k of each row's
// word over the row's dword (k = 0 for the plane's quads 0 and 1, 1 for quads 2 and 3),
// vpand keeps bit i in byte i (bit 4+i in odd quads) and vpminub with 1 makes it the u of
// the row's input 4q+i. The four row groups of a plane are done quad by quad, so that each
// quad's 128 bytes are stored in order. N: blocks, Stride bytes apart (128 when 0: a
// panel-major blob's row block is read where it lies, int1UnpackAhead blocks prefetched
// ahead).
//
// Per block, 16 vpshufb and 32 vpand and vpminub for its 32 stores, where the kernels/8
// layout took 32 vpshufb and 12 other operations: both seem bound by the stores (a K = 4096
// row block's 128 KiB go to L2 in 1.27 us, about 100 GB/s), and cache-resident they took
// the same time (0.98-1.02x, K = 4096 and 14336, Zen 4).
func unpackInt1() {
	name := "unpackInt1AVX2"
	a := fn(name, unpackDoc(name, "int1"))
	p := newPool(false)
	w, b, n := ld(a, uW), ld(a, uB), ld(a, uN)
	stride := ld(a, uStride)
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	TESTQ(stride, stride)
	JNZ(LabelRef(name + "_strided"))
	MOVQ(U32(128), stride)
	Label(name + "_strided")
	ahead := GP64() // bytes to the block prefetched
	IMUL3Q(U8(int1UnpackAhead), stride, ahead)
	sp := p.getn(2)
	for k, r := range sp {
		VMOVDQU(int1Spread.Offset(32*k), r)
	}
	bits := p.getn(2)
	bcastDword(bits[0], 0x08040201)
	bcastDword(bits[1], 0x80402010)
	one := p.get()
	bcastByte(one, 1)
	x, r, t := p.getn(4), p.getn(4), p.getn(2)
	Label(name + "_blk")
	PREFETCHT1(idx(w, ahead, 1, 0))
	PREFETCHT1(idx(w, ahead, 1, 64))
	for h := 0; h < 2; h++ {
		for g := range x {
			VBROADCASTI128(at(w, 64*h+16*g), x[g])
		}
		for k := 0; k < 2; k++ {
			for g := range x {
				VPSHUFB(sp[k], x[g], r[g])
			}
			for f := 2 * k; f < 2*k+2; f++ {
				for g := range r {
					VPAND(bits[f%2], r[g], t[g%2])
					VPMINUB(one, t[g%2], t[g%2])
					VMOVDQU(t[g%2], at(b, 128*(4*h+f)+32*g))
				}
			}
		}
	}
	ADDQ(stride, w)
	ADDQ(U32(1024), b)
	DECQ(n)
	JNZ(LabelRef(name + "_blk"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// unpackInt8: u = w xor 0x80.
func unpackInt8() {
	name := "unpackInt8AVX2"
	a := fn(name, unpackDoc(name, "int8"))
	p := newPool(false)
	w, b, n := ld(a, uW), ld(a, uB), ld(a, uN)
	m80 := p.get()
	bcastByte(m80, 0x80)
	v := p.getn(4)
	Label(name + "_u")
	for i := range v {
		VPXOR(at(w, 32*i), m80, v[i])
	}
	for i := range v {
		VMOVDQU(v[i], at(b, 32*i))
	}
	SUBQ(I8(-128), w)
	SUBQ(I8(-128), b)
	DECQ(n)
	JNZ(LabelRef(name + "_u"))
	VZEROUPPER()
	RET()
}

// transpose8 transposes 8 ymm rows of 8 dwords in place (r[i] ends up holding column i),
// using one temporary.
func transpose8(r []VecPhysical, t VecPhysical) {
	// dwords within 128-bit lanes
	for i := 0; i < 8; i += 2 {
		VPUNPCKLDQ(r[i+1], r[i], t)
		VPUNPCKHDQ(r[i+1], r[i], r[i+1])
		VMOVDQA(t, r[i])
	}
	// now r0 = A01 (cols 0,1 | 4,5 of rows 0,1 interleaved), r1 = B01 (cols 2,3 | 6,7), ...
	// qwords: C = cols (0|4), (1|5) from A pairs; (2|6), (3|7) from B pairs.
	for _, base := range []int{0, 4} {
		a01, b01, a23, b23 := r[base], r[base+1], r[base+2], r[base+3]
		VPUNPCKLQDQ(a23, a01, t)   // col 0|4
		VPUNPCKHQDQ(a23, a01, a23) // col 1|5
		VMOVDQA(t, a01)            // a01 = col 0|4
		VPUNPCKLQDQ(b23, b01, t)   // col 2|6
		VPUNPCKHQDQ(b23, b01, b23) // col 3|7
		VMOVDQA(t, b01)            // b01 = col 2|6
		// order: r[base] = 0|4, r[base+1] = 2|6, r[base+2] = 1|5, r[base+3] = 3|7
		r[base+1], r[base+2] = r[base+2], r[base+1]
	}
	// now r[0..3] rows 0-3 of cols (0|4, 1|5, 2|6, 3|7), r[4..7] rows 4-7 likewise.
	for i := 0; i < 4; i++ {
		VPERM2I128(U8(0x20), r[4+i], r[i], t)      // col i
		VPERM2I128(U8(0x31), r[4+i], r[i], r[4+i]) // col i+4
		VMOVDQA(t, r[i])
	}
}

// unpackI2S: for each block and 32-input run, the codes of 8 rows are 8 rows x 8 quads of
// dwords; an 8x8 transpose makes them 8 quads x 8 rows. N: blocks, N2: bytes per quad.
func unpackI2S() {
	name := "unpackI2SAVX2"
	a := fn(name, unpackDoc(name, "i2s"))
	p := newPool(false)
	w, b, nb, qs := ld(a, uW), ld(a, uB), ld(a, uN), ld(a, uN2)
	m3 := p.get()
	bcastByte(m3, 3)
	r := p.getn(8)
	t := p.get()
	// rows 8g + i live at quad 2g + i/4, piece i%4.
	q2, base, base1 := GP64(), GP64(), GP64()
	MOVQ(qs, q2)
	SHLQ(U8(1), q2)
	Label(name + "_blk")
	for s := 0; s < 4; s++ {
		MOVQ(w, base)
		for g := 0; g < 4; g++ {
			MOVQ(base, base1)
			ADDQ(qs, base1)
			for i := 0; i < 8; i++ {
				src := base
				if i >= 4 {
					src = base1
				}
				VMOVDQU(at(src, 32*(i%4)), r[i])
				if s < 3 {
					VPSRLW(U8(6-2*s), r[i], r[i])
				}
				VPAND(m3, r[i], r[i])
			}
			transpose8(r, t)
			for q := 0; q < 8; q++ {
				VMOVDQU(r[q], at(b, (8*s+q)*128+32*g))
			}
			ADDQ(q2, base)
		}
	}
	SUBQ(I8(-128), w)
	ADDQ(U32(32*128), b)
	DECQ(nb)
	JNZ(LabelRef(name + "_blk"))
	VZEROUPPER()
	RET()
}

// interleave4 turns four vectors of 32 rows' bytes (inputs k..k+3) into the four 32-byte
// pieces of a VNNI quad (rows 0-7, 8-15, 16-23, 24-31) and stores them at m. Clobbers
// its inputs; t is a temporary. The rows are in order, or packed: rows 0-7, 16-23 | 8-15,
// 24-31 (as vpackuswb leaves two registers of rows 0-15 and 16-31).
func interleave4(v [4]VecPhysical, t VecPhysical, m Mem, packed bool) {
	a, b, c, d := v[0], v[1], v[2], v[3]
	VPUNPCKLBW(b, a, t) // ab_l: rows 0-7 | 16-23 as words (packed: 0-7 | 8-15)
	VPUNPCKHBW(b, a, b) // ab_h: rows 8-15 | 24-31 (packed: 16-23 | 24-31)
	VPUNPCKLBW(d, c, a) // cd_l
	VPUNPCKHBW(d, c, d) // cd_h
	VPUNPCKLWD(a, t, c) // P0: rows 0-3 | 16-19 (packed: 0-3 | 8-11)
	VPUNPCKHWD(a, t, t) // P1: rows 4-7 | 20-23 (packed: 4-7 | 12-15)
	VPUNPCKLWD(d, b, a) // P2: rows 8-11 | 24-27 (packed: 16-19 | 24-27)
	VPUNPCKHWD(d, b, b) // P3: rows 12-15 | 28-31 (packed: 20-23 | 28-31)
	o1, o2 := 32, 64    // where the low lanes of P2, P3 and the high lanes of P0, P1 go
	if packed {
		o1, o2 = 64, 32
	}
	VPERM2I128(U8(0x20), t, c, d)
	VMOVDQU(d, m)
	VPERM2I128(U8(0x20), b, a, d)
	VMOVDQU(d, m.Offset(o1))
	VPERM2I128(U8(0x31), t, c, d)
	VMOVDQU(d, m.Offset(o2))
	VPERM2I128(U8(0x31), b, a, d)
	VMOVDQU(d, m.Offset(96))
}

// tl1UnitsY decodes n (register, > 0 checked by the caller) tl1 units at w into B at b.
func tl1UnitsY(name string, p *pool, w, b, n Register) {
	d3, m3, m0f := p.get(), p.get(), p.get()
	VBROADCASTI128(tl1Div3, d3)
	VBROADCASTI128(tl1Mod3, m3)
	bcastByte(m0f, 0x0f)
	lo, hi, t := p.get(), p.get(), p.get()
	v := p.getn(4)
	Label(name + "_u")
	VMOVDQU(at(w, 0), lo)
	VPSRLW(U8(4), lo, hi)
	VPAND(m0f, lo, lo)
	VPAND(m0f, hi, hi)
	VPSHUFB(lo, d3, v[0])
	VPSHUFB(lo, m3, v[1])
	VPSHUFB(hi, d3, v[2])
	VPSHUFB(hi, m3, v[3])
	interleave4([4]VecPhysical{v[0], v[1], v[2], v[3]}, t, at(b, 0), false)
	ADDQ(U8(32), w)
	SUBQ(I8(-128), b)
	DECQ(n)
	JNZ(LabelRef(name + "_u"))
	p.put(d3, m3, m0f, lo, hi, t)
	p.put(v...)
}

// unpackTL1: pair index -> the two codes (idx/3, idx%3), interleaved into VNNI quads.
func unpackTL1() {
	name := "unpackTL1AVX2"
	a := fn(name, unpackDoc(name, "tl1"))
	p := newPool(false)
	w, b, n := ld(a, uW), ld(a, uB), ld(a, uN)
	tl1UnitsY(name, p, w, b, n)
	VZEROUPPER()
	RET()
}

// tl2UnpackAhead is how many blocks ahead unpackTL2 prefetches.
const tl2UnpackAhead = 4

// unpackTL2: per block, the 48 inputs' code vectors go to a stack buffer, then every four
// are interleaved into a VNNI quad; the tl1 tail follows. N: blocks, N2: tail units. Per
// plane, the fields' codes (word >> 5f) & 31 are packed to bytes (rows 0-7, 16-23 | 8-15,
// 24-31); vpshufb reads the magnitude (bits 0-3) in tables of the balanced ternary digits w
// (-1, 0, 1), vpsignb negates them where the code, shifted left 3, has its sign in bit 7
// (zero only for code 0), and w + 1 is stored. Triple 15's magnitude gathers bit 15 of
// planes 0-3 (bit 7 after vpacksswb, selecting vpblendvb); plane 4's, or 1, signs it.
// Blocks lie Stride bytes apart (320 when 0: a panel-major blob's row block is read where
// it lies, tl2UnpackAhead blocks prefetched ahead), the tail at Tail (after the last block
// when nil).
func unpackTL2() {
	name := "unpackTL2AVX2"
	a := fnAttr(name, 0, unpackDoc(name, "tl2"))
	buf := AllocLocal(48 * 32)
	p := newPool(false)
	w, b, nb := ld(a, uW), ld(a, uB), ld(a, uN)
	stride := ld(a, uStride)
	TESTQ(stride, stride)
	JNZ(LabelRef(name + "_strided"))
	MOVQ(U32(320), stride)
	Label(name + "_strided")
	ahead := GP64() // bytes to the block prefetched
	MOVQ(stride, ahead)
	IMUL3Q(U8(tl2UnpackAhead), ahead, ahead)
	TESTQ(nb, nb)
	JZ(LabelRef(name + "_tail"))
	{
		dig := p.getn(3)
		for i := range dig {
			VBROADCASTI128(tl2W.Offset(16*i), dig[i])
		}
		m1f, one := p.get(), p.get()
		bcastWord(m1f, 31)
		bcastByte(one, 1)
		wv, c, c1, sg, d, t15 := p.getn(2), p.get(), p.get(), p.get(), p.get(), p.get()
		digits := func(c VecPhysical, tr int) {
			for i := 0; i < 3; i++ {
				VPSHUFB(c, dig[i], d)
				VPSIGNB(sg, d, d)
				VPADDB(one, d, d)
				VMOVDQU(d, buf.Offset(32*(3*tr+i)))
			}
		}
		Label(name + "_blk")
		for j := 0; j < 5; j++ {
			PREFETCHT0(idx(w, ahead, 1, 64*j))
		}
		for j := 0; j < 5; j++ {
			VMOVDQU(at(w, 64*j), wv[0])
			VMOVDQU(at(w, 64*j+32), wv[1])
			for f := 0; f < 3; f++ {
				switch f {
				case 0:
					VPAND(m1f, wv[0], c)
					VPAND(m1f, wv[1], c1)
				case 1:
					VPSRLW(U8(5), wv[0], c)
					VPSRLW(U8(5), wv[1], c1)
					VPAND(m1f, c, c)
					VPAND(m1f, c1, c1)
				case 2: // bits 0-5 after the shift: bit 5 (triple 15's) is ignored by vpshufb
					VPSRLW(U8(10), wv[0], c)
					VPSRLW(U8(10), wv[1], c1)
				}
				VPACKUSWB(c1, c, c)
				VPSLLW(U8(3), c, sg) // a byte's bit 7 is its own bit 4
				digits(c, 3*j+f)
			}
			VPACKSSWB(wv[1], wv[0], c1) // bit 7: bit j of triple 15's code
			switch j {
			case 0:
				VPXOR(t15, t15, t15)
				VPBLENDVB(c1, one, t15, t15)
			case 4:
				VPOR(one, c1, sg)
			default:
				VPOR(tl2Bits.Offset(32*(j-1)), t15, c)
				VPBLENDVB(c1, c, t15, t15)
			}
		}
		digits(t15, 15)
		p.put(wv...)
		p.put(c, c1, sg, d, t15) // the tables stay for the next block
		v := p.getn(4)
		t := p.get()
		for q := 0; q < 12; q++ {
			for i := 0; i < 4; i++ {
				VMOVDQU(buf.Offset(32*(4*q+i)), v[i])
			}
			interleave4([4]VecPhysical{v[0], v[1], v[2], v[3]}, t, at(b, 128*q), true)
		}
		p.put(v...)
		p.put(t)
	}
	ADDQ(stride, w)
	ADDQ(U32(12*128), b)
	DECQ(nb)
	JNZ(LabelRef(name + "_blk"))
	Label(name + "_tail")
	n := ld(a, uN2)
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	tail := ld(a, uTail)
	TESTQ(tail, tail)
	CMOVQNE(tail, w)
	tl1UnitsY(name, p, w, b, n)
	Label(name + "_done")
	VZEROUPPER()
	RET()
}
