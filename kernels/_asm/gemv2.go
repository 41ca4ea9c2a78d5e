package main

import (
	"fmt"
	"slices"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The AVX2 GEMV kernels (ymm 0-15 only) and their AVX-VNNI twins: the same code with each
// vpmaddubsw + vpmaddwd + vpaddd replaced by one VEX vpdpbusd (AVX-VNNI has no masks and
// no EVEX, so everything else is AVX2), except that the one-token i2s and int2 twins
// keep more accumulators, since one vpdpbusd after another on the same accumulator bounds
// them by its latency (see each). For int8 with AVX-VNNI-INT8, vpdpbssd multiplies the
// signed weights directly.

var (
	wOnes  Mem // 16 words of 1 (vpmaddwd reduction)
	m0fY   Mem // 32 bytes 0x0f
	m1fY   Mem // 16 words 31
	m3Y    Mem // 32 bytes 3 (codesY's first row)
	m80Y   Mem // 32 bytes 0x80
	bitsY  Mem // 8 x 32 bytes: 1, 2, 4, ..., 128
	codesY Mem // 4 x 32 bytes: 0x03, 0x0C, 0x30, 0xC0 (codeMasksY)
	rowsY  Mem // rowBitsTable (fuseEpi's vmaskmovps masks)
)

// dotY adds the dot products of unsigned bytes u and signed bytes s (4 per dword) to acc:
// with vnni one vpdpbusd, else vpmaddubsw (pairs to int16; u*s pairs must not saturate),
// vpmaddwd with ones, vpaddd, using tmp.
func dotY(vnni bool, acc, u, s, tmp VecPhysical) {
	if vnni {
		VPDPBUSD(s, u, acc)
		return
	}
	VPMADDUBSW(s, u, tmp)
	VPMADDWD(wOnes, tmp, tmp)
	VPADDD(tmp, acc, acc)
}

func genGemvAVX2() {
	var ones, m0f, m80, bits, codes []byte
	for i := 0; i < 32; i++ {
		ones = append(ones, byte(1-i%2))
		m0f, m80 = append(m0f, 0x0f), append(m80, 0x80)
	}
	for j := 0; j < 8; j++ {
		for i := 0; i < 32; i++ {
			bits = append(bits, 1<<j)
		}
	}
	for j := 0; j < 4; j++ {
		for i := 0; i < 32; i++ {
			codes = append(codes, 3<<(2*j))
		}
	}
	codesY = table("codesY", codes)
	wOnes, m0fY, m3Y, m80Y, bitsY = table("wOnesY", ones), table("m0fY", m0f), codesY, table("m80Y", m80), table("bitsY", bits)
	var m1f []byte
	for i := 0; i < 16; i++ {
		m1f = append(m1f, 31, 0)
	}
	m1fY = table("m1fY", m1f)
	rowsY = rowBitsTable("rowsY")

	for _, vnni := range []bool{false, true} {
		isa := "AVX2"
		if vnni {
			isa = "AVXVNNI"
		}
		for T := 1; T <= 2; T++ {
			gemvI2SY(T, isa, vnni)
			if vnni || T == 2 {
				gemvInt2Y(T, isa, vnni, false)
			} else {
				gemvInt2Y1()
				gemvInt2Y1Two()
			}
			if !vnni && T == 1 {
				withL1(func() { gemvInt8Y(T, isa, vnni, false) })
			} else if vnni {
				gemvInt8Y(T, isa, vnni, false)
			}
		}
	}
	for T := 3; T <= 4; T++ {
		gemvI2SYMany(T)
	}
	gemvInt2Y2Seq()
	for T := 1; T <= 2; T++ {
		gemvInt2Y(T, "AVXVNNI", true, true)
	}
	for T := 1; T <= 2; T++ {
		gemvInt8Y(T, "VNNIINT8AVXVNNI", true, true)
	}
	for T := 1; T <= 2; T++ {
		lutYFn(T, false)
		lutYFn(T, true)
	}
}

// gemvI2SY: one row quad at a time; each row's 32-byte piece gives 4 runs of codes
// (shift, mask) against the 4 runs of activations; the 8 lanes of each row are reduced per
// segment (vphaddd) and 4 rows stored.
func gemvI2SY(T int, isa string, vnni bool) {
	if vnni && T == 1 {
		gemvI2SY1(isa)
		return
	}
	if T == 1 {
		withL1(gemvI2SY1Plain)
		gemvI2SY1Two()
		return
	}
	name := gemvName("I2S", T, isa)
	a := fn(name, gemvDoc(name, "gemvI2SGeneric", T))
	p := newPool(false)
	xs := tokenPtrs(a, T, gX, gXStride)
	acc := make([][4]VecPhysical, T) // [token][row of the quad]
	var all []VecPhysical
	for t := range acc {
		copy(acc[t][:], p.getn(4))
		all = append(all, acc[t][:]...)
	}
	m3 := p.get()
	VMOVDQU(m3Y, m3)
	var wv []VecPhysical
	var c, tmp VecPhysical
	var xv, s16 []VecPhysical // s16[t]: token t's int16 pair sums of the row's four runs
	if vnni {
		wv = p.getn(4)
		c = p.get()
		xv = p.getn(T)
	} else {
		wv = p.getn(1)
		c, tmp = p.get(), p.get()
		s16 = p.getn(T)
	}
	kx := GP64()
	i2sQuads(name, a, T, false, func() { zeroAll(all...) }, func(w Register) {
		class := func(src VecPhysical, s int) {
			if s < 3 {
				VPSRLW(U8(6-2*s), src, c)
				VPAND(m3, c, c)
			} else {
				VPAND(m3, src, c)
			}
		}
		if vnni {
			for r := 0; r < 4; r++ {
				VMOVDQU(at(w, 32*r), wv[r])
			}
			for s := 0; s < 4; s++ {
				for t := range acc {
					VMOVDQU(idx(xs[t], kx, 1, 32*s), xv[t])
				}
				for r := 0; r < 4; r++ {
					class(wv[r], s)
					for t := range acc {
						VPDPBUSD(xv[t], c, acc[t][r])
					}
				}
			}
		} else {
			// each run's codes are taken once for every token
			for r := 0; r < 4; r++ {
				VMOVDQU(at(w, 32*r), wv[0])
				for s := 0; s < 4; s++ {
					class(wv[0], s)
					for t := range acc {
						if s == 0 {
							VPMADDUBSW(idx(xs[t], kx, 1, 32*s), c, s16[t])
						} else {
							VPMADDUBSW(idx(xs[t], kx, 1, 32*s), c, tmp)
							VPADDW(tmp, s16[t], s16[t])
						}
					}
				}
				for t := range acc {
					VPMADDWD(wOnes, s16[t], s16[t])
					VPADDD(s16[t], acc[t][r], acc[t][r])
				}
			}
		}
	}, func() { XORQ(kx, kx) }, func() { SUBQ(I8(-128), kx) }, func(sums Register) {
		for t := range acc {
			quadRowSumsY(acc[t][:], at(sums, 128*t))
		}
	})
}

// i2sY1Flush is the most blocks gemvI2SY1Plain adds up in int16: its times-4 sums gain at
// most 2 x 2 x 8 x 128 = 4096 a block.
const i2sY1Flush = 7

// gemvI2SY1Plain (AVX2, one token): gemvI2SY's row quad, each row's four runs taken with
// one shift and four ands: w & 0x03 and (w >> 4) & 0x03 are runs 3 and 1 as they are, w &
// 0x0C and (w >> 4) & 0x0C runs 2 and 0 times 4 (vpsrlw moves a word's high byte into the
// low byte's high bits, which the masks drop; vpmaddubsw's pairs stay within 2 x 8 x 128).
// Each row adds its vpmaddubsw pairs into two int16 sums, times 1 and times 4, for up to
// i2sY1Flush blocks; then the times-4 sums are divided back (vpsraw: exact, every product
// being a multiple of 4), added to the others and widened into the row's int32 sums by
// vpmaddwd. Per row and block 13 vector operations where three shifts, a vpmaddwd and a
// vpaddd a block made 16. On the Zen 4 guest with AVX-512 switched off, one thread, against
// that kernel: from cache (2560x2560, 4096x14336) 28.7-29.3 GB/s against 24.4-24.5 (two
// runs of 7 rounds each way); from DRAM 0.84-0.92 of the time on 2560x2560, 0.93 on
// 14336x4096 and 0.95-0.97 on 4096x14336 (three runs of 9 rounds each way). With the two
// masks as memory operands, to keep the shifted word in a register of its own, it ran
// 1.09-1.15x slower instead: 36 loads a block then bound it, not its 52 vector operations.
func gemvI2SY1Plain() {
	name := l1Name(gemvName("I2S", 1, "AVX2"))
	a := fn(name, gemvDoc(name, "gemvI2SGeneric", 1))
	r, acc := newI2SY1Regs(a, 4) // acc: per row, int32 sums
	i2sQuadSegs(name, a, 1, func(_, _ Register) { XORQ(r.kx, r.kx) }, func(wp, cnt, sums Register) {
		zeroAll(acc...)
		Label(name + "_chunk")
		n := takeChunk(cnt, i2sY1Flush)
		r.blocks(name+"_blk", wp, n, i2sFar)
		for i := range acc {
			r.fold(i, acc[i], acc[i])
		}
		TESTQ(cnt, cnt)
		JNZ(LabelRef(name + "_chunk"))
		quadRowSumsY(acc, at(sums, 0))
	})
}

// i2sY1Regs are the registers of gemvI2SY1Plain's blocks: per row the int16 sums times 1
// and times 4, the token's activations at xs[0] + kx, the masks 0x03 and 0x0C.
type i2sY1Regs struct {
	p            *pool
	xs           []GPVirtual
	kx           GPVirtual
	sa, sb       []VecPhysical
	w, c, m3, m4 VecPhysical
}

// newI2SY1Regs loads the token pointer and the masks; first is a number of vector registers
// to take from the pool before the rest, for the caller.
func newI2SY1Regs(a Register, first int) (*i2sY1Regs, []VecPhysical) {
	p := newPool(false)
	r := &i2sY1Regs{p: p, xs: tokenPtrs(a, 1, gX, gXStride)}
	own := p.getn(first)
	r.sa, r.sb = p.getn(4), p.getn(4)
	r.w, r.c, r.m3, r.m4 = p.get(), p.get(), p.get(), p.get()
	VMOVDQU(m3Y, r.m3)
	VMOVDQU(codesY.Offset(32), r.m4) // 0x0C bytes
	r.kx = GP64()
	return r, own
}

// blocks clears the int16 sums and adds n (a register, >= 1, kept) blocks from wp on (wp
// and kx move past them) in a loop labelled label, prefetching the weights far bytes ahead
// into L2 (prefetchAheadBy).
func (r *i2sY1Regs) blocks(label string, wp, n Register, far int) {
	zeroAll(r.sa...)
	zeroAll(r.sb...)
	m := GP64()
	MOVQ(n, m)
	Label(label)
	prefetchAheadBy(wp, far, 0)
	prefetchAheadBy(wp, far, 64)
	for row := 0; row < 4; row++ {
		VMOVDQU(at(wp, 32*row), r.w)
		for i, q := range []struct {
			mask VecPhysical
			run  int
			sum  VecPhysical
		}{{r.m3, 3, r.sa[row]}, {r.m4, 2, r.sb[row]}, {r.m3, 1, r.sa[row]}, {r.m4, 0, r.sb[row]}} {
			if i == 2 {
				VPSRLW(U8(4), r.w, r.w)
			}
			VPAND(q.mask, r.w, r.c)
			VPMADDUBSW(idx(r.xs[0], r.kx, 1, 32*q.run), r.c, r.c)
			VPADDW(r.c, q.sum, q.sum)
		}
	}
	SUBQ(I8(-128), wp)
	SUBQ(I8(-128), r.kx)
	DECQ(m)
	JNZ(LabelRef(label))
}

// fold adds row's int16 sums (the times-4 ones divided back) as int32 to acc (a register
// or the stack) and leaves the total in dst.
func (r *i2sY1Regs) fold(row int, acc Op, dst VecPhysical) {
	VPSRAW(U8(2), r.sb[row], r.sb[row])
	VPADDW(r.sb[row], r.sa[row], r.sa[row])
	VPMADDWD(wOnes, r.sa[row], r.sa[row])
	if _, ok := acc.(Mem); ok { // (a memory operand goes first)
		VPADDD(acc, r.sa[row], dst)
	} else {
		VPADDD(r.sa[row], acc, dst)
	}
}

// gemvI2SY1Two (AVX2, one token, zen3) is gemvI2SY1Plain over two row blocks at once, the
// second gemvArgs.W2Off bytes after the first (its sums Sums2Off bytes after the first's):
// each chunk of up to i2sY1Flush blocks of a quad runs on the first row block's stream and
// then on the second's, so that the core reads two streams far apart (the driver pairs row
// blocks half the layer apart: runTwo, kernels.Paired). The int32 sums live on the stack. On the Zen 3
// guest a C loop of the block over 1 GiB read 11-12% faster with two streams 256 KiB to 7
// MiB apart than with one (alternating every block or every 7; every 28, 3%), and in one
// process this kernel read 77-90% of the roofline at one thread where the one-stream
// kernel read 74-80 (see kernels.TuningZen3, and twoMinDist for nearer streams).
//
// It prefetches on two levels as the default's kernels do, into L2 prefetchFar (8 KiB)
// ahead and into L1 prefetchNear (2 KiB), not into L1 only as zen3's one-stream kernel
// (gemvI2ST1AVX2L1). Against two levels with i2sFar (4 KiB) into L2, in one process (11
// rounds, 4096x14336, 14336x4096, 2560x2560, one and two threads; the default tuning of a
// build taking each variant): 8 KiB into L2 at two threads 1.00-1.14x (all nine above
// 1.00, median 1.03; three runs), at one 0.96-1.05x (median 1.00); prefetcht0 alone 8 KiB
// ahead 0.96-0.99x and 0.98-1.08x (two runs); prefetchnta 2 KiB ahead 0.95-1.16x, 4 KiB
// 0.97-1.05x; the hardware's prefetchers alone 0.85-0.91x.
func gemvI2SY1Two() {
	name := "gemvI2STwoT1AVX2"
	a := fn(name, gemvDoc(name, "gemvI2SGeneric", 1))
	frame := AllocLocal(2 * 4 * 32)
	acc := func(s, row int) Mem { return frame.Offset(32 * (4*s + row)) }
	r, t := newI2SY1Regs(a, 4) // t: scratch
	i2sQuadSegs(name, a, 1, func(_, _ Register) { XORQ(r.kx, r.kx) }, func(wp, cnt, sums Register) {
		VPXOR(t[0], t[0], t[0])
		for s := 0; s < 2; s++ {
			for row := 0; row < 4; row++ {
				VMOVDQU(t[0], acc(s, row))
			}
		}
		Label(name + "_chunk")
		n := takeChunk(cnt, i2sY1Flush)
		back := GP64()
		MOVQ(n, back)
		SHLQ(U8(7), back) // the chunk's bytes
		for s := 0; s < 2; s++ {
			r.blocks(fmt.Sprintf("%s_blk%d", name, s), wp, n, prefetchFar)
			for row := 0; row < 4; row++ {
				r.fold(row, acc(s, row), t[row])
				VMOVDQU(t[row], acc(s, row))
			}
			if s == 0 { // the second stream's chunk, on the same activations
				SUBQ(back, r.kx)
				SUBQ(back, wp)
				ADDQ(at(a, gW2Off), wp)
			} else { // back to the first stream, past its chunk
				SUBQ(at(a, gW2Off), wp)
			}
		}
		TESTQ(cnt, cnt)
		JNZ(LabelRef(name + "_chunk"))
		off := GP64()
		MOVQ(at(a, gSums2Off), off)
		for s, dst := range []Mem{at(sums, 0), idx(sums, off, 1, 0)} {
			for row := 0; row < 4; row++ {
				VMOVDQU(acc(s, row), t[row])
			}
			quadRowSumsY(t, dst)
		}
	})
}

// vnniSets is the number of accumulator sets of the int2 and int1 ymm kernels: two for the
// one-token AVX-VNNI twins (one vpdpbusd after another on one set bounded them by its
// latency), one otherwise (vpmaddubsw's sums pass through other registers first, and more
// tokens interleave their own chains).
func vnniSets(T int, vnni bool) int {
	if vnni && T == 1 {
		return 2
	}
	return 1
}

// gemvI2SY1 (AVX-VNNI, one token): a row quad's 128-byte blocks in two passes, rows 0-1
// (each block's first 64 bytes) and then rows 2-3, so that each row's four runs have
// accumulators of their own (a quad's 16 do not fit the 16 ymm registers beside the masks):
// the codes are taken in place (w & 0x03, 0x0C, 0x30, 0xC0 for runs 3, 2, 1, 0: the code
// times 1, 4, 16, 64, at most 192, still a u8) and each sum is divided back by an arithmetic
// shift before the reduction (exact: every product is a multiple of the factor; |sum| <= K/32
// x 192 x 128 < 2^31 for K <= MaxDim). Per block 32 vector operations and 8 activation loads,
// where one pass over the quad with two accumulators per row took 36 (a shift per row) and 16
// (the activations reloaded per row): 10-14% less time on cache-resident weights on an
// Emerald Rapids core, 4-8% from DRAM at one thread. The first pass prefetches both lines of
// each block into L1, so the second reads them there (from L2 where a segment outgrows L1);
// the L2 prefetch runs on a cursor of its own, one line per block in either pass, so the
// stream goes on through both.
func gemvI2SY1(isa string) {
	name := gemvName("I2S", 1, isa)
	a := fn(name, gemvDoc(name, "gemvI2SGeneric", 1))
	p := newPool(false)
	xs := tokenPtrs(a, 1, gX, gXStride)
	acc := [2][]VecPhysical{p.getn(4), p.getn(4)} // [row of the pair][mask j]: run 3-j
	m := codeMasksY(p)                            // 0x03 << 2j in every byte
	wv, x, c := p.getn(2), p.get(), p.get()
	kx, pf, n := GP64(), GP64(), GP64()
	// The cursor leads the first pass by prefetchFar at its end: by half a segment more at
	// its start, as it moves half as fast as the pass there (and catches up in the second).
	MOVQ(at(a, gSegSteps), pf)
	SHLQ(U8(6), pf)
	ADDQ(at(a, gW), pf)
	ADDQ(U32(prefetchFar), pf)
	i2sQuadSegs(name, a, 1, func(w, quad Register) { XORQ(kx, kx) }, func(w, cnt, sums Register) {
		for h := 0; h < 2; h++ { // pass h: rows 2h and 2h+1, bytes 64h to 64h+63 of each block
			MOVQ(cnt, n)
			zeroAll(append(acc[0], acc[1]...)...)
			pass := fmt.Sprintf("%s_pass%d", name, h)
			Label(pass)
			PREFETCHT1(at(pf, 0))
			if h == 0 {
				PREFETCHT0(at(w, prefetchNear))
			}
			PREFETCHT0(at(w, prefetchNear+64))
			VMOVDQU(at(w, 64*h), wv[0])
			VMOVDQU(at(w, 64*h+32), wv[1])
			for j := 0; j < 4; j++ {
				VMOVDQU(idx(xs[0], kx, 1, 32*(3-j)), x)
				for r := 0; r < 2; r++ {
					VPAND(m[j], wv[r], c)
					VPDPBUSD(x, c, acc[r][j])
				}
			}
			ADDQ(U8(64), pf)
			SUBQ(I8(-128), w)
			SUBQ(I8(-128), kx)
			DECQ(n)
			JNZ(LabelRef(pass))
			for r := 0; r < 2; r++ {
				for j := 1; j < 4; j++ {
					VPSRAD(U8(2*j), acc[r][j], acc[r][j])
					VPADDD(acc[r][j], acc[r][0], acc[r][0])
				}
			}
			pairRowSumsY(acc[0][0], acc[1][0], c, at(sums, 8*h))
			if h == 0 { // back to the segment's start for rows 2-3
				SHLQ(U8(7), cnt)
				SUBQ(cnt, w)
				SUBQ(cnt, kx)
				SHRQ(U8(7), cnt)
			}
		}
	})
}

// pairRowSumsY reduces the 8 lanes of two rows' accumulators r0 and r1 and stores the two
// sums at dst (8 bytes; clobbers r0 and t).
func pairRowSumsY(r0, r1, t VecPhysical, dst Mem) {
	VPHADDD(r1, r0, r0)
	VEXTRACTI128(U8(1), r0, t.AsX())
	VPADDD(t.AsX(), r0.AsX(), r0.AsX())
	VPHADDD(r0.AsX(), r0.AsX(), r0.AsX())
	VMOVQ(r0.AsX(), dst)
}

// quadRowSumsY reduces the 8 lanes of each of a row quad's accumulators r[0..3] and stores
// the four rows' sums at dst (clobbers r).
func quadRowSumsY(r []VecPhysical, dst Mem) {
	VPHADDD(r[1], r[0], r[0])
	VPHADDD(r[3], r[2], r[2])
	VPHADDD(r[2], r[0], r[0])
	VEXTRACTI128(U8(1), r[0], r[1].AsX())
	VPADDD(r[1].AsX(), r[0].AsX(), r[0].AsX())
	VMOVDQU(r[0].AsX(), dst)
}

// gemvInt2Y: one 32-byte unit (4 inputs x 32 rows) per step; nibble tables (tabInt2) give
// the four row groups' dwords, multiplied with a broadcast dword of activations. With AVX-VNNI
// and one token, steps go in pairs into two sets of accumulators (one set made vpdpbusd's
// latency the bound: one per accumulator per step).
//
// seq (AVX-VNNI, gemvInt2Seq*: code books of consecutive levels, where u is the code itself):
// no tables. Row group j's codes sit in bits 2j-2j+1 of each byte; a mask takes them in place
// (w & 0x03 << 2j: the code times 4^j, at most 192, still a u8) and the store divides each
// group's sums back by an arithmetic shift (exact, every product being a multiple of the
// factor; |sum| <= 65536 x 192 x 128 < 2^31): per unit 4 ands where the tables took a shift,
// 2 ands, 4 vpshufb and a move. The masks live in registers with one token and are memory
// operands with two. Against the table kernels on an Emerald Rapids core
// (BITD_DISABLE_AVX512=1, paired rounds on the same weights): one token 0.75 of the time
// cache-resident (1024x2560, 256x14336), 0.93-0.96 from DRAM on the 8B shapes at one and two
// threads; two tokens, whose eight chains wait on vpdpbusd's latency, 0.94-1.01
// cache-resident and 0.95-0.99 from DRAM. (vpmaddubsw's int16 pairs would saturate on the
// codes times 64, so AVX2 keeps the tables.)
func gemvInt2Y(T int, isa string, vnni, seq bool) {
	f, ref := "Int2", "gemvInt2Generic (kstep 4)"
	if seq {
		f, ref = "Int2Seq", "gemvInt2Generic (kstep 4; u = the code)"
	}
	name := gemvName(f, T, isa)
	a := fn(name, gemvDoc(name, ref, T))
	p := newPool(false)
	w, kx := ld(a, gW), GP64()
	XORQ(kx, kx)
	xs := tokenPtrs(a, T, gX, gXStride)
	sets := vnniSets(T, vnni)
	acc, all := accSets(p, T, sets) // [token][set][row group]
	free := slices.Clone(all)       // dead after the store, with the decoding's registers
	var unit func(i int)            // unit i of the step into acc[t][i]
	if seq {
		wv, v, x := p.get(), p.get(), p.getn(T)
		free = slices.Concat(free, []VecPhysical{wv, v}, x)
		mask := func(j int) Op { return codesY.Offset(32 * j) }
		if T == 1 {
			m := codeMasksY(p)
			mask = func(j int) Op { return m[j] }
		}
		unit = func(i int) {
			VMOVDQU(at(w, 32*i), wv)
			for t := range acc {
				VPBROADCASTD(idx(xs[t], kx, 1, 4*i), x[t])
			}
			for j := 0; j < 4; j++ {
				VPAND(mask(j), wv, v)
				for t := range acc {
					VPDPBUSD(x[t], v, acc[t][i][j])
				}
			}
		}
	} else {
		tab := ld(a, gTab)
		la, lb := p.get(), p.get()
		VBROADCASTI128(at(tab, 0), la)
		VBROADCASTI128(at(tab, 16), lb)
		v := p.getn(4)
		x := p.get()
		free = slices.Concat(free, v, []VecPhysical{x})
		var tmp VecPhysical
		if !vnni {
			tmp = p.get()
			free = append(free, tmp)
		}
		unit = func(i int) {
			VMOVDQU(at(w, 32*i), v[2])
			VPSRLW(U8(4), v[2], v[3])
			VPAND(m0fY, v[2], v[2])
			VPAND(m0fY, v[3], v[3])
			VPSHUFB(v[2], la, v[0])
			VPSHUFB(v[2], lb, v[1])
			VPSHUFB(v[3], lb, x)
			VPSHUFB(v[3], la, v[2])
			VMOVDQA(x, v[3])
			for t := range acc {
				VPBROADCASTD(idx(xs[t], kx, 1, 4*i), x)
				for j := 0; j < 4; j++ {
					dotY(vnni, acc[t][i][j], v[j], x, tmp)
				}
			}
		}
	}
	segLoop(name, a, sets, &fuseEpi{T: T, ymm: true, regs: free}, func() { zeroAll(all...) }, func(i int) {
		if i == 0 {
			prefetchAhead(w, 0)
		}
		unit(i)
		if i == sets-1 {
			ADDQ(U8(32*sets), w)
			ADDQ(U8(4*sets), kx)
		}
	}, func(sums Register) {
		for t := range acc {
			for j := 0; j < 4; j++ {
				r := acc[t][0][j]
				if sets == 2 {
					VPADDD(acc[t][1][j], r, r)
				}
				if seq && j > 0 {
					VPSRAD(U8(2*j), r, r)
				}
				VMOVDQU(r, at(sums, 128*t+32*j))
			}
		}
		ADDQ(U32(128*T), sums)
	})
	VZEROUPPER()
	RET()
}

// codeMasksY returns four registers of the masks 0x03 << 2j in every byte (codesY), which
// take a byte's 2-bit codes in place.
func codeMasksY(p *pool) []VecPhysical {
	m := p.getn(4)
	for j, r := range m {
		VMOVDQU(codesY.Offset(32*j), r)
	}
	return m
}

// gemvInt8Y: int8. AVX2 (int16 activations, xInt16): each 128-byte unit is widened to
// int16 and multiplied with vpmaddwd (exact, no offset); AVX-VNNI: u = w xor 0x80 with
// vpdpbusd; AVX-VNNI-INT8 (ssd): vpdpbssd on the signed weights.
func gemvInt8Y(T int, isa string, vnni, ssd bool) {
	name := l1Name(gemvName("Int8", T, isa))
	ref := "gemvInt8Generic (int16 activations)"
	if vnni {
		ref = "gemvInt8Generic (offset)"
		if ssd {
			ref = "gemvInt8Generic (signed)"
		}
	}
	a := fn(name, gemvDoc(name, ref, T))
	p := newPool(false)
	w, kx := ld(a, gW), GP64()
	XORQ(kx, kx)
	xs := tokenPtrs(a, T, gX, gXStride)
	if vnni {
		acc := make([][4]VecPhysical, T)
		var all []VecPhysical
		for t := range acc {
			copy(acc[t][:], p.getn(4))
			all = append(all, acc[t][:]...)
		}
		wv := p.getn(4)
		x, m80 := p.get(), p.get()
		VMOVDQU(m80Y, m80)
		free := slices.Concat(all, wv, []VecPhysical{x})
		segLoop(name, a, 1, &fuseEpi{T: T, ymm: true, regs: free}, func() { zeroAll(all...) }, func(int) {
			prefetchAhead(w, 0)
			prefetchAhead(w, 64)
			for g := 0; g < 4; g++ {
				if ssd {
					VMOVDQU(at(w, 32*g), wv[g])
				} else {
					VPXOR(at(w, 32*g), m80, wv[g])
				}
			}
			for t := range acc {
				VPBROADCASTD(idx(xs[t], kx, 1, 0), x)
				for g := 0; g < 4; g++ {
					VPDPBUSD(x, wv[g], acc[t][g])
				}
			}
			SUBQ(I8(-128), w)
			ADDQ(U8(4), kx)
		}, func(sums Register) {
			for t := range acc {
				for g := 0; g < 4; g++ {
					VMOVDQU(acc[t][g], at(sums, 128*t+32*g))
				}
			}
			ADDQ(U32(128*T), sums)
		})
		VZEROUPPER()
		RET()
		return
	}
	if T != 1 {
		panic(name + ": AVX2 int8 (int16 activations) has a one-token kernel only")
	}
	gemvInt8Y1Halves(name, a, p, w, kx, xs[0])
}

// int8HalvesMin is the fewest steps (4 inputs of the row block's 32 rows, 128 bytes) of a
// segment that gemvInt8Y1Halves reads as two streams; a shorter one is one stream.
const int8HalvesMin = 64

// gemvInt8Y1Halves writes the body of gemvInt8T1AVX2 (gemvInt8Y without VNNI: int16
// activations, 8 accumulators, dword 2r'+h of accumulator i = row 4i+r', inputs pair h of
// the step's four; one token, the path's gemvT): each segment of int8HalvesMin steps or more is read as two streams, its first
// half and its second (from step ceil(n/2) on), a step of each in turn into the same
// int32 sums (exact in any order), the first half's odd step last. A row block's
// segments are one contiguous stream (32 rows x K inputs, 128 bytes every 4 inputs), so
// with per-row scales each half is half a row block, 40-224 KiB on the shapes of
// `bitd bench`. Why: on an AVX2-only Zen 3 (2-vCPU EPYC guest) one demand stream reads
// DRAM slower than two, whatever the software prefetch (see floatYPair). Against the
// kernel of one stream in one process (`bitd bench` of a scratch build whose zen4 tuning
// took this one, -tuning default,zen4, 15 rounds; 4096x14336, 14336x4096, 2560x2560,
// 2560x6912): 1.12-1.16x at one thread (71-81% of the roofline to 80-87), 1.03-1.15x at
// two. (Two halves of an i2s row quad's K, streams of half a quad, 1.25-7 KiB, ran
// 0.70-0.91x there.) In the zen3 tuning's kernel (gemvInt8T1AVX2L1) both halves, and a
// short segment's one stream, prefetch into L1 only (withL1).
func gemvInt8Y1Halves(name string, a Register, p *pool, w, kx Register, xp Register) {
	acc := p.getn(8)
	wv, x, x2 := p.get(), p.get(), p.get()
	free := slices.Concat(acc, []VecPhysical{wv, x, x2})
	step := func(w, kx Register, x VecPhysical) {
		prefetchAhead(w, 0)
		prefetchAhead(w, 64)
		VPBROADCASTQ(idx(xp, kx, 2, 0), x)
		for i := 0; i < 8; i++ {
			tm := p.get()
			VPMOVSXBW(at(w, 16*i), wv)
			VPMADDWD(x, wv, tm)
			VPADDD(tm, acc[i], acc[i])
			p.put(tm)
		}
		SUBQ(I8(-128), w)
		ADDQ(U8(4), kx)
	}
	sums, nseg := ld(a, gSums), ld(a, gNSeg)
	w2, kx2, pairs, off := GP64(), GP64(), GP64(), GP64()
	Label(name + "_seg")
	cnt := segCount(a, nseg, gemvLoop)
	zeroAll(acc...)
	CMPQ(cnt, U8(int8HalvesMin))
	JAE(LabelRef(name + "_halves"))
	Label(name + "_step")
	step(w, kx, x)
	DECQ(cnt)
	JNZ(LabelRef(name + "_step"))
	JMP(LabelRef(name + "_store"))
	Label(name + "_halves")
	MOVQ(cnt, pairs)
	SHRQ(U8(1), pairs)
	MOVQ(cnt, off)
	SUBQ(pairs, off) // the first half's steps
	LEAQ(idx(kx, off, 4, 0), kx2)
	SHLQ(U8(7), off)
	LEAQ(idx(w, off, 1, 0), w2)
	Label(name + "_pair")
	step(w, kx, x)
	step(w2, kx2, x2)
	DECQ(pairs)
	JNZ(LabelRef(name + "_pair"))
	TESTQ(U32(1), cnt)
	JZ(LabelRef(name + "_even"))
	step(w, kx, x)
	Label(name + "_even")
	MOVQ(w2, w) // (the segment's end)
	MOVQ(kx2, kx)
	Label(name + "_store")
	for i := 0; i < 8; i += 2 {
		// rows 4i..4i+3 in acc i, 4i+4.. in acc i+1: pair-add -> 8 rows in order
		VPHADDD(acc[i+1], acc[i], acc[i])
		VPERMQ(U8(0xD8), acc[i], acc[i])
		VMOVDQU(acc[i], at(sums, 16*i))
	}
	ADDQ(U32(128), sums)
	(&fuseEpi{T: 1, ymm: true, regs: free}).gen(name, a, sums, nseg)
	DECQ(nseg)
	JNZ(LabelRef(name + "_seg"))
	VZEROUPPER()
	RET()
}

// lutY is the state of the AVX2 lookup-table kernels (one or two tokens): the pshufb tables
// are byte planes of the int16 sums; low and high planes are interleaved into words and
// summed in int16. tl1 keeps rows 0-7 and 16-23 in one accumulator, 8-15 and 24-31 in the
// other; tl2 rows 0-15 and 16-31 (flush's natural). With two tokens each token has its own
// tables and int16 accumulators, and the codes (and tl2's signs) are taken once for both;
// there are not enough ymm registers for two tokens' int32 sums, so flush adds them to
// the row block's sums in memory instead (one flush per 5 tl2 blocks or 32 tl1 units).
type lutY struct {
	p            *pool
	T            int
	w, pf        GPVirtual
	tabs         []GPVirtual // token t's tables
	sums         Register    // the row block's sums (two tokens: flush adds to them)
	acc16        [][2]VecPhysical
	acc32        [4]VecPhysical // one token: rows 0-7, 8-15, 16-23, 24-31
	lo, hi, l, h VecPhysical
}

func newLutY(T int) *lutY {
	s := &lutY{p: newPool(false), T: T}
	s.w, s.pf = GP64(), GP64()
	s.tabs = make([]GPVirtual, T)
	for t := range s.tabs {
		s.tabs[t] = GP64()
	}
	s.acc16 = make([][2]VecPhysical, T)
	for t := range s.acc16 {
		copy(s.acc16[t][:], s.p.getn(2))
	}
	if T == 1 {
		copy(s.acc32[:], s.p.getn(4))
	}
	s.lo, s.hi, s.l, s.h = s.p.get(), s.p.get(), s.p.get(), s.p.get()
	return s
}

// allAcc16 lists every token's int16 accumulators.
func (s *lutY) allAcc16() []VecPhysical {
	return flat2(s.acc16)
}

// nextTabs moves every token's tables on by n bytes.
func (s *lutY) nextTabs(n int) {
	for _, t := range s.tabs {
		if n < 128 {
			ADDQ(U8(n), t)
		} else {
			ADDQ(U32(n), t)
		}
	}
}

// nibbles loads 32 index bytes and splits them into low and high nibbles.
func (s *lutY) nibbles(m Mem) {
	VMOVDQU(m, s.lo)
	VPSRLW(U8(4), s.lo, s.hi)
	VPAND(m0fY, s.lo, s.lo)
	VPAND(m0fY, s.hi, s.hi)
}

// add looks up the 32 rows' int16 entries of idx in token t's planes at off (16 low bytes,
// 16 high bytes) and adds them.
func (s *lutY) add(t int, idxv VecPhysical, off int) {
	VBROADCASTI128(at(s.tabs[t], off), s.l)
	VBROADCASTI128(at(s.tabs[t], off+16), s.h)
	VPSHUFB(idxv, s.l, s.l)
	VPSHUFB(idxv, s.h, s.h)
	tmp := s.p.get()
	VPUNPCKLBW(s.h, s.l, tmp)
	VPUNPCKHBW(s.h, s.l, s.l)
	VPADDW(tmp, s.acc16[t][0], s.acc16[t][0])
	VPADDW(s.l, s.acc16[t][1], s.acc16[t][1])
	s.p.put(tmp)
}

// addSigned looks up the tl2 codes c (bytes, rows 0-7, 16-23 | 8-15, 24-31 as vpackuswb
// leaves two registers of rows 0-15 and 16-31; pshufb reads the magnitude, bits 0-3, and
// needs bit 7 clear) in token t's planes at off; unpacked, the words are rows 0-15 and 16-31
// in order, negated by vpsignw where bit 15 of the word of the same row in y[0], y[1] is
// set (a y word must be nonzero where the magnitude is) and added. Clobbers c for the last
// token only.
func (s *lutY) addSigned(t int, c VecPhysical, off int, y []VecPhysical) {
	VBROADCASTI128(at(s.tabs[t], off), s.l)
	VBROADCASTI128(at(s.tabs[t], off+16), s.h)
	VPSHUFB(c, s.l, s.l)
	VPSHUFB(c, s.h, s.h)
	d := c
	if t < s.T-1 {
		d = s.p.get()
		defer s.p.put(d)
	}
	VPUNPCKLBW(s.h, s.l, d)
	VPUNPCKHBW(s.h, s.l, s.l)
	VPSIGNW(y[0], d, d)
	VPSIGNW(y[1], s.l, s.l)
	VPADDW(d, s.acc16[t][0], s.acc16[t][0])
	VPADDW(s.l, s.acc16[t][1], s.acc16[t][1])
}

// flush widens the int16 sums into the int32 accumulators (two tokens: the sums in
// memory) and clears them (clobbers l); natural: the accumulators hold rows 0-15 and 16-31
// (else 0-7 | 16-23 and 8-15 | 24-31).
func (s *lutY) flush(natural bool) {
	t := s.l
	for tok, acc := range s.acc16 {
		for i, c := range acc {
			lo, hi := i, 2+i // row groups of 8
			if natural {
				lo, hi = 2*i, 2*i+1
			}
			for half, g := range []int{lo, hi} {
				if half == 0 {
					VPMOVSXWD(c.AsX(), t)
				} else {
					VEXTRACTI128(U8(1), c, t.AsX())
					VPMOVSXWD(t.AsX(), t)
				}
				if s.T == 1 {
					VPADDD(t, s.acc32[g], s.acc32[g])
				} else {
					m := at(s.sums, 128*tok+32*g)
					VPADDD(m, t, t)
					VMOVDQU(t, m)
				}
			}
		}
	}
	zeroAll(s.allAcc16()...)
}

// tl1Units runs n (a register, may be 0) tl1 units, flushing every 32 (each row gains
// at most 2*254 per unit).
func (s *lutY) tl1Units(name string, n Register) {
	done := name + "_tl1done"
	TESTQ(n, n)
	JZ(LabelRef(done))
	Label(name + "_tl1chunk")
	c := takeChunk(n, 32)
	zeroAll(s.allAcc16()...)
	Label(name + "_tl1unit")
	PREFETCHT0(at(s.pf, 0))
	s.nibbles(at(s.w, 0))
	for t := range s.tabs {
		s.add(t, s.lo, 0)
		s.add(t, s.hi, 32)
	}
	ADDQ(U8(32), s.w)
	ADDQ(U8(32), s.pf)
	s.nextTabs(64)
	DECQ(c)
	JNZ(LabelRef(name + "_tl1unit"))
	s.flush(false)
	TESTQ(n, n)
	JNZ(LabelRef(name + "_tl1chunk"))
	Label(done)
}

// tl2Blocks runs n (a register, may be 0) tl2 blocks with the byte-plane tables of the
// magnitudes (tabTL2Y). Per plane, two loads give rows 0-15 and 16-31 as words. Per field f,
// y = word << (11-5f) has the code's sign in bit 15 and is nonzero where its magnitude is;
// it signs the entries (addSigned) indexed by the codes packed to bytes: word & 31, y >> 11
// and word >> 10 (shifts and vpshufb share two pipes, so f = 0 masks and f = 2 doubles
// instead). Triple 15's magnitude gathers bit 15 of planes 0-3 (vpacksswb keeps it as
// bit 7 of a byte, which drives vpblendvb); plane 4's words, or 1, sign it. Flushed every
// 5 blocks: 80 entries of at most 381 per int16 sum.
func (s *lutY) tl2Blocks(name string, n Register) {
	r := s.tl2Regs()
	TESTQ(n, n)
	JZ(LabelRef(name + "_tl2done"))
	Label(name + "_chunk")
	c := takeChunk(n, tl2Flush(16))
	zeroAll(s.allAcc16()...)
	Label(name + "_blk")
	s.tl2Block(r, func(j int) { PREFETCHT0(at(s.pf, 64*j)) })
	ADDQ(U32(320), s.w)
	ADDQ(U32(320), s.pf)
	s.nextTabs(512)
	DECQ(c)
	JNZ(LabelRef(name + "_blk"))
	s.flush(true)
	TESTQ(n, n)
	JNZ(LabelRef(name + "_chunk"))
	Label(name + "_tl2done")
	s.p.put(r.w...)
	s.p.put(r.y...)
	s.p.put(r.t15, r.m1f)
}

// tl2YRegs are tl2Block's registers (tl2Regs takes them from the pool, m1f loaded).
type tl2YRegs struct {
	w, y     []VecPhysical
	t15, m1f VecPhysical
}

func (s *lutY) tl2Regs() tl2YRegs {
	r := tl2YRegs{w: s.p.getn(2), y: s.p.getn(2), t15: s.p.get(), m1f: s.p.get()}
	VMOVDQU(m1fY, r.m1f)
	return r
}

// tl2Block adds the tl2 block at s.w to the int16 sums (tables at s.tabs), calling pf(j)
// before plane j's loads.
func (s *lutY) tl2Block(r tl2YRegs, pf func(j int)) {
	w, y, t15, m1f := r.w, r.y, r.t15, r.m1f
	c0, c1 := s.lo, s.hi
	for j := 0; j < 5; j++ {
		pf(j)
		VMOVDQU(at(s.w, 64*j), w[0])
		VMOVDQU(at(s.w, 64*j+32), w[1])
		for f := 0; f < 3; f++ {
			for h := 0; h < 2; h++ {
				c := []VecPhysical{c0, c1}[h]
				switch f {
				case 0:
					VPSLLW(U8(11), w[h], y[h])
					VPAND(m1f, w[h], c)
				case 1:
					VPSLLW(U8(6), w[h], y[h])
					VPSRLW(U8(11), y[h], c)
				case 2: // bit 5 of the code byte (triple 15's) is ignored by vpshufb
					VPADDW(w[h], w[h], y[h])
					VPSRLW(U8(10), w[h], c)
				}
			}
			VPACKUSWB(c1, c0, c0)
			for t := range s.tabs {
				s.addSigned(t, c0, 32*(3*j+f), y)
			}
		}
		if j < 4 {
			VPACKSSWB(w[1], w[0], c0) // bit 7: bit j of triple 15's code
			if j == 0 {
				VPXOR(t15, t15, t15)
				VPBLENDVB(c0, bitsY, t15, t15)
			} else {
				VPOR(bitsY.Offset(32*j), t15, c1)
				VPBLENDVB(c0, c1, t15, t15)
			}
		}
	}
	VPOR(wOnes, w[0], y[0])
	VPOR(wOnes, w[1], y[1])
	for t := range s.tabs {
		s.addSigned(t, t15, 32*15, y)
	}
}

// lutYFn: the tl1/tl2 chunk kernel (see lutArgs) for T (1 or 2) tokens, AVX2.
func lutYFn(T int, tl2 bool) {
	f := "TL1"
	if tl2 {
		f = "TL2"
	}
	name := fmt.Sprintf("lut%sT%dAVX2", f, T)
	a := fn(name, fmt.Sprintf("%s is the %s chunk GEMV for %d token(s) (see lutArgs); lutGeneric (ymm tables) is its reference.", name, f, T))
	s := newLutY(T)
	w0, sums := ld(a, lW), ld(a, lSums)
	s.sums = sums
	Label(name + "_rb")
	MOVQ(w0, s.w)
	MOVQ(w0, s.pf)
	ADDQ(at(a, lRBBytes), s.pf)
	loadTokenPtrs(a, s.tabs, lTab, lTabStride) // (the blocks moved them on)
	if T == 1 {
		zeroAll(s.acc32[:]...)
	}
	if tl2 {
		nb := ld(a, lBlocks)
		s.tl2Blocks(name, nb)
	}
	n := ld(a, lUnits)
	s.tl1Units(name, n)
	if T == 1 {
		for i, r := range s.acc32 {
			VPADDD(at(sums, 32*i), r, r)
			VMOVDQU(r, at(sums, 32*i))
		}
		SUBQ(I8(-128), sums)
	} else {
		ADDQ(U32(128*T), sums)
	}
	ADDQ(at(a, lRBBytes), w0)
	DECQ(at(a, lNRB))
	JNZ(LabelRef(name + "_rb"))
	VZEROUPPER()
	RET()
}

// loopArgs are the argument-block offsets of a segment loop: steps per segment, steps in
// the last, segments, and the steps of an int16 chunk (chunkLoop with most == 0).
type loopArgs struct{ steps, last, nseg, chunk int }

// gemvLoop is gemvArgs' (Aux is the chunk).
var gemvLoop = loopArgs{gSegSteps, gLastSteps, gNSeg, gAux}

// segCount returns a new register holding this segment's steps: la.steps, or la.last in the
// last (nseg == 1).
func segCount(a, nseg Register, la loopArgs) GPVirtual {
	cnt := GP64()
	MOVQ(at(a, la.steps), cnt)
	CMPQ(nseg, U8(1))
	CMOVQEQ(at(a, la.last), cnt)
	return cnt
}

// takeChunkArg is takeChunk with most read from the argument block at off, taken as at
// least 1 (a zero would count a chunk down from 2^64).
func takeChunkArg(name string, a, n Register, off int) GPVirtual {
	c := GP64()
	MOVQ(at(a, off), c)
	CMPQ(c, U8(1))
	JGE(LabelRef(name + "_len"))
	MOVQ(U32(1), c)
	Label(name + "_len")
	CMPQ(n, c)
	CMOVQLT(n, c)
	SUBQ(c, n)
	return c
}

// chunkLoop emits the loop nest of the one-row-block kernels with int16 sums: per segment
// segStart, then chunks of at most most steps (0: the argument block's la.chunk steps,
// takeChunkArg), each chunkStart, step per step, chunkEnd; then segEnd, which moves sums
// on, and with fe (as segLoop) the segment's fused epilogue.
func chunkLoop(name string, a Register, la loopArgs, most uint32, fe *fuseEpi, sums Register, segStart, chunkStart, step, chunkEnd, segEnd func()) {
	nseg := ld(a, la.nseg)
	Label(name + "_seg")
	cnt := segCount(a, nseg, la)
	segStart()
	Label(name + "_chunk")
	var c GPVirtual
	if most == 0 {
		c = takeChunkArg(name, a, cnt, la.chunk)
	} else {
		c = takeChunk(cnt, most)
	}
	chunkStart()
	Label(name + "_step")
	step()
	DECQ(c)
	JNZ(LabelRef(name + "_step"))
	chunkEnd()
	TESTQ(cnt, cnt)
	JNZ(LabelRef(name + "_chunk"))
	segEnd()
	if fe != nil {
		fe.gen(name, a, sums, nseg)
	}
	DECQ(nseg)
	JNZ(LabelRef(name + "_seg"))
	VZEROUPPER()
	RET()
}

// widen16 adds the int16 sums acc16[i] (pairs summed by vpmaddwd) to the int32 sums acc32[i]
// (clobbers acc16).
func widen16(acc16, acc32 []VecPhysical) {
	for i, r := range acc16 {
		VPMADDWD(wOnes, r, r)
		VPADDD(r, acc32[i], acc32[i])
	}
}

// memSums2 returns the segment start and chunk end of a two-token kernel with int16 sums
// acc[t][g] whose int32 sums stay in memory (token t's row group g at sums + 128t + 32g):
// zeroed at each segment's start (through z), each chunk's sums widened (vpmaddwd with ones,
// a table of words of 1 in the generating program) and added to them.
func memSums2(sums Register, acc [2][]VecPhysical, z VecPhysical, ones Mem) (segStart, chunkEnd func()) {
	segStart = func() {
		VPXOR(z, z, z)
		for i := 0; i < 8; i++ {
			VMOVDQU(z, at(sums, 32*i))
		}
	}
	chunkEnd = func() {
		for t := range acc {
			for g, r := range acc[t] {
				m := at(sums, 128*t+32*g)
				VPMADDWD(ones, r, r)
				VPADDD(m, r, r)
				VMOVDQU(r, m)
			}
		}
	}
	return segStart, chunkEnd
}

// int2Decode loads the 32-byte int2 unit at w and looks its codes up in the nibble tables
// la, lb (tabInt2): v[j] = row group j's unsigned weights, 4 inputs per dword.
func int2Decode(w Register, la, lb VecPhysical, v []VecPhysical) {
	VMOVDQU(at(w, 0), v[2])
	VPSRLW(U8(4), v[2], v[3])
	VPAND(m0fY, v[2], v[2])
	VPAND(m0fY, v[3], v[3])
	VPSHUFB(v[2], la, v[0])
	VPSHUFB(v[2], lb, v[1])
	VPSHUFB(v[3], la, v[2])
	VPSHUFB(v[3], lb, v[3])
}

// i2sChunkY is the most blocks gemvI2SYMany sums in int16 before it widens the sums to
// int32: per block a lane adds four runs' pairs of u x x, |u| <= 2 and |x| <= 128, at most
// 4 x 2 x 2 x 128 = 2048, so fifteen blocks stay within int16 (30720).
const i2sChunkY = 15

// gemvI2SYMany (AVX2, T = 3, 4): i2s for three or four tokens on ymm, with int16 sums.
// gemvI2SY's cost per token is a vpmaddubsw (and its activation load), a vpaddw, and per
// row and block a vpmaddwd and vpaddd, plus its share of the unpacking; here the int16 sums
// last a chunk of up to i2sChunkY blocks (the vpmaddwd and vpaddd run once per chunk), each
// activation load serves two rows, and one unpacking serves every token. The int16 sums of
// four rows and four tokens do not fit in the registers, so each chunk of a row quad is
// walked twice, rows 0-1 then 2-3: the first walk reads the weights from memory (both lines
// prefetched), the second, and both walks' activations (T x 1920 bytes), hit L1. Each walk
// widens its sums into int32 sums on the stack, which the segment's end reduces and stores
// like gemvI2SY. (Eight tokens in one pass, one row per walk, lost to two passes of four:
// their activations at a stride of Kp, a multiple of 4 KiB on most shapes, fall into the same
// L1 sets, nine lines to a set of eight ways.)
func gemvI2SYMany(T int) {
	name := gemvName("I2S", T, "AVX2")
	a := fn(name, gemvDoc(name, "gemvI2SGeneric", T))
	frame := AllocLocal(4*T*32 + 24)
	acc32 := func(r, t int) Mem { return frame.Offset(32 * (r*T + t)) }
	quadS, wqS, sumsS := frame.Offset(4*T*32), frame.Offset(4*T*32+8), frame.Offset(4*T*32+16)
	p := newPool(false)
	m3 := p.get()
	VMOVDQU(m3Y, m3)
	wv, c := p.getn(2), p.getn(2)
	xr, tmp := p.get(), p.get()
	acc16 := [2][]VecPhysical{p.getn(T), p.getn(T)} // [row of the walk][token]
	all16 := append(append([]VecPhysical{}, acc16[0]...), acc16[1]...)
	x := newTokX(a, T, gX, gXStride)
	w, nseg, sums, m := GP64(), GP64(), GP64(), GP64()
	MOVQ(U32(0), quadS)
	MOVQ(at(a, gSums), sums)
	MOVQ(sums, sumsS)
	MOVQ(at(a, gW), w)
	MOVQ(w, wqS)

	Label(name + "_quad")
	MOVQ(wqS, w)
	x.reset()
	MOVQ(at(a, gNSeg), nseg)
	MOVQ(sumsS, sums)

	Label(name + "_seg")
	cnt := segCount(a, nseg, gemvLoop)
	VPXOR(tmp, tmp, tmp)
	for r := 0; r < 4; r++ {
		for t := 0; t < T; t++ {
			VMOVDQU(tmp, acc32(r, t))
		}
	}

	Label(name + "_chunk")
	clen := takeChunk(cnt, i2sChunkY)
	for g := 0; g < 2; g++ {
		blk := fmt.Sprintf("%s_walk%d", name, g)
		zeroAll(all16...)
		MOVQ(clen, m)
		Label(blk)
		if g == 0 {
			prefetchAhead(w, 0)
			prefetchAhead(w, 64)
		}
		for rr := 0; rr < 2; rr++ {
			VMOVDQU(at(w, 32*(2*g+rr)), wv[rr])
		}
		for s := 0; s < 4; s++ {
			for rr := 0; rr < 2; rr++ {
				if s < 3 {
					VPSRLW(U8(6-2*s), wv[rr], c[rr])
					VPAND(m3, c[rr], c[rr])
				} else {
					VPAND(m3, wv[rr], c[rr])
				}
			}
			for t := 0; t < T; t++ {
				VMOVDQU(x.mem(t, 32*s), xr)
				for rr := 0; rr < 2; rr++ {
					VPMADDUBSW(xr, c[rr], tmp)
					VPADDW(tmp, acc16[rr][t], acc16[rr][t])
				}
			}
		}
		SUBQ(I8(-128), w)
		x.advance(128)
		DECQ(m)
		JNZ(LabelRef(blk))
		for rr := 0; rr < 2; rr++ {
			for t := 0; t < T; t++ {
				v := acc16[rr][t]
				VPMADDWD(wOnes, v, v)
				VPADDD(acc32(2*g+rr, t), v, v)
				VMOVDQU(v, acc32(2*g+rr, t))
			}
		}
		if g == 0 { // back to the chunk's start for rows 2-3
			MOVQ(clen, m)
			SHLQ(U8(7), m)
			SUBQ(m, w)
			x.rewind(m)
		}
	}
	TESTQ(cnt, cnt)
	JNZ(LabelRef(name + "_chunk"))

	r4 := all16[:4]
	for t := 0; t < T; t++ {
		for r := 0; r < 4; r++ {
			VMOVDQU(acc32(r, t), r4[r])
		}
		quadRowSumsY(r4, at(sums, 128*t))
	}
	ADDQ(U32(128*T), sums)
	DECQ(nseg)
	JNZ(LabelRef(name + "_seg"))

	MOVQ(wqS, w)
	ADDQ(at(a, gAux), w)
	MOVQ(w, wqS)
	ADDQ(U8(16), sumsS)
	INCQ(quadS)
	CMPQ(quadS, U8(8))
	JNE(LabelRef(name + "_quad"))
	VZEROUPPER()
	RET()
}

// gemvInt2Y1 (AVX2, one token): gemvInt2Y with int16 sums that last a chunk of up to Aux
// units (the kernels set it from the code book's span, so that no int16 sum can overflow:
// int16Chunk), each unit's vpmaddubsw going straight into them: per unit 4 multiplies,
// not 8, and the vpmaddwd and vpaddd once per chunk.
func gemvInt2Y1() {
	name := gemvName("Int2", 1, "AVX2")
	a := fn(name, gemvDoc(name, "gemvInt2Generic (kstep 4)", 1))
	p := newPool(false)
	w, kx := ld(a, gW), GP64()
	XORQ(kx, kx)
	xs := tokenPtrs(a, 1, gX, gXStride)
	tab, sums := ld(a, gTab), ld(a, gSums)
	acc32, acc16 := p.getn(4), p.getn(4) // [row group]
	la, lb := p.get(), p.get()
	VBROADCASTI128(at(tab, 0), la)
	VBROADCASTI128(at(tab, 16), lb)
	v := p.getn(4)
	x := p.get()
	fe := &fuseEpi{T: 1, ymm: true, regs: slices.Concat(acc32, acc16, v, []VecPhysical{x})}
	chunkLoop(name, a, gemvLoop, 0, fe, sums, func() { zeroAll(acc32...) }, func() { zeroAll(acc16...) }, func() {
		int2Unit1(w, kx, xs[0], la, lb, x, v, acc16)
	}, func() { widen16(acc16, acc32) }, func() {
		for j, r := range acc32 {
			VMOVDQU(r, at(sums, 32*j))
		}
		ADDQ(U8(128), sums)
	})
}

// int2Unit1 is gemvInt2Y1's step: it adds the unit at w, against the token's activations at
// x0 + kx (broadcast into x), to the int16 sums acc16 (per row group; v: scratch) and moves
// w and kx past it.
func int2Unit1(w, kx, x0 Register, la, lb, x VecPhysical, v, acc16 []VecPhysical) {
	prefetchAhead(w, 0)
	int2Decode(w, la, lb, v)
	VPBROADCASTD(idx(x0, kx, 1, 0), x)
	for j := 0; j < 4; j++ {
		VPMADDUBSW(x, v[j], v[j])
		VPADDW(v[j], acc16[j], acc16[j])
	}
	ADDQ(U8(32), w)
	ADDQ(U8(4), kx)
}

// gemvInt2Y1Two (AVX2, one token, zen3) is gemvInt2Y1 over two row blocks at once, the
// second gemvArgs.W2Off bytes after the first (its sums Sums2Off bytes after the first's),
// as gemvI2SY1Two: each int16 chunk (Aux units) runs on the first row block's stream and
// then on the second's, the activations rewound for it; both row blocks' int32 sums live on
// the stack. The epilogue is a pass of its own (gemvArgs.Epi nil: one segment). On the
// Zen 3 guest, on a day the one-stream kernel read 21.8 GB/s from cache (2560x2560), this
// one read 1.00-1.09x as fast from DRAM (4096x14336, 14336x4096, 2560x2560, one and two
// threads, three runs; one round of noise at 0.83x); on a day it read 16 GB/s, 0.95-1.07x.
func gemvInt2Y1Two() {
	name := "gemvInt2TwoT1AVX2"
	a := fn(name, gemvDoc(name, "gemvInt2Generic (kstep 4)", 1))
	frame := AllocLocal(2 * 4 * 32)
	acc32 := func(s, j int) Mem { return frame.Offset(32 * (4*s + j)) }
	p := newPool(false)
	w, kx := ld(a, gW), GP64()
	XORQ(kx, kx)
	xs := tokenPtrs(a, 1, gX, gXStride)
	tab, sums := ld(a, gTab), ld(a, gSums)
	acc16 := p.getn(4) // [row group]
	la, lb := p.get(), p.get()
	VBROADCASTI128(at(tab, 0), la)
	VBROADCASTI128(at(tab, 16), lb)
	v := p.getn(4)
	x := p.get()
	nseg := ld(a, gNSeg)
	Label(name + "_seg")
	cnt := segCount(a, nseg, gemvLoop)
	VPXOR(x, x, x)
	for s := 0; s < 2; s++ {
		for j := 0; j < 4; j++ {
			VMOVDQU(x, acc32(s, j))
		}
	}
	Label(name + "_chunk")
	c := takeChunkArg(name, a, cnt, gAux)
	wBack, xBack, m := GP64(), GP64(), GP64()
	MOVQ(c, wBack)
	SHLQ(U8(5), wBack) // the chunk's weight bytes, 32 a unit
	MOVQ(c, xBack)
	SHLQ(U8(2), xBack) // its activation bytes, 4 a unit
	for s := 0; s < 2; s++ {
		zeroAll(acc16...)
		MOVQ(c, m)
		Label(fmt.Sprintf("%s_step%d", name, s))
		int2Unit1(w, kx, xs[0], la, lb, x, v, acc16)
		DECQ(m)
		JNZ(LabelRef(fmt.Sprintf("%s_step%d", name, s)))
		for j, r := range acc16 {
			VPMADDWD(wOnes, r, r)
			VPADDD(acc32(s, j), r, r)
			VMOVDQU(r, acc32(s, j))
		}
		if s == 0 { // the second stream's chunk, on the same activations
			SUBQ(wBack, w)
			ADDQ(at(a, gW2Off), w)
			SUBQ(xBack, kx)
		} else { // back to the first stream, past its chunk
			SUBQ(at(a, gW2Off), w)
		}
	}
	TESTQ(cnt, cnt)
	JNZ(LabelRef(name + "_chunk"))
	off := GP64()
	MOVQ(at(a, gSums2Off), off)
	for s, dst := range []func(j int) Mem{func(j int) Mem { return at(sums, 32*j) }, func(j int) Mem { return idx(sums, off, 1, 32*j) }} {
		for j := 0; j < 4; j++ {
			VMOVDQU(acc32(s, j), x)
			VMOVDQU(x, dst(j))
		}
	}
	SUBQ(I8(-128), sums)
	DECQ(nseg)
	JNZ(LabelRef(name + "_seg"))
	VZEROUPPER()
	RET()
}

// gemvInt2Y2Seq (AVX2, two tokens): gemvInt2Y1 for two tokens, for code books of a small
// span (the consecutive ones: 42 units per chunk); the two tokens' int16 sums take every
// register, so each chunk's widened sums are added to the row block's sums in memory
// (zeroed at each segment's start). Per unit 8 multiplies, not 16.
func gemvInt2Y2Seq() {
	name := "gemvInt2SeqT2AVX2"
	a := fn(name, gemvDoc(name, "gemvInt2Generic (kstep 4)", 2))
	p := newPool(false)
	w, kx := ld(a, gW), GP64()
	XORQ(kx, kx)
	xs := tokenPtrs(a, 2, gX, gXStride)
	tab, sums := ld(a, gTab), ld(a, gSums)
	acc16 := [2][]VecPhysical{p.getn(4), p.getn(4)} // [token][row group]
	all16 := append(append([]VecPhysical{}, acc16[0]...), acc16[1]...)
	la, lb := p.get(), p.get()
	VBROADCASTI128(at(tab, 0), la)
	VBROADCASTI128(at(tab, 16), lb)
	v := p.getn(4)
	x, tmp := p.get(), p.get()
	segStart, chunkEnd := memSums2(sums, acc16, x, wOnes)
	fe := &fuseEpi{T: 2, ymm: true, regs: slices.Concat(all16, v, []VecPhysical{x, tmp})}
	chunkLoop(name, a, gemvLoop, 0, fe, sums, segStart, func() { zeroAll(all16...) }, func() {
		prefetchAhead(w, 0)
		int2Decode(w, la, lb, v)
		for t := 0; t < 2; t++ {
			VPBROADCASTD(idx(xs[t], kx, 1, 0), x)
			for j := 0; j < 4; j++ {
				VPMADDUBSW(x, v[j], tmp)
				VPADDW(tmp, acc16[t][j], acc16[t][j])
			}
		}
		ADDQ(U8(32), w)
		ADDQ(U8(4), kx)
	}, chunkEnd, func() { ADDQ(U32(256), sums) })
}
