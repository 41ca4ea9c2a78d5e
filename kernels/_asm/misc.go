package main

import (
	"fmt"
	"math/bits"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// genMisc writes the measurement loops of package kernels: the read-bandwidth loops and
// the int8 peak loops (AVX-512 VNNI, AVX2).
func genMisc() {
	genActHelpers()
	genBF16Conv()
	for _, z := range []bool{true, false} {
		name := "readBytesAVX2"
		if z {
			name = "readBytesAVX512"
		}
		pp, n, acc := readLoop(name, z, name+" reads n bytes at p (n a multiple of 256) and returns a checksum, so the loads",
			"are not optimized away; readBytesGeneric is its reference.")
		SHRQ(U8(8), n)
		Label(name + "_loop")
		for i := 0; i < 4; i++ { // (as the i2s and int8 kernels: see genReadStreams)
			prefetchAheadBy(pp, i2sFar, 64*i)
		}
		for i := 0; i < 4; i++ {
			if z {
				VPXORQ(at(pp, 64*i), acc[i], acc[i])
			} else {
				VPXOR(at(pp, 32*i), acc[i], acc[i])
				VPXOR(at(pp, 128+32*i), acc[i], acc[i])
			}
		}
		ADDQ(U32(256), pp)
		DECQ(n)
		JNZ(LabelRef(name + "_loop"))
		foldChecksum(z, acc)
	}
	genReadStreams()

	TEXT("vnniPeakAVX512", NOSPLIT, "func(n int) uint32")
	Doc("vnniPeakAVX512 runs n iterations of 24 independent zmm vpdpbusd (1536 int8 multiply-adds",
		"each, no memory traffic): the int8 VNNI peak of one core. vnniPeakGeneric is its reference.")
	n := Load(Param("n"), GP64())
	p := newPool(true)
	acc := p.getn(24)
	u, s := p.get(), p.get()
	bcastByte(u, 3)
	bcastByte(s, 0xff)
	for _, r := range acc {
		VPXORD(r, r, r)
	}
	Label("vnni_loop")
	for _, r := range acc {
		VPDPBUSD(s, u, r)
	}
	DECQ(n)
	JNZ(LabelRef("vnni_loop"))
	for i := 1; i < len(acc); i++ {
		VPADDD(acc[i], acc[0], acc[0])
	}
	VEXTRACTI64X4(U8(1), acc[0], acc[1].AsY())
	VPADDD(acc[1].AsY(), acc[0].AsY(), acc[0].AsY())
	VEXTRACTI128(U8(1), acc[0].AsY(), acc[1].AsX())
	VPADDD(acc[1].AsX(), acc[0].AsX(), acc[0].AsX())
	r := GP32()
	VMOVD(acc[0].AsX(), r)
	Store(r, ReturnIndex(0))
	VZEROUPPER()
	RET()

	TEXT("int8PeakAVX2", NOSPLIT, "func(n int) uint32")
	Doc("int8PeakAVX2 runs n iterations of 8 independent ymm vpmaddubsw, each summed into its own",
		"int16 accumulator by a vpaddw (256 int8 multiply-adds, no memory traffic): the int8 peak of one",
		"core on 256-bit vectors without VNNI, the operations the AVX2 kernels' inner loops are made of",
		"(wrapping int16 sums). int8PeakGeneric is its reference.")
	n = Load(Param("n"), GP64())
	p = newPool(false)
	accY, tmp := p.getn(8), p.getn(4)
	uY, sY := p.get(), p.get()
	bcastByte(uY, 3)
	bcastByte(sY, 0xff)
	zeroAll(accY...)
	Label("int8_loop")
	for i, r := range accY {
		VPMADDUBSW(sY, uY, tmp[i%4])
		VPADDW(tmp[i%4], r, r)
	}
	DECQ(n)
	JNZ(LabelRef("int8_loop"))
	for i := 1; i < len(accY); i++ {
		VPADDW(accY[i], accY[0], accY[0])
	}
	r = GP32()
	VMOVD(accY[0].AsX(), r)
	Store(r, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// lutBuildCoefs returns the word coefficient vectors of the table builders: for tl1, entry
// i of a pair table is (i/3-1)*x0 + (i%3-1)*x1 (0 for i > 8), two 16-entry tables per
// 32 words; for tl2, entry v of a triple table is d0*x0 + d1*x1 + d2*x2 with (d0, d1, d2)
// the balanced ternary digits of v (0 for v > 13), and entries 16+v the negations.
func lutBuildCoefs(tl2 bool) [3][32]int16 {
	var c [3][32]int16
	for j := 0; j < 32; j++ {
		i := j % 16
		if !tl2 {
			if i <= 8 {
				c[0][j], c[1][j] = int16(i/3-1), int16(i%3-1)
			}
			continue
		}
		if i > 13 {
			continue
		}
		d0 := (i + 13) / 9
		rem := i + 13 - 9*d0
		s := int16(1)
		if j >= 16 {
			s = -1
		}
		c[0][j], c[1][j], c[2][j] = s*int16(d0-1), s*int16(rem/3-1), s*int16(rem%3-1)
	}
	return c
}

func wordTable(name string, w []int16) Mem {
	m := GLOBL(name, RODATA|NOPTR)
	for i, v := range w {
		DATA(2*i, U16(uint16(v)))
	}
	return m
}

// pickTable defines vpermw indexes picking word lo of the source (sign-extended bytes
// b0 b1 b2 b3 ...) for the low 16 words and word hi for the high 16.
func pickTable(name string, lo, hi int) Mem {
	var w []int16
	for j := 0; j < 32; j++ {
		if j < 16 {
			w = append(w, int16(lo))
		} else {
			w = append(w, int16(hi))
		}
	}
	return wordTable(name, w)
}

// tl2Pair01 and tl2Pair2e are the tabTL2Z builder's constant tables (the signed byte pairs
// its two vpmaddubsw multiply), defined by genLUTBuilders in the gemv file, whose one-token
// tl2 kernel builds tables too.
var tl2Pair01, tl2Pair2e Mem

// tl2PairTables returns the byte pairs of the tl2 table builder: word j of the first is
// (c0[j], c1[j]), of the second (e[j], c2[j]), with c the coefficients of lutBuildCoefs and
// e[j] = -(c0[j] + c1[j] + c2[j]).
func tl2PairTables() (p01, p2e []byte) {
	c := lutBuildCoefs(true)
	for j := 0; j < 32; j++ {
		p01 = append(p01, byte(c[0][j]), byte(c[1][j]))
		p2e = append(p2e, byte(-(c[0][j] + c[1][j] + c[2][j])), byte(c[2][j]))
	}
	return p01, p2e
}

// tl2Builder emits the tabTL2Z table builder's step for one triple (x0, x1, x2). With the
// activations made unsigned, u = x + 128 (x xor 0x80), entry j is
// c0[j]*u0 + c1[j]*u1 + c2[j]*u2 - 128*(c0[j] + c1[j] + c2[j]) (the c of lutBuildCoefs),
// which two vpmaddubsw compute exactly (|each word| <= 510) from two broadcast words:
// (u0, u1) against the pairs (c0, c1), and (128, u2) against (e, c2) with
// e = -(c0 + c1 + c2). Eight instructions a table: two vpbroadcastw, a vpxord, a
// vpternlogd, two vpmaddubsw, a vpaddw and the store, and it reads only the triple's own
// three bytes. The build before took twelve, three of them vpermw and three vpmullw, about
// 14 cycles a table on Zen 4, where a one-token GEMV builds its tables once per call and
// sweeps every row block over them: on weights in L2 at one thread (1024xK, K of one to
// eight chunks) each chunk cost 730 ns beside 90 ns a row block, 6% of the time at 4096
// rows and 25% at 1024. With this one, 1024x576 and 1024x2304 took 14% less time.
// lutBuildTL2AVX512 runs it in a loop, and the zmm tl2 GEMV for one token runs it between
// row blocks to build its next chunk's tables.
type tl2Builder struct {
	p01, p2e   VecPhysical // tl2Pair01, tl2Pair2e
	x80, hi    VecPhysical // words 0x8080 and 0xff00
	v, acc, tm VecPhysical // scratch
	planes     VecPhysical // tabTL2B: the vpermb that splits the words into byte planes (nil: tabTL2Z)
}

// newTL2Builder loads the constants into registers from p and uses v, acc and tm as scratch.
func newTL2Builder(p *pool, v, acc, tm VecPhysical) *tl2Builder {
	b := &tl2Builder{p01: p.get(), p2e: p.get(), x80: p.get(), hi: p.get(), v: v, acc: acc, tm: tm}
	b.load()
	return b
}

// load loads the builder's constants into its registers.
func (b *tl2Builder) load() {
	VMOVDQU64(tl2Pair01, b.p01)
	VMOVDQU64(tl2Pair2e, b.p2e)
	bcastWord(b.x80, 0x8080)
	bcastWord(b.hi, 0xff00)
}

// triple writes the table of the triple at x (x[0..2]) to dst.
func (b *tl2Builder) triple(x, dst Mem) {
	b.table(x, b.acc)
	if b.planes != nil {
		VPERMB(b.acc, b.planes, b.acc)
	}
	VMOVDQU16(b.acc, dst)
}

// table computes the tabTL2Z table of the triple at x (x[0..2]) into the register out.
func (b *tl2Builder) table(x Mem, out VecPhysical) {
	VPBROADCASTW(x, b.v)
	VPXORD(b.x80, b.v, b.v) // (u0, u1)
	x.Disp++
	VPBROADCASTW(x, b.tm)
	VPTERNLOGD(U8(0x6a), b.x80, b.hi, b.tm) // (tm & 0xff00) ^ 0x8080: (128, u2)
	VPMADDUBSW(b.p01, b.v, out)
	VPMADDUBSW(b.p2e, b.tm, b.tm)
	VPADDW(b.tm, out, out)
}

// bytePlanes defines the vpermb that splits a zmm of 32 words into byte planes, group
// words at a time: the group's low bytes, then its high bytes.
func bytePlanes(name string, group int) Mem {
	var p []byte
	for g := 0; g < 32; g += group {
		for b := 0; b < 2; b++ {
			for i := 0; i < group; i++ {
				p = append(p, byte(2*(g+i)+b))
			}
		}
	}
	return table(name, p)
}

// genLUTBuilders writes the per-call table builders of the tl1/tl2 GEMV kernels (their
// generic reference is buildLUT): lutBuildTL1AVX512(x, units, dst) writes tabTL1Z tables
// for units of 4 inputs (byte planes: it computes a unit's 32 words, then one vpermb splits
// them), lutBuildTL2AVX512(x, triples, dst) tabTL2Z tables (x points at the
// first triple), lutBuildTL2BAVX512 the same as tabTL2B byte
// planes (a vpermb more per triple), and the AVX2 builders the ymm layouts.
func genLUTBuilders() {
	c1, c2 := lutBuildCoefs(false), lutBuildCoefs(true)
	var t1 [2]Mem
	for i := range t1 {
		t1[i] = wordTable(fmt.Sprintf("lutC1_%d", i), c1[i][:])
	}
	var tl2Coef [3]Mem // (AVX2)
	for i := range tl2Coef {
		tl2Coef[i] = wordTable(fmt.Sprintf("lutC2_%d", i), c2[i][:])
	}
	p01, p2e := tl2PairTables()
	tl2Pair01, tl2Pair2e = table("lutP2_01", p01), table("lutP2_2e", p2e)
	p1x0, p1x1 := pickTable("lutP1x0", 0, 2), pickTable("lutP1x1", 1, 3)
	var split []byte
	for l := 0; l < 2; l++ {
		for i := 0; i < 8; i++ {
			split = append(split, byte(2*i))
		}
		for i := 0; i < 8; i++ {
			split = append(split, byte(2*i+1))
		}
	}
	splitW := table("lutSplitWords", split)
	planesZ := bytePlanes("lutPlanesZ", 16)     // tabTL1Z: per 16-word half
	planesTL2 := bytePlanes("lutPlanesTL2", 32) // tabTL2B: all 32 words

	// AVX-512 tl1
	{
		TEXT("lutBuildTL1AVX512", NOSPLIT, "func(x *int8, units int, dst *byte)")
		Pragma("noescape")
		Doc("lutBuildTL1AVX512 writes units tabTL1Z tables (64 bytes each) for the activations at x;",
			"buildLUT is its reference.")
		x, n, d := Load(Param("x"), GP64()), Load(Param("units"), GP64()), Load(Param("dst"), GP64())
		p := newPool(true)
		ca, cb, i0, i1 := p.get(), p.get(), p.get(), p.get()
		VMOVDQU16(t1[0], ca)
		VMOVDQU16(t1[1], cb)
		VMOVDQU16(p1x0, i0)
		VMOVDQU16(p1x1, i1)
		v, a, b, pl := p.get(), p.get(), p.get(), p.get()
		VMOVDQU64(planesZ, pl)
		TESTQ(n, n)
		JZ(LabelRef("lut1z_done"))
		Label("lut1z_u")
		VPBROADCASTD(at(x, 0), v.AsX())
		VPMOVSXBW(v.AsX(), v.AsY())
		VINSERTI64X4(U8(1), v.AsY(), v, v)
		VPERMW(v, i0, a)
		VPERMW(v, i1, b)
		VPMULLW(ca, a, a)
		VPMULLW(cb, b, b)
		VPADDW(b, a, a)
		VPERMB(a, pl, a)
		VMOVDQU64(a, at(d, 0))
		ADDQ(U8(4), x)
		ADDQ(U8(64), d)
		DECQ(n)
		JNZ(LabelRef("lut1z_u"))
		Label("lut1z_done")
		VZEROUPPER()
		RET()
	}
	// AVX-512 tl2: tabTL2Z (word tables) and tabTL2B (byte planes)
	for _, planes := range []bool{false, true} {
		name, kind, lbl := "lutBuildTL2AVX512", "tabTL2Z", "lut2z"
		if planes {
			name, kind, lbl = "lutBuildTL2BAVX512", "tabTL2B", "lut2b"
		}
		TEXT(name, NOSPLIT, "func(x *int8, triples int, dst *byte)")
		Pragma("noescape")
		Doc(name+" writes triples "+kind+" tables (64 bytes each) for the activations at x;",
			"buildLUT is its reference.")
		x, n, d := Load(Param("x"), GP64()), Load(Param("triples"), GP64()), Load(Param("dst"), GP64())
		p := newPool(true)
		b := newTL2Builder(p, p.get(), p.get(), p.get())
		if planes {
			b.planes = p.get()
			VMOVDQU64(planesTL2, b.planes)
		}
		TESTQ(n, n)
		JZ(LabelRef(lbl + "_done"))
		Label(lbl + "_t")
		b.triple(at(x, 0), at(d, 0))
		ADDQ(U8(3), x)
		ADDQ(U8(64), d)
		DECQ(n)
		JNZ(LabelRef(lbl + "_t"))
		Label(lbl + "_done")
		VZEROUPPER()
		RET()
	}
	// AVX2 byte-plane builders: a 16-word table -> 16 low bytes, 16 high bytes.
	splitStore := func(tab VecPhysical, sp VecPhysical, m Mem) {
		VPSHUFB(sp, tab, tab)
		VPERMQ(U8(0xD8), tab, tab)
		VMOVDQU(tab, m)
	}
	bcastWordOf := func(m Mem, v VecPhysical) {
		VPBROADCASTB(m, v.AsX())
		VPMOVSXBW(v.AsX(), v)
	}
	{
		TEXT("lutBuildTL1AVX2", NOSPLIT, "func(x *int8, units int, dst *byte)")
		Pragma("noescape")
		Doc("lutBuildTL1AVX2 writes units tabTL1Y tables (64 bytes each) for the activations at x;",
			"buildLUT is its reference.")
		x, n, d := Load(Param("x"), GP64()), Load(Param("units"), GP64()), Load(Param("dst"), GP64())
		p := newPool(false)
		ca, cb, sp := p.get(), p.get(), p.get()
		VMOVDQU(t1[0], ca)
		VMOVDQU(t1[1], cb)
		VMOVDQU(splitW, sp)
		a, b := p.get(), p.get()
		TESTQ(n, n)
		JZ(LabelRef("lut1y_done"))
		Label("lut1y_u")
		for h := 0; h < 2; h++ {
			bcastWordOf(at(x, 2*h), a)
			bcastWordOf(at(x, 2*h+1), b)
			VPMULLW(ca, a, a)
			VPMULLW(cb, b, b)
			VPADDW(b, a, a)
			splitStore(a, sp, at(d, 32*h))
		}
		ADDQ(U8(4), x)
		ADDQ(U8(64), d)
		DECQ(n)
		JNZ(LabelRef("lut1y_u"))
		Label("lut1y_done")
		VZEROUPPER()
		RET()
	}
	{
		TEXT("lutBuildTL2AVX2", NOSPLIT, "func(x *int8, triples int, dst *byte)")
		Pragma("noescape")
		Doc("lutBuildTL2AVX2 writes triples tabTL2Y tables (32 bytes each) for the activations at x;",
			"buildLUT is its reference.")
		x, n, d := Load(Param("x"), GP64()), Load(Param("triples"), GP64()), Load(Param("dst"), GP64())
		p := newPool(false)
		cs := p.getn(3)
		for i := range cs {
			VMOVDQU(tl2Coef[i], cs[i])
		}
		sp := p.get()
		VMOVDQU(splitW, sp)
		acc, tm := p.get(), p.get()
		TESTQ(n, n)
		JZ(LabelRef("lut2y_done"))
		Label("lut2y_t")
		for i := 0; i < 3; i++ {
			r := acc
			if i > 0 {
				r = tm
			}
			bcastWordOf(at(x, i), r)
			VPMULLW(cs[i], r, r)
			if i > 0 {
				VPADDW(tm, acc, acc)
			}
		}
		splitStore(acc, sp, at(d, 0))
		ADDQ(U8(3), x)
		ADDQ(U8(32), d)
		DECQ(n)
		JNZ(LabelRef("lut2y_t"))
		Label("lut2y_done")
		VZEROUPPER()
		RET()
	}
	// strided prefetch into L2
	{
		TEXT("prefetchSpansT1", NOSPLIT, "func(p *byte, spans, stride, lines int)")
		Pragma("noescape")
		Doc("prefetchSpansT1 prefetches into L2 (prefetcht1) lines cache lines from each",
			"of spans places stride bytes apart, the first at p: the blocks of a panel-major tl2 row",
			"block, whose first blocks the GEMM unpacks next (prefetchPanelRB). A hint: no fault, no result.")
		pp, spans, stride, lines := Load(Param("p"), GP64()), Load(Param("spans"), GP64()), Load(Param("stride"), GP64()), Load(Param("lines"), GP64())
		q, c := GP64(), GP64()
		TESTQ(spans, spans)
		JZ(LabelRef("pfs_done"))
		TESTQ(lines, lines)
		JLE(LabelRef("pfs_done"))
		Label("pfs_span")
		MOVQ(pp, q)
		MOVQ(lines, c)
		Label("pfs_line")
		PREFETCHT1(at(q, 0))
		ADDQ(U8(64), q)
		DECQ(c)
		JNZ(LabelRef("pfs_line"))
		ADDQ(stride, pp)
		DECQ(spans)
		JNZ(LabelRef("pfs_span"))
		Label("pfs_done")
		RET()
	}
	// sum of int8
	{
		TEXT("sumInt8AVX2", NOSPLIT, "func(x *int8, n int) int32")
		Pragma("noescape")
		Doc("sumInt8AVX2 returns the sum of the n int8 values at x (n a multiple of 32); sumInt8Generic",
			"is its reference.")
		x, n := Load(Param("x"), GP64()), Load(Param("n"), GP64())
		p := newPool(false)
		m80, z, acc, v := p.get(), p.get(), p.get(), p.get()
		bcastByte(m80, 0x80)
		VPXOR(z, z, z)
		VPXOR(acc, acc, acc)
		cnt := GP64()
		MOVQ(n, cnt)
		SHRQ(U8(5), cnt)
		JZ(LabelRef("sum8_done"))
		Label("sum8_l")
		VPXOR(at(x, 0), m80, v) // x + 128 as unsigned
		VPSADBW(z, v, v)
		VPADDQ(v, acc, acc)
		ADDQ(U8(32), x)
		DECQ(cnt)
		JNZ(LabelRef("sum8_l"))
		Label("sum8_done")
		VEXTRACTI128(U8(1), acc, v.AsX())
		VPADDQ(v.AsX(), acc.AsX(), acc.AsX())
		VPSHUFD(U8(0x4E), acc.AsX(), v.AsX())
		VPADDQ(v.AsX(), acc.AsX(), acc.AsX())
		r := GP64()
		VMOVQ(acc.AsX(), r)
		SHLQ(U8(7), n)
		SUBQ(n, r)
		Store(r.As32(), ReturnIndex(0))
		VZEROUPPER()
		RET()
	}
}

// genActHelpers writes the activation quantizer's loops (act.go) on zmm (AVX-512) and on
// ymm (AVX2, for CPUs without AVX-512): the absmax with the finite check in one pass, the
// finite check alone (which finds the first bad value) and the rounding to int8; 16 values
// an iteration, n a multiple of 16 (the Go callers do the tail). Without the ymm loops AVX2
// CPUs quantized with act.go's scalar loops. On a Zen 3 core (BenchmarkPrepare's quantize,
// three runs each way): one token of K = 14336 38-68 us, against 1.6-2.0 (an i2s GEMV of
// 4096x14336 takes some 750 there); eight 414-456 against 16-20; 512 tokens of K = 4096
// 6.4-7.9 ms against 0.33-0.34.
func genActHelpers() {
	for _, z := range []bool{true, false} {
		isa, lbl := "AVX512", ""
		if !z {
			isa, lbl = "AVX2", "y"
		}
		absBitsMax(z, isa, lbl)
		nonFinite(z, isa, lbl)
		quantizeF32(z, isa, lbl)
	}
}

// actLoop emits the loop over n's blocks of 16 values (n a multiple of 16) around body,
// which takes the block at x, then moves x on by 64 bytes and by16 (if not nil: an index,
// or a pointer to bytes) by 16; the loop is labelled lbl. It jumps to done when n is 0.
func actLoop(lbl string, x, n, by16 Register, done string, body func()) {
	SHRQ(U8(4), n)
	JZ(LabelRef(done))
	Label(lbl)
	body()
	ADDQ(U8(64), x)
	if by16 != nil {
		ADDQ(U8(16), by16)
	}
	DECQ(n)
	JNZ(LabelRef(lbl))
}

// absBitsMax writes absBitsMax<isa>(x *float32, n int) uint32: the largest of n values'
// bits with the sign bits cleared (n a multiple of 16), compared as unsigned integers, so a
// NaN or an infinity is the largest (the finite check and the absmax of act.go in one pass).
// On ymm two accumulators take the 16 values' halves.
func absBitsMax(z bool, isa, lbl string) {
	name := "absBitsMax" + isa
	header(name, NOSPLIT, "func(x *float32, n int) uint32", name+" returns the largest of the n values' bits with the sign cleared (n a multiple",
		"of 16): max |x| as bits where every value is finite, 0x7f800000 or more where one is not,",
		"in one pass; absMaxFinite is its reference.")
	x, n := Load(Param("x"), GP64()), Load(Param("n"), GP64())
	p := newPool(z)
	m, acc, v := p.get(), p.get(), p.get()
	bcastDword(m, 0x7fffffff)
	done := "absbits" + lbl + "_done"
	if z {
		VPXORD(acc, acc, acc)
		actLoop("absbits_l", x, n, nil, done, func() {
			VPANDD(at(x, 0), m, v)
			VPMAXUD(v, acc, acc)
		})
		Label(done)
		VEXTRACTI64X4(U8(1), acc, v.AsY())
		VPMAXUD(v.AsY(), acc.AsY(), acc.AsY())
	} else {
		acc2, v2 := p.get(), p.get()
		VPXOR(acc, acc, acc)
		VPXOR(acc2, acc2, acc2)
		actLoop("absbitsy_l", x, n, nil, done, func() {
			VPAND(at(x, 0), m, v)
			VPAND(at(x, 32), m, v2)
			VPMAXUD(v, acc, acc)
			VPMAXUD(v2, acc2, acc2)
		})
		Label(done)
		VPMAXUD(acc2, acc, acc)
	}
	VEXTRACTI128(U8(1), acc.AsY(), v.AsX())
	VPMAXUD(v.AsX(), acc.AsX(), acc.AsX())
	for _, sh := range []uint8{0x4E, 0xB1} {
		VPSHUFD(U8(sh), acc.AsX(), v.AsX())
		VPMAXUD(v.AsX(), acc.AsX(), acc.AsX())
	}
	r := GP32()
	VMOVD(acc.AsX(), r)
	Store(r, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// nonFinite writes nonFiniteF32<isa>(x *float32, n int) int.
func nonFinite(z bool, isa, lbl string) {
	name := "nonFiniteF32" + isa
	header(name, NOSPLIT, "func(x *float32, n int) int", name+" returns the start of the first block of 16 values holding a NaN or an",
		"infinity, or -1 (n a multiple of 16); the finite check of QuantizeActs is its reference.")
	x, n := Load(Param("x"), GP64()), Load(Param("n"), GP64())
	p := newPool(z)
	e, v := p.get(), p.get()
	bcastDword(e, 0x7f800000) // all exponent bits set: a NaN or an infinity
	i := GP64()
	XORQ(i, i)
	none, found := "nonfin"+lbl+"_none", "nonfin"+lbl+"_found"
	actLoop("nonfin"+lbl+"_l", x, n, i, none, func() {
		if z {
			VPANDD(at(x, 0), e, v)
			VPCMPEQD(e, v, K1)
			KORTESTW(K1, K1)
		} else {
			v2 := p.get()
			VPAND(at(x, 0), e, v)
			VPAND(at(x, 32), e, v2)
			VPCMPEQD(e, v, v)
			VPCMPEQD(e, v2, v2)
			VPOR(v2, v, v)
			VPTEST(v, v)
			p.put(v2)
		}
		JNZ(LabelRef(found))
	})
	Label(none)
	MOVQ(I32(-1), i)
	Label(found)
	Store(i, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// quantizeF32 writes quantizeF32<isa>(x *float32, n int, xs float32, dst *int8): vcvtps2dq
// rounds half to even (MXCSR's default); vpmovsdb, or on ymm the saturating packs, clamp.
func quantizeF32(z bool, isa, lbl string) {
	name := "quantizeF32" + isa
	header(name, NOSPLIT, "func(x *float32, n int, xs float32, dst *int8)", name+" writes clamp(roundHalfEven(x[i]*xs), -128, 127) for n values (n a multiple",
		"of 16); QuantizeAct is its reference.")
	x, n, d := Load(Param("x"), GP64()), Load(Param("n"), GP64()), Load(Param("dst"), GP64())
	p := newPool(z)
	s, v := p.get(), p.get()
	xsv := Load(Param("xs"), XMM())
	VBROADCASTSS(xsv, s)
	done := "quant" + lbl + "_done"
	actLoop("quant"+lbl+"_l", x, n, d, done, func() {
		if z {
			VMULPS(at(x, 0), s, v)
			VCVTPS2DQ(v, v)
			VPMOVSDB(v, at(d, 0))
		} else {
			v2 := p.get()
			VMULPS(at(x, 0), s, v)
			VMULPS(at(x, 32), s, v2)
			VCVTPS2DQ(v, v)
			VCVTPS2DQ(v2, v2)
			VPACKSSDW(v2, v, v)                   // words 0-3, 8-11 | 4-7, 12-15
			VPERMQ(U8(0xD8), v, v)                // words 0-15 in order
			VEXTRACTI128(U8(1), v, v2.AsX())      // words 8-15
			VPACKSSWB(v2.AsX(), v.AsX(), v.AsX()) // bytes 0-15
			VMOVDQU(v.AsX(), at(d, 0))
			p.put(v2)
		}
	})
	Label(done)
	VZEROUPPER()
	RET()
}

// genBF16Conv writes the engine's conversions of activations and outputs between bfloat16
// (the wire's dtype) and float32, 16 values an iteration (n a multiple of 16; the Go callers
// do the tail), on zmm and on ymm: widening is a shift; narrowing rounds to nearest even
// with integer adds, as BF16 does (vcvtneps2bf16 would flush denormal inputs to zero), and
// a NaN becomes its top half with the quiet bit set.
func genBF16Conv() {
	for _, z := range []bool{true, false} {
		isa := "AVX2"
		if z {
			isa = "AVX512"
		}
		{
			name := "bf16ToF32" + isa
			TEXT(name, NOSPLIT, "func(x *byte, n int, dst *float32)")
			Pragma("noescape")
			Doc(name+" widens the n bfloat16 values at x (little-endian) to float32 at dst (n a multiple of",
				"16); decodeBF16Generic is its reference.")
			x, n, d := Load(Param("x"), GP64()), Load(Param("n"), GP64()), Load(Param("dst"), GP64())
			p := newPool(z)
			v, u := p.get(), p.get()
			SHRQ(U8(4), n)
			JZ(LabelRef(name + "_done"))
			Label(name + "_l")
			if z {
				VPMOVZXWD(at(x, 0), v)
				VPSLLD(U8(16), v, v)
				VMOVDQU32(v, at(d, 0))
			} else {
				VPMOVZXWD(at(x, 0), v)
				VPMOVZXWD(at(x, 16), u)
				VPSLLD(U8(16), v, v)
				VPSLLD(U8(16), u, u)
				VMOVDQU(v, at(d, 0))
				VMOVDQU(u, at(d, 32))
			}
			ADDQ(U8(32), x)
			ADDQ(U8(64), d)
			DECQ(n)
			JNZ(LabelRef(name + "_l"))
			Label(name + "_done")
			VZEROUPPER()
			RET()
		}
		{
			name := "f32ToBF16" + isa
			TEXT(name, NOSPLIT, "func(x *float32, n int, dst *byte)")
			Pragma("noescape")
			Doc(name+" rounds the n float32 values at x to bfloat16 at dst (little-endian; n a multiple of",
				"16), to nearest even, a NaN quieted; BF16 is its reference.")
			x, n, d := Load(Param("x"), GP64()), Load(Param("n"), GP64()), Load(Param("dst"), GP64())
			p := newPool(z)
			one, half, abs, inf, quiet := p.get(), p.get(), p.get(), p.get(), p.get()
			bcastDword(one, 1)
			bcastDword(half, 0x7fff)
			bcastDword(abs, 0x7fffffff)
			bcastDword(inf, 0x7f800000)
			bcastDword(quiet, 0x7fc0)
			b, t, r, m := p.get(), p.get(), p.get(), p.get()
			// round sets r to the rounded top halves of the 32-bit lanes at x+off (NaN lanes: the
			// top half | 0x7fc0), in the low words of its dwords.
			round := func(off int) {
				if z {
					VMOVDQU32(at(x, off), b)
				} else {
					VMOVDQU(at(x, off), b)
				}
				VPSRLD(U8(16), b, t)
				VPADDD(half, b, r)
				if z {
					VPANDD(one, t, m)
				} else {
					VPAND(one, t, m)
				}
				VPADDD(m, r, r)
				VPSRLD(U8(16), r, r)
				if z {
					VPANDD(abs, b, m)
					VPCMPGTD(inf, m, K1) // |b| > inf: a NaN
					VPORD(quiet, t, K1, r)
				} else {
					VPAND(abs, b, m)
					VPCMPGTD(inf, m, m)
					VPOR(quiet, t, t)
					VPBLENDVB(m, t, r, r)
				}
			}
			SHRQ(U8(4), n)
			JZ(LabelRef(name + "_done"))
			Label(name + "_l")
			if z {
				round(0)
				VPMOVDW(r, at(d, 0))
			} else {
				lo := p.get()
				round(0)
				VMOVDQA(r, lo)
				round(32)
				VPACKUSDW(r, lo, r) // per lane: four words of lo, four of r
				VPERMQ(U8(0xD8), r, r)
				VMOVDQU(r, at(d, 0))
				p.put(lo)
			}
			ADDQ(U8(64), x)
			ADDQ(U8(32), d)
			DECQ(n)
			JNZ(LabelRef(name + "_l"))
			Label(name + "_done")
			VZEROUPPER()
			RET()
		}
	}
}

// genReadStreams writes the second read loop (ReadLoops' "streams"): the buffer as four
// streams, its quarters, 256 bytes of each an iteration, no software prefetch. On a
// 2-vCPU Xeon guest with a 480 MiB L3 it read DRAM at 17.0 GB/s with one thread and 34.2
// with two where readBytes's one prefetched stream read 14.8 and 30.1 (medians of nine
// interleaved rounds of 1 GiB; one, two and eight streams, one or four lines of each an
// iteration and with or without the two-level prefetch all read 15.7-17.1 and 32.0-34.5),
// and GEMV kernels out-read readBytes there too (bf16 by up to 20%). With readBytes's L2
// prefetch 4 KiB ahead instead of 8 (i2sFar), the distance that sped up the i2s and int8
// kernels there, readBytes read 18.5-18.6 and 36.5-36.8 GB/s where the streams read
// 17.8 and 34.1-34.7 (two runs of bitd bench's roofline), and the int8 GEMV read 103-105%
// of it where it read 106-108% of the streams'.
func genReadStreams() {
	for _, z := range []bool{true, false} {
		name := "readStreamsAVX2"
		if z {
			name = "readStreamsAVX512"
		}
		pp, n, acc := readLoop(name, z, name+" reads n bytes at p (n a multiple of 1024) as four streams, its quarters, and",
			"returns readBytes's checksum of them; readBytesGeneric is its reference.")
		q := GP64() // a quarter's bytes
		MOVQ(n, q)
		SHRQ(U8(2), q)
		ptr := []Register{pp}
		for s := 1; s < 4; s++ {
			r := GP64()
			LEAQ(idx(ptr[s-1], q, 1, 0), r)
			ptr = append(ptr, r)
		}
		SHRQ(U8(8), q) // iterations
		Label(name + "_loop")
		for s := range ptr {
			for i := 0; i < 4; i++ {
				if z {
					VPXORQ(at(ptr[s], 64*i), acc[i], acc[i])
				} else {
					VPXOR(at(ptr[s], 32*i), acc[i], acc[i])
					VPXOR(at(ptr[s], 128+32*i), acc[i], acc[i])
				}
			}
		}
		for _, r := range ptr {
			ADDQ(U32(256), r)
		}
		DECQ(q)
		JNZ(LabelRef(name + "_loop"))
		foldChecksum(z, acc)
	}
}

// readLoop begins the read loop name (func(p *byte, n int) uint64) with its doc: the
// pointer and byte count loaded, four zeroed accumulators (zmm, or ymm).
func readLoop(name string, z bool, doc ...string) (pp, n GPVirtual, acc []VecPhysical) {
	TEXT(name, NOSPLIT, "func(p *byte, n int) uint64")
	Pragma("noescape")
	Doc(doc...)
	pp, n = Load(Param("p"), GP64()).(GPVirtual), Load(Param("n"), GP64()).(GPVirtual)
	acc = newPool(z).getn(4)
	for _, r := range acc {
		VPXOR(r.AsY(), r.AsY(), r.AsY())
	}
	return pp, n, acc
}

// foldChecksum xors the four accumulators of a read loop down to 64 bits, returns them
// and ends the function.
func foldChecksum(z bool, acc []VecPhysical) {
	if z {
		VPXORQ(acc[1], acc[0], acc[0])
		VPXORQ(acc[3], acc[2], acc[2])
		VPXORQ(acc[2], acc[0], acc[0])
		VEXTRACTI64X4(U8(1), acc[0], acc[1].AsY())
		VPXOR(acc[1].AsY(), acc[0].AsY(), acc[0].AsY())
	} else {
		VPXOR(acc[1], acc[0], acc[0])
		VPXOR(acc[3], acc[2], acc[2])
		VPXOR(acc[2], acc[0], acc[0])
	}
	VEXTRACTI128(U8(1), acc[0].AsY(), acc[1].AsX())
	VPXOR(acc[1].AsX(), acc[0].AsX(), acc[0].AsX())
	r := GP64()
	VMOVQ(acc[0].AsX(), r)
	Store(r, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// actStream writes name, a func(x *int8, n int, dst *byte) over the n activations at x in
// steps of step (a power of two; n a multiple of it): setup (if any) once, then step once
// per step, which advances x and d itself.
func actStream(name string, step int, setup func(), body func(x, d Register), doc ...string) {
	TEXT(name, NOSPLIT, "func(x *int8, n int, dst *byte)")
	Pragma("noescape")
	Doc(doc...)
	x, n, d := Load(Param("x"), GP64()), Load(Param("n"), GP64()), Load(Param("dst"), GP64())
	if setup != nil {
		setup()
	}
	SHRQ(U8(bits.TrailingZeros(uint(step))), n)
	JZ(LabelRef(name + "_done"))
	Label(name + "_step")
	body(x, d)
	DECQ(n)
	JNZ(LabelRef(name + "_step"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}
