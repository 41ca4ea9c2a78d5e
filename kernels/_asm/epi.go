package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Argument block offsets: kernels.epiArgs.
const (
	epSums, epNTok, epNSeg, epA, epCorr, epXS, epCorrStride = 0, 8, 16, 24, 32, 40, 48
	epWS, epWSSeg, epBias, epOut, epOutStride, epMask       = 56, 64, 72, 80, 88, 96
	epNRB, epSumsRB, epWSRB                                 = 104, 112, 120
)

func genEpilogue() {
	rowBits := rowBitsTable("epiRowBits")
	genEpi(true, Mem{})
	genEpi(false, rowBits)
	genEpiRows(true, Mem{})
	genEpiRows(false, rowBits)
}

// rowBitsTable defines a table of the dwords 1 << r for the rows r = 0..31 of a block, from
// which rowMaskY makes a ymm store mask.
func rowBitsTable(name string) Mem {
	var bits []uint32
	for r := 0; r < 32; r++ {
		bits = append(bits, 1<<r)
	}
	return dwordTable(name, bits)
}

// rowMaskY sets dst to the vmaskmovps mask of rows 8i..8i+7 from mb, the row mask (bit r =
// row r) in every dword.
func rowMaskY(rowBits Mem, i int, mb, dst VecPhysical) {
	VPAND(rowBits.Offset(32*i), mb, dst)
	VPCMPEQD(rowBits.Offset(32*i), dst, dst)
}

// rowMasksZ loads the row mask m (bit r = row r) into K1 (rows 0-15) and K2 (rows 16-31),
// the zmm stores' masks.
func rowMasksZ(m Mem) {
	r := GP64()
	MOVQ(m, r)
	rowMasksZReg(r)
}

// rowMasksZReg is rowMasksZ of the row mask in r (which it shifts).
func rowMasksZReg(r GPVirtual) {
	KMOVW(r.As32(), K1)
	SHRQ(U8(16), r)
	KMOVW(r.As32(), K2)
}

// genEpi writes epilogueAVX512 (zmm: 32 rows in 2 registers, masked stores) or
// epilogueAVX2 (ymm: 4 registers, vmaskmovps). Where a row block has several segments the
// GEMV kernels of int2 and int8 (zmm, AVX-VNNI and AVX2) run the same arithmetic
// themselves (fuseEpi), so it overlaps their weight stream; these serve the rest.
//
// With small groups (many segments) the divisions are most of its cost: on an Emerald Rapids
// Xeon a zmm vdivps holds the divider 10 cycles (a ymm one 5, the same per element), and a
// segment of one token took 21 cycles in L1, 8-10 with vmulps in their place (timing only).
// The quotient through float64 (times the float64 reciprocal of XS, rounded once to float32:
// exact for normal quotients, since a quotient of two floats is never within 2^-49, relative,
// of a midpoint, and the float64 product errs by less than 2^-51) took 7 cycles a vector in a
// loop of its own against the divider's 10, on the ports the segment's other 12 micro-ops need
// (the divider runs beside them): not built. Prefetching the next row block's weights from the
// segment loop, so that DRAM does not pause under a long epilogue, moved group:128 by no more
// than the noise (one line a segment, nine paired rounds, one and four tokens).
func genEpi(z bool, rowBits Mem) {
	name, nv := "epilogueAVX2", 4
	if z {
		name, nv = "epilogueAVX512", 2
	}
	a := fn(name,
		name+" is the integer epilogue of one row block for NTok tokens (see epiArgs);",
		"epilogueGeneric is its reference.")
	p := newPool(z)
	sums, ntok, corr, xs, out := ld(a, epSums), ld(a, epNTok), ld(a, epCorr), ld(a, epXS), ld(a, epOut)
	segStride := GP64()
	MOVQ(ntok, segStride)
	SHLQ(U8(7), segStride)
	av := p.get()
	VPBROADCASTD(at(a, epA), av)
	var masks []VecPhysical
	if z {
		rowMasksZ(at(a, epMask))
	} else {
		mb := p.get()
		VPBROADCASTD(at(a, epMask), mb)
		masks = p.getn(4)
		for i, m := range masks {
			rowMaskY(rowBits, i, mb, m)
		}
		p.put(mb)
	}
	y := p.getn(nv)
	f := p.getn(nv)
	seg := func(s, c, x, w Register, dst []VecPhysical) { epiSeg(p, z, av, s, c, x, w, dst) }
	Label(name + "_tok")
	s, c, x, w, j := GP64(), GP64(), GP64(), GP64(), GP64()
	MOVQ(sums, s)
	MOVQ(corr, c)
	MOVQ(xs, x)
	MOVQ(at(a, epWS), w)
	MOVQ(at(a, epNSeg), j)
	seg(s, c, x, w, y)
	DECQ(j)
	JZ(LabelRef(name + "_segdone"))
	Label(name + "_seg")
	ADDQ(segStride, s)
	ADDQ(U8(4), c)
	ADDQ(U8(4), x)
	ADDQ(at(a, epWSSeg), w)
	seg(s, c, x, w, f)
	for i := range y {
		VADDPS(f[i], y[i], y[i])
	}
	DECQ(j)
	JNZ(LabelRef(name + "_seg"))
	Label(name + "_segdone")
	b := GP64()
	MOVQ(at(a, epBias), b)
	epiStore(name, z, a, y, masks, b, out, sums, corr, xs, ntok)
	VZEROUPPER()
	RET()
}

// epiSeg adds up one segment's products of 32 rows for one token into dst (genEpi's
// arithmetic): the sums at s times A (av), plus the correction at c, as float32 times the
// scales at w, divided by the activations' scale at x.
func epiSeg(p *pool, z bool, av VecPhysical, s, c, x, w Register, dst []VecPhysical) {
	step := epiStep(z)
	for i := range dst {
		VMOVDQU32orY(z, at(s, step*i), dst[i])
		VPMULLD(av, dst[i], dst[i])
	}
	eachBcast(p, z, at(c, 0), dst, VPADDD_BCST, VPBROADCASTD, VPADDD)
	for i := range dst {
		VCVTDQ2PS(dst[i], dst[i])
		VMULPS(at(w, step*i), dst[i], dst[i])
	}
	eachBcast(p, z, at(x, 0), dst, VDIVPS_BCST, VBROADCASTSS, VDIVPS)
}

// eachBcast applies op to every register of dst with the 32-bit value at m: as op's
// embedded broadcast (opBcst) on zmm, from a register bcast fills once on ymm.
func eachBcast(p *pool, z bool, m Mem, dst []VecPhysical, opBcst, bcast, op func(...Op)) {
	if z {
		for _, d := range dst {
			opBcst(m, d, d)
		}
		return
	}
	t := p.get()
	bcast(m, t)
	for _, d := range dst {
		op(t, d, d)
	}
	p.put(t)
}

// epiStep is the bytes of the epilogues' vectors: 16 rows (zmm) or 8 (ymm).
func epiStep(z bool) int {
	if z {
		return 64
	}
	return 32
}

// epiStore ends a token of the epilogues: the bias (if not nil) added, the rows stored
// (K1 and K2, or masks), sums, corr, xs and out moved on to the next token, and back to
// name's "_tok" while ntok (counted down) is not 0.
func epiStore(name string, z bool, a Register, y, masks []VecPhysical, bias, out, sums, corr, xs, ntok Register) {
	step := epiStep(z)
	TESTQ(bias, bias)
	JZ(LabelRef(name + "_store"))
	for i := range y {
		VADDPS(at(bias, step*i), y[i], y[i])
	}
	Label(name + "_store")
	for i := range y {
		if z {
			VMOVUPS(y[i], []Register{K1, K2}[i], at(out, step*i))
		} else {
			VMASKMOVPS(y[i], masks[i], at(out, step*i))
		}
	}
	ADDQ(U8(128), sums)
	ADDQ(at(a, epCorrStride), corr)
	ADDQ(at(a, epCorrStride), xs)
	ADDQ(at(a, epOutStride), out)
	DECQ(ntok)
	JNZ(LabelRef(name + "_tok"))
}

// VMOVDQU32orY loads 64 bytes (zmm) or 32 bytes (ymm).
func VMOVDQU32orY(z bool, m Mem, v VecPhysical) {
	if z {
		VMOVDQU32(m, v)
	} else {
		VMOVDQU(m, v)
	}
}

// genEpiRows writes epilogueRowsAVX512 or epilogueRowsAVX2: genEpi's arithmetic for one
// segment over NRB row blocks in one call, every row of each stored but the last's (Mask).
// The lookup-table GEMVs' epilogue runs over a thread's whole range after its sweep, one
// call per row block before (a profile of tl2 on 2560x2560 at two threads, cache-resident:
// 5% of the time in the epilogue, most of it in the Go around the calls). On the Zen 4
// guest, 448 row blocks of one token (BenchmarkEpilogueRows) took 1.6 us in one call
// against 3.8 us in calls per row block; tl2 cache-resident (BenchmarkGEMV, three runs of
// each build in turn) 14336x4096 2% faster at one thread and 3% at two, 2560x2560 the same
// at one and 1.5% faster at two. From DRAM the difference was within the noise.
func genEpiRows(z bool, rowBits Mem) {
	name, nv := "epilogueRowsAVX2", 4
	if z {
		name, nv = "epilogueRowsAVX512", 2
	}
	a := fn(name,
		name+" is the integer epilogue of NRB row blocks of one segment (NSeg 1) for NTok",
		"tokens (see epiArgs); epilogueGeneric is its reference.")
	p := newPool(z)
	nrb, sums, ws, bias, out := ld(a, epNRB), ld(a, epSums), ld(a, epWS), ld(a, epBias), ld(a, epOut)
	av := p.get()
	VPBROADCASTD(at(a, epA), av)
	var mb VecPhysical
	var masks []VecPhysical
	if !z {
		mb = p.get()
		masks = p.getn(4)
	}
	y := p.getn(nv)
	Label(name + "_rb")
	m, all := GP64(), GP64() // the rows to store: all but in the last row block (NRB <= 1)
	MOVQ(at(a, epMask), m)
	MOVQ(U32(1<<32-1), all)
	CMPQ(nrb, U8(1))
	CMOVQGT(all, m)
	if z {
		rowMasksZReg(m)
	} else {
		VMOVQ(m, mb.AsX())
		VPBROADCASTD(mb.AsX(), mb)
		for i, mk := range masks {
			rowMaskY(rowBits, i, mb, mk)
		}
	}
	t, corr, xs, o, s := ld(a, epNTok), ld(a, epCorr), ld(a, epXS), GP64(), GP64()
	MOVQ(out, o)
	MOVQ(sums, s)
	Label(name + "_tok")
	epiSeg(p, z, av, s, corr, xs, ws, y)
	epiStore(name, z, a, y, masks, bias, o, s, corr, xs, t)
	// the next row block (past the last the pointers are only in registers)
	ADDQ(at(a, epSumsRB), sums)
	ADDQ(at(a, epWSRB), ws)
	ADDQ(U8(128), out)
	TESTQ(bias, bias)
	JZ(LabelRef(name + "_nobias"))
	ADDQ(U8(128), bias)
	Label(name + "_nobias")
	DECQ(nrb)
	JG(LabelRef(name + "_rb"))
	VZEROUPPER()
	RET()
}
