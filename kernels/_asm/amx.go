package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Argument block offsets: kernels.amxArgs.
const (
	xB, xX, xXStride, xSums, xSegQ, xNSeg, xLastQ, xSumsSeg, xCfg = 0, 8, 16, 24, 32, 40, 48, 56, 64
)

// The AMX instructions, which the Go assembler does not know, as raw bytes (VEX.128.0F38.W0;
// checked against gcc 12's encodings by disassembly; scripts/check-generate.sh compares
// objdump's disassembly of the built object with the mnemonics in the comments). Their
// register operands are physical: avo's allocator cannot see into raw bytes, so the AMX
// functions use physical general registers only.

// The VEX pp fields (the mandatory prefixes) of the AMX instructions used.
const (
	ppNone, ppF3, ppF2 = 0, 2, 3
)

// raw emits the bytes of one instruction, after a comment giving its mnemonic (the post-pass
// joins them into one line: joinRaw).
func raw(mnemonic string, bs []byte) {
	Comment(rawTag + mnemonic)
	for _, b := range bs {
		Instruction(&ir.Instruction{Opcode: "BYTE", Operands: []Op{U8(b)}})
	}
}

// rawTag starts the comment before an instruction's raw bytes.
const rawTag = "raw: "

// vex3 is the three-byte VEX prefix for map 0F38, W0, L0 with the given inverted-register
// extension bits (r, x, b: bit 3 of ModRM.reg, SIB.index, ModRM.rm/SIB.base), vvvv and pp.
func vex3(r, x, b, vvvv, pp int) []byte {
	return []byte{0xC4, byte((^r&1)<<7 | (^x&1)<<6 | (^b&1)<<5 | 0x02), byte((^vvvv&15)<<3 | pp)}
}

// amxSib encodes opcode op (0F38 map, pp) with tile t in ModRM.reg and the memory operand
// [base + index*1 + disp] (a SIB form: tileloadd and tilestored take only that).
func amxSib(op byte, pp, t int, base, index Physical, disp int) []byte {
	bi, ii := int(base.PhysicalIndex()), int(index.PhysicalIndex())
	if ii == 4 {
		panic("amx: rsp cannot be an index")
	}
	out := append(vex3(0, ii>>3, bi>>3, 0, pp), op)
	mod := 0
	switch {
	case disp == 0 && bi&7 != 5:
	case disp >= -128 && disp <= 127:
		mod = 1
	default:
		mod = 2
	}
	out = append(out, byte(mod<<6|(t&7)<<3|4), byte((ii&7)<<3|bi&7))
	switch mod {
	case 1:
		out = append(out, byte(int8(disp)))
	case 2:
		out = append(out, byte(disp), byte(disp>>8), byte(disp>>16), byte(disp>>24))
	}
	return out
}

// gpNames are the general registers' names as objdump's Intel syntax spells them (the
// instructions' comments are compared with its disassembly: scripts/check-generate.sh).
var gpNames = [16]string{"rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"}

// sibText is [base+index*1+disp] as objdump prints it.
func sibText(base, index Physical, disp int) string {
	s := "[" + gpNames[base.PhysicalIndex()] + "+" + gpNames[index.PhysicalIndex()] + "*1"
	if disp != 0 {
		s += fmt.Sprintf("+0x%x", disp)
	}
	return s + "]"
}

// tileLoad: tileloadd tmm t, [base + stride*1 + disp] (row i of the tile from base + disp + i*stride).
func tileLoad(t int, base, stride Physical, disp int) {
	raw(fmt.Sprintf("tileloadd tmm%d,%s", t, sibText(base, stride, disp)), amxSib(0x4B, ppF2, t, base, stride, disp))
}

// tileStore: tilestored [base + stride*1 + disp], tmm t.
func tileStore(t int, base, stride Physical, disp int) {
	raw(fmt.Sprintf("tilestored %s,tmm%d", sibText(base, stride, disp), t), amxSib(0x4B, ppF3, t, base, stride, disp))
}

// tileZero: tilezero tmm t.
func tileZero(t int) {
	raw(fmt.Sprintf("tilezero tmm%d", t), append(vex3(0, 0, 0, 0, ppF2), 0x49, byte(0xC0|t<<3)))
}

// tdpbsud: tmm d += tmm a (signed bytes) . tmm b (unsigned bytes, VNNI pairs of 4).
func tdpbsud(d, a, b int) {
	raw(fmt.Sprintf("tdpbsud tmm%d,tmm%d,tmm%d", d, a, b), append(vex3(0, 0, 0, b, ppF3), 0x5E, byte(0xC0|d<<3|a)))
}

// ldtilecfg loads the 64-byte tile configuration at [base] (base not rsp, rbp, r12, r13).
func ldtilecfg(base Physical) {
	bi := int(base.PhysicalIndex())
	if bi&7 == 4 || bi&7 == 5 {
		panic("amx: ldtilecfg base needs a SIB or displacement")
	}
	raw(fmt.Sprintf("ldtilecfg [%s]", gpNames[bi]), append(vex3(0, 0, bi>>3, 0, ppNone), 0x49, byte(bi&7)))
}

// tileRelease returns the tiles to their initial state (so that the thread's context
// switches stop saving them).
func tileRelease() { raw("tilerelease", append(vex3(0, 0, 0, 0, ppNone), 0x49, 0xC0)) }

// gemmAMX is the prefill GEMM micro-kernel on AMX-INT8: for up to 32 tokens and
// one unpacked row block, Sums[j][t][r] = the sum over segment j's quads q and i < 4 of
// X[t][4q+i] (signed) times B[q][r][i] (unsigned): the same sums as the zmm micro-kernels',
// from the activations as they are (no transpose). A 64-input step is one tdpbsud per
// sixteen tokens and sixteen rows: tiles 0-1 hold tokens 0-15's sums of rows 0-15 and 16-31,
// tiles 2-3 tokens 16-31's; tile 4 (5) the step's activations of tokens 0-15 (16-31), tiles
// 6 and 7 the step's unpacked weights of rows 0-15 and 16-31 (B's 128-byte quads are
// exactly two tiles' VNNI rows, 64 bytes each, 128 apart). Segments must be multiples of 16
// quads; the configuration at Cfg gives the token tiles T rows (amxConfig), and tokens 16-31
// exist where it gives tile 2 any. Where one tile product takes sixteen 64-byte rows of each
// operand, the zmm micro-kernel needs 64 vpdpbusd.
func gemmAMX() {
	name := "gemmAMX"
	header(name, NOSPLIT, "func(a *byte)", name+" is the prefill GEMM micro-kernel on AMX-INT8 (see amxArgs): the sums of tileGeneric,",
		"from the activations untransposed. It needs the tile permission (amxPermit) and AMX-INT8.")
	// Physical registers only (see raw).
	a, b, x, x1, xs, sums, nseg, cnt, bstride, cfg := RDI, RSI, RDX, R12, R8, R9, R10, R11, RCX, RAX
	Load(Param("a"), a)
	MOVQ(Mem{Base: a, Disp: xCfg}, cfg)
	ldtilecfg(cfg)
	MOVQ(Mem{Base: a, Disp: xB}, b)
	MOVQ(Mem{Base: a, Disp: xX}, x)
	MOVQ(Mem{Base: a, Disp: xXStride}, xs)
	MOVQ(Mem{Base: a, Disp: xSums}, sums)
	MOVQ(Mem{Base: a, Disp: xNSeg}, nseg)
	MOVQ(U32(128), bstride)
	// x1: token 16's activations
	MOVQ(xs, x1)
	SHLQ(U8(4), x1)
	ADDQ(x, x1)
	Label(name + "_seg")
	MOVQ(Mem{Base: a, Disp: xSegQ}, cnt)
	CMPQ(nseg, U8(1))
	CMOVQEQ(Mem{Base: a, Disp: xLastQ}, cnt)
	CMPB(Mem{Base: cfg, Disp: 48 + 2}, U8(0)) // tile 2's rows: tokens 16-31
	JNE(LabelRef(name + "_two"))
	for _, two := range []bool{false, true} {
		sfx := "_one"
		if two {
			sfx = "_two"
			Label(name + sfx)
		}
		tileZero(0)
		tileZero(1)
		if two {
			tileZero(2)
			tileZero(3)
		}
		Label(name + sfx + "_step")
		tileLoad(6, b, bstride, 0)
		tileLoad(7, b, bstride, 64)
		tileLoad(4, x, xs, 0)
		tdpbsud(0, 4, 6)
		tdpbsud(1, 4, 7)
		if two {
			tileLoad(5, x1, xs, 0)
			tdpbsud(2, 5, 6)
			tdpbsud(3, 5, 7)
			ADDQ(U8(64), x1)
		}
		ADDQ(U32(16*128), b)
		ADDQ(U8(64), x)
		SUBQ(U8(16), cnt)
		JNZ(LabelRef(name + sfx + "_step"))
		tileStore(0, sums, bstride, 0)
		tileStore(1, sums, bstride, 64)
		if two {
			tileStore(2, sums, bstride, 16*128)
			tileStore(3, sums, bstride, 16*128+64)
		}
		if !two {
			JMP(LabelRef(name + "_next"))
		}
	}
	Label(name + "_next")
	ADDQ(Mem{Base: a, Disp: xSumsSeg}, sums)
	DECQ(nseg)
	JNZ(LabelRef(name + "_seg"))
	tileRelease()
	RET()
}

// amxPeak is the AMX-INT8 peak loop: n iterations of four independent tdpbsud on full
// 16x16x64 tiles (the configuration at cfg: amxConfig's for 32 tokens), no memory traffic.
func amxPeak() {
	name := "amxPeakLoop"
	header(name, NOSPLIT, "func(cfg *byte, n int)", name+" runs n iterations of four independent tdpbsud on full tiles (the AMX-INT8 peak",
		"of one core: 4 x 16 x 16 x 64 multiply-adds an iteration); cfg is amxConfig's for 32 tokens.")
	cfg, n := RAX, RCX
	Load(Param("cfg"), cfg)
	Load(Param("n"), n)
	ldtilecfg(cfg)
	for t := 0; t < 8; t++ {
		tileZero(t)
	}
	Label(name + "_loop")
	tdpbsud(0, 4, 6)
	tdpbsud(1, 4, 7)
	tdpbsud(2, 5, 6)
	tdpbsud(3, 5, 7)
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	tileRelease()
	RET()
}

// Argument block offsets: kernels.amxvArgs.
const (
	vW, vQStride, vPairs, vOdd, vX, vBStride, vSums, vN, vBuf, vCfg, vNRB, vRBBytes, vI = 0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96
)

// tdpbusd: tmm d += tmm a (unsigned bytes) . tmm b (signed bytes, VNNI quads).
func tdpbusd(d, a, b int) {
	raw(fmt.Sprintf("tdpbusd tmm%d,tmm%d,tmm%d", d, a, b), append(vex3(0, 0, 0, b, pp66), 0x5E, byte(0xC0|d<<3|a)))
}

// pp66 is the VEX pp field of a 66 prefix.
const pp66 = 1

// amxvFar is how far ahead in each row quad's stream gemvAMXI2S prefetches into L1: two
// pairs (512 bytes), each quad's four lines beside its decode. Against none, on a Sapphire
// Rapids-class Xeon guest from DRAM at one thread: 14336x4096 at four tokens 0.92 of the
// time, 6912x2560 at eight 0.92; 256 and 768 bytes ahead lost 2-12% against 512, 2 KiB ran
// slower than none.
const amxvFar = 512

// amxvNextLines is how many lines of each of the next row block's eight quad streams
// gemvAMXI2S prefetches into L2 at a row block's start: its first pair. Against none (one
// thread and two, 8 tokens): 2560x2560 0.91-0.93 of the time, 6912x2560 0.92-0.94,
// 14336x4096 0.94; eight lines ran 0-4% slower than four, two 2-5%.
const amxvNextLines = 4

// gemvAMXI2S is the small-batch i2s GEMV on AMX-INT8, the weights as the tiles' rows: for
// N <= 16 tokens and NRB row blocks, Sums[rb][t][r] = the sum over k of code(r, k) times
// x_t[k] (one tile configuration for them all: loading it and releasing the tiles cost
// about 80 ns, a tenth of a row block's time at K = 2560 with the sums' gathers).
// A step is a pair of 128-input blocks: each row's two 32-byte pieces (one 64-byte vector)
// give, through one vgf2p8affineqb per run s (the codes in bits 7-2s and 6-2s), a 64-byte
// tile row of codes (run s of both blocks), so a pair is eight 16x64 tiles (rows 0-15 and
// 16-31, runs 0-3), each decoded row stored to a buffer the tile is then loaded from; the
// activations come as Prepare laid them out (per pair and run, 16 quads of N tokens: the
// inputs of those tile rows in the same order). tdpbusd multiplies them into tiles 0 and 1
// (rows 0-15 and 16-31, N columns). Each pair's decode runs between the tile products of
// the pair before it, in two buffers, so that the stores and the multiplies overlap. A
// last pair of one block (Kp/128 odd) decodes its rows from 32-byte loads (the other half
// zero, against activations Prepare left zero there). The sums leave the tiles as
// [row][token] and are gathered to [token][row].
func gemvAMXI2S() {
	name := "gemvAMXI2S"
	header(name, NOSPLIT, "func(a *byte)", name+" is the small-batch i2s GEMV on AMX-INT8 (see amxvArgs). It needs the tile",
		"permission (amxPermit) and AMX-INT8.")
	a, w, w4, qs, q3, dec, mul, x, bs, s64, cnt, t := RDI, RSI, RDX, R8, R9, R10, R11, R12, R13, RAX, RBX, RCX
	runs := []VecPhysical{Z28, Z29, Z30, Z31}
	for s := 0; s < 4; s++ {
		q := gfField(6-2*s, 2)
		d := []uint32{uint32(q), uint32(q >> 32)}
		VMOVDQU64(halves(fmt.Sprintf("amxvRun%d", s), d, d), runs[s])
	}
	Load(Param("a"), a)
	MOVQ(at(a, vCfg), t)
	ldtilecfg(t)
	MOVQ(at(a, vQStride), qs)
	LEAQ(idx(qs, qs, 2, 0), q3)
	MOVQ(at(a, vN), bs)
	SHLQ(U8(2), bs) // a B tile row: N tokens' dwords
	MOVQ(U32(64), s64)
	// quadAt is byte disp of quad q's stream in a row block whose quads 0 and 4 are at lo and
	// hi (the quads are qs bytes apart).
	quadAt := func(lo, hi Register, q, disp int) Mem {
		base := lo
		if q >= 4 {
			base = hi
		}
		m := Mem{Base: base, Disp: disp}
		switch q % 4 {
		case 1:
			m.Index, m.Scale = qs, 1
		case 2:
			m.Index, m.Scale = qs, 2
		case 3:
			m.Index, m.Scale = q3, 1
		}
		return m
	}
	// quadAddr is row rr's piece of quad q in the current pair (plus off).
	quadAddr := func(q, rr, off int) Mem { return quadAt(w, w4, q, 32*rr+off) }
	// decodeQuad decodes quad q's four rows of the current pair into buffer dec.
	decodeQuad := func(q int, odd bool) {
		for rr := 0; rr < 4; rr++ {
			VMOVDQU(quadAddr(q, rr, 0), Y0)
			if !odd {
				VINSERTI64X4(U8(1), quadAddr(q, rr, 128), Z0, Z0)
			}
			h, row := q/4, 4*(q%4)+rr
			for s := 0; s < 4; s++ {
				z := []VecPhysical{Z1, Z2, Z3, Z4}[s]
				VGF2P8AFFINEQB(U8(0), runs[s], Z0, z)
				VMOVDQU64(z, at(dec, (h*4+s)*1024+row*64))
			}
		}
	}
	loadB := func() {
		for s := 0; s < 4; s++ {
			tileLoad(4+s, x, bs, 0)
			ADDQ(at(a, vBStride), x)
		}
	}
	// mulQuad is tile product q of the pair in buffer mul: rows 16h..16h+15, run s.
	mulQuad := func(q int) {
		h, s := q/4, q%4
		tileLoad(2+h, mul, s64, (h*4+s)*1024)
		tdpbusd(h, 2+h, 4+s)
	}
	next := func() {
		ADDQ(U32(256), w)
		ADDQ(U32(256), w4)
		XCHGQ(dec, mul)
	}
	both := func(odd bool) { // decode the current pair while multiplying the last
		loadB()
		for q := 0; q < 8; q++ {
			for l := 0; l < 4; l++ {
				PREFETCHT0(quadAddr(q, 0, amxvFar+64*l))
			}
			decodeQuad(q, odd)
			mulQuad(q)
		}
	}
	mulOnly := func() {
		loadB()
		for q := 0; q < 8; q++ {
			mulQuad(q)
		}
	}
	// rbAt points w and w4 at pair 0 of the row block whose index is in w.
	rbAt := func() {
		IMULQ(at(a, vRBBytes), w)
		ADDQ(at(a, vW), w)
		LEAQ(idx(w, qs, 4, 0), w4)
	}
	// setRB points w and w4 at row block I's pair 0 (x at the activations of pair 0).
	setRB := func() {
		MOVQ(at(a, vI), w)
		rbAt()
		MOVQ(at(a, vX), x)
	}
	// byOdd emits f(false), or f(true) where the last pair has one block (Odd), as two
	// branches joining after them.
	byOdd := func(label string, f func(odd bool)) {
		CMPQ(at(a, vOdd), U8(0))
		JNE(LabelRef(label + "odd"))
		f(false)
		JMP(LabelRef(label + "join"))
		Label(label + "odd")
		f(true)
		Label(label + "join")
	}
	decodeAll := func(odd bool) {
		for q := 0; q < 8; q++ {
			decodeQuad(q, odd)
		}
	}
	// storeRB stores row block I's sums (tiles 0 and 1, via Buf+16384 as [row][token], then
	// gathered token by token to Sums[I][t]) and zeroes the tiles.
	stores := 0
	storeRB := func() {
		MOVQ(at(a, vBuf), t)
		ADDQ(U32(16384), t)
		tileStore(0, t, s64, 0)
		tileStore(1, t, s64, 1024)
		tileZero(0)
		tileZero(1)
		MOVQ(at(a, vI), x)
		IMULQ(at(a, vN), x)
		SHLQ(U8(7), x)
		ADDQ(at(a, vSums), x)
		MOVQ(at(a, vN), cnt)
		lbl := fmt.Sprintf("%s_tok%d", name, stores) // one gather loop per copy of the store
		stores++
		Label(lbl)
		for h := 0; h < 2; h++ {
			KXNORW(K1, K1, K1)
			VPGATHERDD(Mem{Base: t, Index: Z5, Scale: 1, Disp: 1024 * h}, K1, Z0)
			VMOVDQU32(Z0, at(x, 64*h))
		}
		ADDQ(U8(4), t)
		ADDQ(U32(128), x)
		DECQ(cnt)
		JNZ(LabelRef(lbl))
	}
	VMOVDQU32(dwordTable("amxvRows", []uint32{0, 64, 128, 192, 256, 320, 384, 448, 512, 576, 640, 704, 768, 832, 896, 960}), Z5)
	MOVQ(at(a, vBuf), dec)
	LEAQ(at(dec, 8192), mul)
	MOVQ(U32(0), at(a, vI))
	tileZero(0)
	tileZero(1)
	setRB()
	CMPQ(at(a, vPairs), U8(1))
	JE(LabelRef(name + "_one"))

	// Two pairs or more: one pipeline through the row blocks, each row block's pair 0
	// decoded while the last pair of the one before is multiplied.
	decodeAll(false)
	next()
	Label(name + "_rb") // mul: pair 0 of row block I; w at its pair 1
	// The next row block's first pair into L2 (its eight streams start cold otherwise).
	MOVQ(at(a, vI), t)
	INCQ(t)
	IMULQ(at(a, vRBBytes), t)
	ADDQ(at(a, vW), t)
	LEAQ(idx(t, qs, 4, 0), cnt)
	for q := 0; q < 8; q++ {
		for l := 0; l < amxvNextLines; l++ {
			PREFETCHT1(quadAt(t, cnt, q, 64*l))
		}
	}
	MOVQ(at(a, vPairs), cnt)
	SUBQ(U8(2), cnt)
	JZ(LabelRef(name + "_last"))
	Label(name + "_mid")
	both(false)
	next()
	DECQ(cnt)
	JNZ(LabelRef(name + "_mid"))
	Label(name + "_last")
	byOdd(name+"_last", both)
	// dec: the last pair of row block I, not yet multiplied
	XCHGQ(dec, mul)
	MOVQ(at(a, vI), cnt)
	INCQ(cnt)
	CMPQ(cnt, at(a, vNRB))
	JE(LabelRef(name + "_end"))
	// the next row block's pair 0 beside this one's last products
	MOVQ(cnt, w)
	rbAt()
	both(false)
	storeRB()
	INCQ(at(a, vI))
	MOVQ(at(a, vX), x)
	next()
	JMP(LabelRef(name + "_rb"))
	Label(name + "_end")
	mulOnly()
	storeRB()
	JMP(LabelRef(name + "_done"))

	// One pair (K <= 256): row block by row block, its decode, then its products.
	Label(name + "_one")
	byOdd(name+"_one", decodeAll)
	XCHGQ(dec, mul)
	mulOnly()
	storeRB()
	INCQ(at(a, vI))
	MOVQ(at(a, vI), cnt)
	CMPQ(cnt, at(a, vNRB))
	JE(LabelRef(name + "_done"))
	setRB()
	JMP(LabelRef(name + "_one"))

	Label(name + "_done")
	tileRelease()
	VZEROUPPER()
	RET()
}

// Argument block offsets: kernels.amxv2Args.
const (
	nW, nX, nXStride, nSteps, nSums, nN, nBuf, nCfg, nNRB, nTab, nPF = 0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80
)

// gemvAMXInt2 is the small-batch int2 GEMV on AMX-INT8, the weights as the second operand:
// for N <= 16 tokens and NRB consecutive row blocks, Sums[rb][t][r] = the sum over k of
// X[t][k] (signed) times u(r, k), u the code book's unsigned level (Tab: the GEMM
// unpacker's tables), the sums the AMX GEMM's (gemmAMX) makes of the same row block. int2's
// layout is already the tiles' order: a 32-byte unit (32 rows x 4 inputs) broadcast to both
// halves of a vector and looked up (vpshufb) by its low and its high nibbles in the tables
// [low, low, high, high] gives the 64-byte rows of a quad for the tiles of rows 0-15 and
// 16-31 (the GEMM's unpacked B). A step is 64 inputs, 16 units (512 bytes, one stream
// through all the row blocks): decoded to a 2 KiB buffer, then loaded as tiles 6 and 7
// (16 rows of 64 bytes each, the two tiles' rows interleaved) and multiplied by the tokens'
// activations as they are (tile 4, N rows of 64 inputs, XStride apart) into tiles 0 and 1.
// Each step's decode runs between the products of the step before, in two buffers, so the
// stores and the multiplies overlap; the stream is prefetched PF bytes ahead into L1. At
// each row block's end the tiles go to Sums as [token][row] (no gather) and are zeroed.
func gemvAMXInt2() {
	name := "gemvAMXInt2"
	header(name, NOSPLIT, "func(a *byte)", name+" is the small-batch int2 GEMV on AMX-INT8 (see amxv2Args). It needs the tile",
		"permission (amxPermit) and AMX-INT8.")
	a, w, x, xs, dec, mul, s128, cnt, sums, rbs, pf, t := RDI, RSI, R12, R8, R10, R11, R13, RBX, RCX, RDX, R9, RAX
	tab, m0f, hiGF := Z30, Z31, Z29
	q := gfField(4, 4)
	VPBROADCASTQ(table("amxv2Hi", []byte{byte(q), byte(q >> 8), byte(q >> 16), byte(q >> 24), byte(q >> 32), byte(q >> 40), byte(q >> 48), byte(q >> 56)}), hiGF)
	Load(Param("a"), a)
	MOVQ(at(a, nTab), t)
	VMOVDQU64(at(t, 0), tab.AsY())
	VSHUFI64X2(U8(0x50), tab, tab, tab) // [low, low, high, high]
	MOVL(U32(0x0f0f0f0f), t.As32())
	VPBROADCASTD(t.As32(), m0f)
	MOVQ(at(a, nCfg), t)
	ldtilecfg(t)
	MOVQ(at(a, nW), w)
	MOVQ(at(a, nX), x)
	MOVQ(at(a, nXStride), xs)
	MOVQ(at(a, nSums), sums)
	MOVQ(at(a, nNRB), rbs)
	MOVQ(at(a, nPF), pf)
	MOVQ(at(a, nBuf), dec)
	LEAQ(at(dec, 2048), mul)
	MOVQ(U32(128), s128)
	tileZero(0)
	tileZero(1)
	// unit u of the step at w into dec: its two 64-byte tile rows.
	regs := [][3]VecPhysical{{Z0, Z1, Z2}, {Z3, Z4, Z5}, {Z6, Z7, Z8}, {Z9, Z10, Z11}}
	unit := func(u int) {
		r := regs[u%len(regs)]
		VBROADCASTI64X4(at(w, 32*u), r[0])
		VPANDD(m0f, r[0], r[1])
		VGF2P8AFFINEQB(U8(0), hiGF, r[0], r[2])
		VPSHUFB(r[1], tab, r[1])
		VPSHUFB(r[2], tab, r[2])
		VMOVDQU64(r[1], at(dec, 128*u))
		VMOVDQU64(r[2], at(dec, 128*u+64))
	}
	// mul is the step in buffer mul times its activations at x, the tile ops spread among
	// the units of a decode (between: nil).
	mulOps := []func(){
		func() { tileLoad(4, x, xs, 0) },
		func() { tileLoad(6, mul, s128, 0) },
		func() { tdpbsud(0, 4, 6) },
		func() { tileLoad(7, mul, s128, 64) },
		func() { tdpbsud(1, 4, 7) },
	}
	both := func() {
		for l := 0; l < 8; l++ {
			PREFETCHT0(Mem{Base: w, Index: pf, Scale: 1, Disp: 64 * l})
		}
		for u := 0; u < 16; u++ {
			unit(u)
			if u%3 == 0 && u/3 < len(mulOps) {
				mulOps[u/3]()
			}
		}
	}
	mulOnly := func() {
		for _, op := range mulOps {
			op()
		}
	}
	next := func() {
		ADDQ(U32(512), w)
		ADDQ(U8(64), x)
		XCHGQ(dec, mul)
	}
	// step 0 of the first row block
	for u := 0; u < 16; u++ {
		unit(u)
	}
	ADDQ(U32(512), w)
	XCHGQ(dec, mul)
	Label(name + "_rb")
	MOVQ(at(a, nSteps), cnt)
	Label(name + "_step") // mul: step (Steps - cnt) of this row block; w at the stream's next step
	CMPQ(cnt, U8(1))
	JNE(LabelRef(name + "_both"))
	CMPQ(rbs, U8(1))
	JE(LabelRef(name + "_last"))
	Label(name + "_both")
	both()
	next()
	DECQ(cnt)
	JNZ(LabelRef(name + "_step"))
	tileStore(0, sums, s128, 0)
	tileStore(1, sums, s128, 64)
	tileZero(0)
	tileZero(1)
	MOVQ(at(a, nN), t)
	SHLQ(U8(7), t)
	ADDQ(t, sums)
	MOVQ(at(a, nX), x)
	DECQ(rbs)
	JMP(LabelRef(name + "_rb"))
	Label(name + "_last")
	mulOnly()
	tileStore(0, sums, s128, 0)
	tileStore(1, sums, s128, 64)
	tileRelease()
	VZEROUPPER()
	RET()
}
