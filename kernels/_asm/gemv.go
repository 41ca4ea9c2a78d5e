package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Argument block offsets: kernels.gemvArgs.
const (
	gW, gX, gXStride, gSums, gSegSteps, gNSeg, gLastSteps = 0, 8, 16, 24, 32, 40, 48
	gTab, gAux, gPF, gPF7, gAcc, gFar, gFar6              = 56, 64, 72, 80, 88, 96, 104
	gEpi, gEJ, gEY                                        = 112, 120, 128
	gW2Off, gSums2Off                                     = 136, 144
)

// prefetchFar and prefetchNear are how far ahead (bytes) the GEMV kernels prefetch their
// weight stream: into L2 (prefetcht1) far ahead, and from there into L1 (prefetcht0) near.
// The hardware prefetchers alone leave the AVX-512 kernels at 60-75% of the read bandwidth
// when they compute between loads; prefetcht0 8 KiB ahead brought them to it on Zen 5, but
// on a Xeon (Emerald Rapids, 13-17 GB/s a core) the i2s, bf16 and int8 GEMVs ran 8-33%
// faster with the two-level prefetch (int2 -3 to +25%; 8 KiB and 2 KiB, 16 and 2 KiB within
// the noise of it), a plain read the same: likely because a prefetcht0 that goes to DRAM
// holds one of L1's few fill buffers for the whole latency, and the loads behind it wait.
// Without any software prefetch the one-token i2s and bf16 GEMVs read 53-67% of the roofline
// there and the int8 one still 89-94 (six rounds, one thread, the 8B shapes); at two threads
// 16 and 32 KiB far moved i2s, int2 and int1 by no more than the noise (five rounds).
const (
	prefetchFar  = 8192
	prefetchNear = 2048
)

// i2sFar is how far ahead the i2s kernels for one and two tokens prefetch into L2 (into
// L1 prefetchNear): on a 2-vCPU Xeon guest with a 480 MiB L3, from DRAM with one token
// (two interleaved rounds, one thread / two), against prefetchFar: 2560x2560 +15-18% /
// +13-19%, 6912x2560 +11-15% / +12-18%, 14336x4096 +10% / +7%, 4096x14336 -3% to +1% /
// +2-4%; two tokens +4-10%. 3 and 6 KiB did as well (within 5%), 16 KiB no better than
// 8, 1 KiB into L1 no better than 2; into L1 only (4 KiB) 0.7x, into L2 only 0.9-1.0x.
const i2sFar = 4096

// int8Far is the same for the zmm int8 kernels: there (two interleaved rounds, the 8B
// shapes, 2560x2560 and 6912x2560) one token 7-13% faster than with prefetchFar at one and
// two threads, four tokens 8-13%. (int2 moved by -5% to +5% with 4 KiB: it keeps
// prefetchFar; the int1 kernels of layouts before kernels/9 by -5% to +1%.)
const int8Far = 4096

// prefetchLine is the two-level prefetch of one line of a weight stream: far into L2, near
// into L1. Every GEMV kernel prefetches this way, at static distances (prefetchAhead) or at
// distances its driver computes (the i2s kernels for three and four tokens, the lookup
// kernels' pieces ahead). In a kernel written by hardwarePrefetch it emits nothing.
func prefetchLine(far, near Mem) {
	if !softPrefetch {
		return
	}
	PREFETCHT1(far)
	PREFETCHT0(near)
}

// withL1 writes gen's kernel twice: as the default tuning's, and then with l1Only set, its
// name ending in L1 (l1Name), as the zen3 tuning's (kernels.TuningZen3), whose weight
// stream prefetchAheadBy prefetches into L1 only, prefetchFar ahead (prefetcht0 8 KiB ahead,
// where the default's prefetch goes into L2 far ahead and into L1 near). The one-token
// AVX2 kernels of i2s (gemvI2SY1Plain, whose default goes i2sFar ahead), int8
// (gemvInt8Y1Halves), the bf16/f32 pairs (floatYPair) and int1 (genInt1PanelY, whose
// default leaves its weights to the hardware's prefetchers) have such a twin.
//
// Measured on a Zen 3 (EPYC, family 19h model 1, AVX2 only), from DRAM on 4096x14336,
// 14336x4096 and 2560x2560 at one and two threads (`bitd bench -tuning` of a build whose
// second tuning took the twins, 15 rounds, medians; see kernels.TuningZen3 for all runs):
//   - int1 1.20x and 1.19x as fast as with none on the 8B shapes at one thread, 1.13x on
//     2560x2560; 1.16x, 1.16x and 1.11x at two; 4 and 16 KiB ahead were 0.95-1.02x of 8.
//     (On the Zen 4 guest with AVX-512 switched off the hardware's prefetchers alone had
//     read as fast as any prefetch: none 21.3, 19.4, 19.0 GB/s; prefetcht1 4 KiB 19.5, 19.4,
//     19.6, 8 KiB 20.4, 19.8, 19.8, 16 KiB 20.2, 19.5, 19.3; prefetcht0 512 bytes 20.6,
//     20.4, 19.4, 2 KiB 19.6, 20.0, 19.5.)
//   - i2s, against i2sFar's two levels: one thread 1.02-1.05x, 1.02-1.07x and 1.06-1.07x,
//     two threads 1.04-1.08x, 1.03-1.04x and 1.01-1.07x (two runs); 4 KiB ahead
//     0.99-1.07x of the two levels and 16 KiB 0.98-1.08x (one run each). A loop of the
//     kernel's block over a 1 GiB buffer read the same way (15 rounds in turn): two
//     levels 20.4 GB/s, prefetcht0 alone 2 KiB ahead 20.6, 4 KiB 21.1, 8 KiB 21.7, none
//     16.0.
//   - bf16 0.99-1.08x (11 of 12 above 1.01), int8 1.02-1.10x, f32 0.95-1.09x (10 of 12
//     above 1.01; two runs).
func withL1(gen func()) {
	gen()
	l1Only = true
	defer func() { l1Only = false }()
	gen()
}

// l1Only is true while withL1 writes the zen3 tuning's kernel (prefetchAheadBy).
var l1Only bool

// l1Name is name, with L1 appended while withL1 writes the zen3 tuning's kernel.
func l1Name(name string) string {
	if l1Only {
		return name + "L1"
	}
	return name
}

// softPrefetch is false while hardwarePrefetch writes a kernel.
var softPrefetch = true

// hardwarePrefetch writes a kernel through gen with no software prefetch of its weight
// stream (prefetchLine emits nothing), leaving the stream to the hardware's prefetchers:
// the variants named ...HW, which kernels.Tuning selects on CPUs where they read faster
// (AMD Zen 4: see kernels/tuning.go).
func hardwarePrefetch(gen func()) {
	softPrefetch = false
	defer func() { softPrefetch = true }()
	gen()
}

// prefetchAhead prefetches the weight stream's line off bytes past base, prefetchFar ahead
// into L2 and prefetchNear ahead into L1.
func prefetchAhead(base Register, off int) { prefetchAheadBy(base, prefetchFar, off) }

// prefetchAheadBy is prefetchAhead with far bytes ahead into L2 (i2sFar, int8Far); in a
// zen3 kernel (withL1) the line prefetchFar ahead into L1 only.
func prefetchAheadBy(base Register, far, off int) {
	if l1Only {
		if softPrefetch {
			PREFETCHT0(at(base, prefetchFar+off))
		}
		return
	}
	prefetchLine(at(base, far+off), at(base, prefetchNear+off))
}

// Read-only tables shared by the GEMV kernels (defined before any function).
var (
	pairPerm   Mem    // vpermb: dword 2r+h <- dword r of the 32-byte unit h
	evenIdx    Mem    // vpermt2d: the even dwords of two registers
	selHigh    Mem    // 0x40 in the high 256 bits: selects vpermi2b's second table
	i2sGather  Mem    // vpermd: dwords 0, 4, 8, 12
	i2sRuns    [2]Mem // vgf2p8affineqb matrices: runs 0 and 1 of each byte to bits 1-0, in the low and high half; runs 2 and 3
	int2Mask   [2]Mem // 0x03 in the low half's bytes, 0x0C in the high half's; 0x30, 0xC0
	int2Fix    [2]Mem // vpsravd counts: 0 in the low half and 2 in the high; 4 and 6
	i2sRowMask [2]Mem // runs 0 and 1 of each byte in place, in the low and high half; runs 2 and 3
	i2sRowFix  [2]Mem // vpsravd counts of i2sRowMask's factors: 6 and 4; 2 and 0
	dupBytes   Mem    // vpermb: bytes 2r and 2r+1 <- byte r
)

func genGemv() {
	genLUTBuilders() // the tl1/tl2 table builders, whose tables the one-token tl2 kernel shares
	var pp []byte
	for d := 0; d < 16; d++ {
		for i := 0; i < 4; i++ {
			pp = append(pp, byte(32*(d%2)+4*(d/2)+i))
		}
	}
	pairPerm = table("pairPerm", pp)
	var ev []uint32
	for i := 0; i < 16; i++ {
		ev = append(ev, uint32(2*i))
	}
	evenIdx = dwordTable("evenIdx", ev)
	sh := make([]byte, 64)
	for i := 32; i < 64; i++ {
		sh[i] = 0x40
	}
	selHigh = table("selHigh", sh)
	i2sGather = dwordTable("i2sGather", []uint32{0, 4, 8, 12, 0, 4, 8, 12})
	i2sRuns = [2]Mem{bitFields("i2sRuns01", 6, 4), bitFields("i2sRuns23", 2, 0)}
	var dup []byte
	for r := 0; r < 32; r++ {
		dup = append(dup, byte(r), byte(r))
	}
	dupBytes = table("dupBytes", dup)
	int2Mask = [2]Mem{halves("int2Mask0", []uint32{0x03030303}, []uint32{0x0C0C0C0C}), halves("int2Mask1", []uint32{0x30303030}, []uint32{0xC0C0C0C0})}
	int2Fix = [2]Mem{halves("int2Fix0", []uint32{0}, []uint32{2}), halves("int2Fix1", []uint32{4}, []uint32{6})}
	i2sRowMask = [2]Mem{halves("i2sRowMask0", []uint32{0xC0C0C0C0}, []uint32{0x30303030}), halves("i2sRowMask1", []uint32{0x0C0C0C0C}, []uint32{0x03030303})}
	i2sRowFix = [2]Mem{halves("i2sRowFix0", []uint32{6}, []uint32{4}), halves("i2sRowFix1", []uint32{2}, []uint32{0})}

	for T := 1; T <= 8; T++ {
		if T <= 2 {
			gemvInt2Pair(T)
		} else {
			gemvInt2Split(T, false)
		}
		gemvInt2Split(T, true) // (two tokens: for the zen4 tuning, kernels.Tuning)
		gemvInt8Z(T)
		if T <= 4 {
			gemvI2SZ(T)
			switch {
			case T == 2:
				gemvI2SRowZNamed(T, gemvName("I2SAnd", T, "AVX512"), rowMasked)
			case T >= 3:
				gemvI2SRowZNamed(T, gemvName("I2SAnd", T, "AVX512"), rowShifted)
			}
			if T == 1 {
				gemvI2SPairZ()
				hardwarePrefetch(func() { gemvI2SZNamed(1, "gemvI2ST1AVX512HW") })
				gemvI2SRowZNamed(1, "gemvI2SRowT1AVX512", rowMasked)
			}
			if T == 1 { // (tl1 with more tokens: lutTL1MZ)
				lutZ(T, false)
			}
			lutZ(T, true)
			switch T {
			case 1:
				onShiftPipes(func() {
					hardwarePrefetch(func() { nonTemporal(128, func() { lutZNamed(1, true, "HW") }) })
				})
			case 2:
				nonTemporal(128, func() { lutZNamed(2, true, "NT") })
			}
		}
	}
	genTL1M()
	for T := 1; T <= 4; T++ {
		genTL2Panel(T)
	}
	genInt1Panels()
	genGemvAVX2()
	for T := 1; T <= 2; T++ {
		genTL2PanelY(T)
	}
	genInt1Y()
}

// bitFields returns a table of vgf2p8affineqb matrices (gfField) that take the 2-bit field
// at bit lo of every byte in the low 256 bits, and at bit hi in the high 256 bits, down to
// bits 1-0.
func bitFields(name string, lo, hi int) Mem {
	qword := func(m uint64) []uint32 { return []uint32{uint32(m), uint32(m >> 32)} }
	return halves(name, qword(gfField(lo, 2)), qword(gfField(hi, 2)))
}

// halves defines a 64-byte table of dwords: lo repeated over the low 256 bits, hi over the
// high (per-half masks, shift counts and vgf2p8affineqb matrices).
func halves(name string, lo, hi []uint32) Mem {
	var d []uint32
	for _, pat := range [][]uint32{lo, hi} {
		for n := 0; n < 8; n += len(pat) {
			d = append(d, pat...)
		}
	}
	return dwordTable(name, d)
}

// segLoop runs the segment structure shared by the GEMV kernels: for each segment, zero
// the accumulators, run body once per step (SegSteps, or LastSteps for the last segment;
// unrolled u times, u a power of two dividing every step count), then store; then, with fe
// and gemvArgs.Epi set, the segment's epilogue (fe.gen). body advances its
// own pointers and gets the copy index.
func segLoop(name string, a Register, u int, fe *fuseEpi, zero func(), body func(i int), store func(sums Register)) {
	sums, nseg := ld(a, gSums), ld(a, gNSeg)
	Label(name + "_seg")
	cnt := segCount(a, nseg, gemvLoop)
	for v := u; v > 1; v >>= 1 {
		SHRQ(U8(1), cnt)
	}
	zero()
	Label(name + "_step")
	for i := 0; i < u; i++ {
		body(i)
	}
	DECQ(cnt)
	JNZ(LabelRef(name + "_step"))
	store(sums)
	if fe != nil {
		fe.gen(name, a, sums, nseg)
	}
	DECQ(nseg)
	JNZ(LabelRef(name + "_seg"))
}

// fuseEpi is the integer epilogue (genEpi's arithmetic) that a GEMV kernel runs on each
// segment's sums as soon as it has stored them, when gemvArgs.Epi is set: the float work and
// its divisions then run between the weight loads of the next segment instead of in a pass
// of their own after the row block, during which the weight stream stood still. It reads the
// epiArgs at Epi. The running sums y live in gemvArgs.EY (callers fill it with -0, so that
// y = -0 + p_0 = p_0 bit for bit), the outputs go straight to Out. regs are the kernel's
// vector registers that are dead after its store (its accumulators, and more): tokens go in
// groups of (len(regs)-1)/2 on zmm, (len(regs)-2)/4 on ymm (four vectors a token).
type fuseEpi struct {
	T    int
	ymm  bool
	regs []VecPhysical
}

// gen writes the epilogue of the segment just stored below sums: it moves sums back over it
// (every segment reuses the first one's place) and counts EJ up.
func (fe *fuseEpi) gen(name string, a, sums, nseg Register) {
	T := fe.T
	nv, step, temps := 2, 64, 1 // vectors a token, their bytes, scratch registers
	if fe.ymm {
		nv, step, temps = 4, 32, 2
	}
	G := min(T, (len(fe.regs)-temps)/nv)
	if G < 1 {
		panic(name + ": too few free registers for the fused epilogue")
	}
	done := name + "_fused"
	e := GP64()
	MOVQ(at(a, gEpi), e)
	TESTQ(e, e)
	JZ(LabelRef(done))
	SUBQ(U32(128*T), sums)
	j := GP64()
	MOVQ(at(a, gEJ), j)
	tmp := fe.regs[nv*G]
	var tmp2 VecPhysical // ymm: the running sums, then the store masks
	if fe.ymm {
		tmp2 = fe.regs[nv*G+1]
	}
	for t0 := 0; t0 < T; t0 += G {
		n := min(G, T-t0)
		v := fe.regs[:nv*n]
		ws := GP64()
		MOVQ(at(e, epWSSeg), ws)
		IMULQ(j, ws)
		ADDQ(at(e, epWS), ws)
		c := tokBase(e, epCorr, epCorrStride, t0) // token t's Corr and XS at base + t*CorrStride + 4j
		for t := 0; t < n; t++ {
			if t > 0 {
				ADDQ(at(e, epCorrStride), c)
			}
			corr := Mem{Base: c, Index: j, Scale: 4}
			if fe.ymm {
				VPBROADCASTD(corr, tmp)
			}
			for i := 0; i < nv; i++ {
				r := v[nv*t+i]
				VMOVDQU32orY(!fe.ymm, at(sums, 128*(t0+t)+step*i), r)
				if fe.ymm {
					VPADDD(tmp, r, r)
				} else {
					VPADDD_BCST(corr, r, r)
				}
				VCVTDQ2PS(r, r)
				VMULPS(at(ws, step*i), r, r)
			}
		}
		x := tokBase(e, epXS, epCorrStride, t0)
		y := GP64()
		MOVQ(at(a, gEY), y)
		for t := 0; t < n; t++ {
			if t > 0 {
				ADDQ(at(e, epCorrStride), x)
			}
			xsm := Mem{Base: x, Index: j, Scale: 4}
			ys := tmp
			if fe.ymm {
				VBROADCASTSS(xsm, tmp)
				ys = tmp2
			}
			for i := 0; i < nv; i++ {
				r := v[nv*t+i]
				if fe.ymm {
					VDIVPS(tmp, r, r)
				} else {
					VDIVPS_BCST(xsm, r, r)
				}
				VMOVUPS(at(y, 128*(t0+t)+step*i), ys)
				VADDPS(r, ys, r) // y + p, y first as in the epilogues
			}
		}
		last, next := fmt.Sprintf("%s_fused%dlast", name, t0), fmt.Sprintf("%s_fused%dnext", name, t0)
		CMPQ(nseg, U8(1))
		JE(LabelRef(last))
		for k, r := range v {
			VMOVUPS(r, at(y, 128*t0+step*k))
		}
		JMP(LabelRef(next))
		Label(last)
		b := GP64()
		MOVQ(at(e, epBias), b)
		TESTQ(b, b)
		JZ(LabelRef(last + "out"))
		for k, r := range v {
			VADDPS(at(b, step*(k%nv)), r, r)
		}
		Label(last + "out")
		if !fe.ymm {
			rowMasksZ(at(e, epMask))
		}
		o := tokBase(e, epOut, epOutStride, t0)
		for t := 0; t < n; t++ {
			if t > 0 {
				ADDQ(at(e, epOutStride), o)
			}
			for i := 0; i < nv; i++ {
				if !fe.ymm {
					VMOVUPS(v[nv*t+i], []Register{K1, K2}[i], at(o, step*i))
					continue
				}
				VPBROADCASTD(at(e, epMask), tmp2)
				rowMaskY(rowsY, i, tmp2, tmp2)
				VMASKMOVPS(v[nv*t+i], tmp2, at(o, step*i))
			}
		}
		Label(next)
	}
	INCQ(j)
	MOVQ(j, at(a, gEJ))
	Label(done)
}

// tokBase returns token t0's pointer: the field at off of the block at b plus t0 times the
// stride at strideOff.
func tokBase(b Register, off, strideOff, t0 int) GPVirtual {
	p := GP64()
	MOVQ(at(b, off), p)
	if t0 > 0 {
		s := GP64()
		MOVQ(at(b, strideOff), s)
		IMUL3Q(U32(uint32(t0)), s, s)
		ADDQ(s, p)
	}
	return p
}

// tokX addresses T tokens' activations at a moving offset: for T <= 4 one pointer per
// token and a shared offset register; for more tokens (general registers run out) three
// bases (tokens 0, 3, 6) that move, plus the stride as a scaled index.
type tokX struct {
	a                  Register
	T, baseOff, strOff int
	ptrs               []GPVirtual
	kx, s              GPVirtual
}

func newTokX(a Register, T, baseOff, strideOff int) *tokX {
	x := &tokX{a: a, T: T, baseOff: baseOff, strOff: strideOff}
	if T <= 4 {
		x.ptrs = tokenPtrs(a, T, baseOff, strideOff)
		x.kx = GP64()
		XORQ(x.kx, x.kx)
		return x
	}
	x.s = ld(a, strideOff)
	x.ptrs = []GPVirtual{GP64(), GP64(), GP64()}
	x.load()
	return x
}

func (x *tokX) load() {
	MOVQ(at(x.a, x.baseOff), x.ptrs[0])
	for i := 1; i < 3; i++ {
		LEAQ(Mem{Base: x.ptrs[i-1], Index: x.s, Scale: 2}, x.ptrs[i])
		ADDQ(x.s, x.ptrs[i])
	}
}

// reset moves back to offset 0.
func (x *tokX) reset() {
	if x.T <= 4 {
		XORQ(x.kx, x.kx)
		return
	}
	x.load()
}

// mem is token t's activations at the current offset + disp.
func (x *tokX) mem(t, disp int) Mem {
	if x.T <= 4 {
		return idx(x.ptrs[t], x.kx, 1, disp)
	}
	b := x.ptrs[t/3]
	if t%3 == 0 {
		return at(b, disp)
	}
	return Mem{Base: b, Index: x.s, Scale: uint8(t % 3), Disp: disp}
}

// rewind moves the offset back by the bytes in n.
func (x *tokX) rewind(n Register) {
	if x.T <= 4 {
		SUBQ(n, x.kx)
		return
	}
	for _, p := range x.ptrs {
		SUBQ(n, p)
	}
}

// advance moves the offset by n bytes.
func (x *tokX) advance(n int) {
	if x.T <= 4 {
		ADDQ(U32(uint32(n)), x.kx)
		return
	}
	for _, p := range x.ptrs {
		ADDQ(U32(uint32(n)), p)
	}
}

// tokenPtrs loads T pointers base + t*stride from the argument block.
func tokenPtrs(a Register, T, baseOff, strideOff int) []GPVirtual {
	xs := make([]GPVirtual, T)
	for t := range xs {
		xs[t] = GP64()
	}
	loadTokenPtrs(a, xs, baseOff, strideOff)
	return xs
}

// loadTokenPtrs sets xs[t] = base + t*stride from the argument block (again, where a kernel
// has moved the pointers on).
func loadTokenPtrs(a Register, xs []GPVirtual, baseOff, strideOff int) {
	MOVQ(at(a, baseOff), xs[0])
	for t := 1; t < len(xs); t++ {
		MOVQ(xs[t-1], xs[t])
		ADDQ(at(a, strideOff), xs[t])
	}
}

// accSets takes sets groups of four accumulators per token from p (acc[t][s][j]) and
// returns them also as one list, for zeroAll.
func accSets(p *pool, T, sets int) (acc [][][4]VecPhysical, all []VecPhysical) {
	acc = make([][][4]VecPhysical, T)
	for t := range acc {
		acc[t] = make([][4]VecPhysical, sets)
		for s := range acc[t] {
			copy(acc[t][s][:], p.getn(4))
			all = append(all, acc[t][s][:]...)
		}
	}
	return acc, all
}

func zeroAll(rs ...VecPhysical) {
	for _, r := range rs {
		if r.Size() == 64 {
			VPXORD(r, r, r)
		} else {
			VPXOR(r, r, r)
		}
	}
}

func flat2(a [][2]VecPhysical) []VecPhysical {
	var out []VecPhysical
	for _, r := range a {
		out = append(out, r[:]...)
	}
	return out
}

func gemvName(f string, T int, isa string) string { return fmt.Sprintf("gemv%sT%d%s", f, T, isa) }

func gemvDoc(name, generic string, T int) string {
	return fmt.Sprintf("%s is the GEMV of one row block for %d token(s) (see gemvArgs); %s is its reference.", name, T, generic) + hwDoc()
}

// hwDoc is what a kernel's doc says of its prefetch when hardwarePrefetch or nonTemporal
// writes it.
func hwDoc() string {
	switch {
	case softPrefetch && ntaAhead > 0:
		return fmt.Sprintf(" Its pairs of row blocks prefetch the next pair into L2 only and mark their own weight lines non-temporal (prefetchnta %d bytes ahead), so that the stream leaves the tables in L1 (see kernels.Tuning).", ntaAhead)
	case softPrefetch:
		return ""
	case ntaAhead > 0:
		return fmt.Sprintf(" It leaves its weight stream to the hardware's prefetchers but marks each line non-temporal (prefetchnta %d bytes ahead), so that the stream leaves its tables in L1 (see kernels.Tuning).", ntaAhead)
	}
	return " It does not prefetch its weight stream in software (see kernels.Tuning)."
}

// ntaAhead, when not 0, is how many bytes ahead of its block a tl2 kernel issues
// prefetchnta for each of the block's five lines (see nonTemporal).
var ntaAhead = 0

// nonTemporal writes a tl2 kernel through gen whose weight lines are prefetched with
// prefetchnta ahead bytes ahead of their loads: the one-token blocks (tl2Blocks) of a
// kernel that hardwarePrefetch writes, and the pairs of row blocks (tl2Pairs), whose
// prefetch of the next pair then goes into L2 only. On Zen 4 the tl2 kernels of one and
// two tokens lost most of their time to table lines that the weight stream pushed out of
// L1 (see kernels.Tuning); a line fetched with prefetchnta goes first when its set needs
// room.
func nonTemporal(ahead int, gen func()) {
	ntaAhead = ahead
	defer func() { ntaAhead = 0 }()
	gen()
}

// shiftPipes is true while onShiftPipes writes a kernel.
var shiftPipes = false

// onShiftPipes writes the one-token tl2 kernel through gen with fewer operations a block
// for Zen 4 (tl2Block): the code shifts are vpsrlw instead of vpmultishiftqb, and each of
// the five planes stays in a register of its own, so that triple 15 is gathered at the
// end of the block with one vpsrlw and four vpshldw instead of a shift and a bit-select a
// plane: 47 vector operations a block instead of 52.
//
// Zen 4 runs a zmm vpermw on its FP1 and FP2 pipes, vpmultishiftqb (like vpdpbusd) on FP0
// and FP1, vpsrlw and vpshldw on FP2 and FP3, vpaddw and vpternlogd on any of the four, and
// a zmm operation takes two of them for a cycle (measured: eight independent operations of
// one kind a loop, 1 or 2 a cycle, then of two kinds, 1, 1.5 or 2). So the block is bound
// by its count of operations rather than by one pipe: a copy of its instructions over 512
// KB of weights in L2 ran 25.6 cycles a block instead of 29.5 (vpmultishiftqb with the new
// gather: 26.4-27.5). In the kernel, on weights resident in L2 or L3 (go test -bench,
// BITGO_BENCH_CACHE=1, 2560x2560 and 3072x960, six rounds in turn) the medians at one
// thread were 9-13% higher; from DRAM (the 8B shapes and 2560x2560, twelve rounds in turn) the medians were
// 2-9% higher at one thread and -1 to +21% at two, the i2s kernel alongside unchanged.
// The planes are taken in address order: gathering from plane 4 down with one plane
// register, as the kernels of more tokens do, loads the block's lines backwards, and that
// read 10-20% less from DRAM at one thread (10 rounds).
func onShiftPipes(gen func()) {
	shiftPipes = true
	defer func() { shiftPipes = false }()
	gen()
}

// gemvInt2Pair (T <= 2): 64 bytes (two 4-input units) per step. A vpermb pairs the two
// units' dwords (dword 2r+h = unit h, row r) so one broadcast qword of activations serves
// both; vpermb lookups in 64-entry tables decode the 2-bit codes of row groups 0-2 straight
// from the byte (the table ignores the other bits) and a 2-bit shift brings group 3 into
// reach. Tab: tabInt2Z.
func gemvInt2Pair(T int) {
	name := gemvName("Int2", T, "AVX512")
	a := fn(name, gemvDoc(name, "gemvInt2Generic (kstep 8)", T))
	p := newPool(true)
	w, kx := ld(a, gW), GP64()
	XORQ(kx, kx)
	xs := tokenPtrs(a, T, gX, gXStride)
	tab := ld(a, gTab)
	lut := p.getn(3)
	for i, r := range lut {
		VMOVDQU64(at(tab, 64*i), r)
	}
	perm := p.get()
	VMOVDQU64(pairPerm, perm)
	// acc[t][i][j]: token t, step copy i (two chains hide vpdpbusd's latency), row group j.
	acc, all := accSets(p, T, 2)
	wv, hi, x := p.get(), p.get(), p.get()
	v := p.getn(4)
	segLoop(name, a, 2, &fuseEpi{T: T, regs: all}, func() { zeroAll(all...) }, func(i int) {
		prefetchAhead(w, 0)
		VPERMB(at(w, 0), perm, wv)
		VPSRLW(U8(2), wv, hi)
		VPERMB(lut[0], wv, v[0])
		VPERMB(lut[1], wv, v[1])
		VPERMB(lut[2], wv, v[2])
		VPERMB(lut[2], hi, v[3])
		for t := range acc {
			VPBROADCASTQ(idx(xs[t], kx, 1, 0), x)
			for j := 0; j < 4; j++ {
				VPDPBUSD(x, v[j], acc[t][i][j])
			}
		}
		ADDQ(U8(64), w)
		ADDQ(U8(8), kx)
	}, func(sums Register) {
		tmp := p.get()
		VMOVDQU32(evenIdx, x)
		for t := range acc {
			for j := 0; j < 4; j++ {
				r := acc[t][0][j]
				VPADDD(acc[t][1][j], r, r)
				VPSRLQ(U8(32), r, tmp)
				VPADDD(tmp, r, r)
			}
			VPERMT2D(acc[t][0][1], x, acc[t][0][0])
			VPERMT2D(acc[t][0][3], x, acc[t][0][2])
			VMOVDQU32(acc[t][0][0], at(sums, 128*t))
			VMOVDQU32(acc[t][0][2], at(sums, 128*t+64))
		}
		p.put(tmp)
		ADDQ(U32(128*T), sums)
	})
	VZEROUPPER()
	RET()
}

// gemvInt2Split (T >= 3, and T = 1 table-free): one 32-byte unit per half-step, broadcast to both
// halves of a zmm; vpermi2b with 128-entry tables decodes rows 0-7 (code 0) into the low half and
// rows 8-15 (code 1) into the high half (bit 6 of the index, set in the high half, selects the
// table), and rows 16-31 likewise from the unit shifted right by 4: each vector holds 16 rows'
// dwords for one quad of inputs, multiplied with a broadcast dword of activations. Fewer shuffles
// per token than the pair layout, which matters when vpdpbusd is the limit.
//
// seq (gemvInt2Seq*: code books of consecutive levels, where u is the code itself, as in
// the default -2..1): no table. A byte's bits 0-1, 2-3, 4-5 and 6-7 belong to rows 0-7,
// 8-15, 16-23 and 24-31, so one mask per vector takes the codes in place where vpermi2b
// looked them up (0x03 and 0x0C in the two halves for rows 0-15, 0x30 and 0xC0 for rows
// 16-31: the codes times 1, 4, 16, 64, at most 192, still a u8), and the store divides each
// half's sums back (vpsravd by 0, 2, 4, 6: exact, every product being a multiple of the
// factor; |sum| <= 65536 x 192 x 128 < 2^31). Four tokens are bound by vpdpbusd, and the two
// vpermi2b per half-step share its pipes: without them a step of four tokens runs in 8.0
// cycles instead of 8.9 (L1-resident, Zen 5; 16 vpdpbusd alone take 8.0). On an Emerald
// Rapids Xeon, from L2 at one thread, against per-half variable shifts (4 vpsrlvd and 4 ands
// a step): one shift by 4 and 4 ands 7% faster for one token and 11-12% for three and four,
// the masks alone (4 ands) another 14% and 18%; from DRAM the masks were within the noise
// (-6 to +6%, eight rounds) and the one shift 7-9% faster for one token. On Zen 4 one
// token reads about 35 GB/s from cache at one thread (i2s 37); two copies of its step with
// chains of their own (eight accumulators) ran 1.00x from cache and 0.97-1.00x from DRAM
// (the 8B shapes and 2560x2560, one and two threads, nine rounds in turn): vpdpbusd's
// latency is not what bounds it. Nor is its prefetch distance: without software prefetch
// (as the ...HW variants) it ran 0.70-0.86x at one thread, 0.90-1.00x at two; 4 KiB into
// L2 instead of prefetchFar 0.75-0.92x at one thread, 16 KiB 0.95-1.03x. Nor are its
// operations, from DRAM: a step on one plain 64-byte load (the two units side by side, rows
// 8g..8g+7 of both by four masks 0x03<<2g, the activations as vpbroadcastq and a vpermd that
// spreads the two units' dwords over the halves; bit for bit the reference) read 43-44 GB/s
// from cache at one thread (1.18-1.20x: vbroadcasti64x4 takes a vector pipe there), yet
// from DRAM (the 8B shapes and 2560x2560, one and two threads, nine rounds in turn) it ran
// 0.86-0.98x with this prefetch, 0.98-1.03x with none, 0.98-1.01x 16 and 4 KiB ahead,
// 0.95-1.02x 4 and 1 KiB, 0.88-0.99x 8 and 4 KiB. A second build of it (`bitd bench -reads
// -tuning default,zen4`, the step under zen4 alone, 11 rounds, two runs of each prefetch)
// read 1.18-1.19x from cache at one and two threads, but from DRAM with no software
// prefetch 0.69-0.80x at one thread on the 8B shapes (2560x2560 0.98-1.00x) and 0.81x at
// two threads on shared cores (compute_scale 1.2), and with this prefetch 0.87-0.97x at one
// thread, 0.90-0.92x at two on shared cores, 0.95-0.99x on cores of their own: the cores'
// vector work is not what holds int2 below the roofline when two threads share a core
// either. vpdpbusd's embedded broadcast in place of vpbroadcastd ran 1.00x from cache. Two
// and four tokens run at the vpdpbusd peak from cache (26-27 and 14 GB/s at one thread).
func gemvInt2Split(T int, seq bool) {
	f, ref := "Int2", "gemvInt2Generic (kstep 8)"
	if seq {
		f, ref = "Int2Seq", "gemvInt2SeqGeneric"
	}
	name := gemvName(f, T, "AVX512")
	a := fn(name, gemvDoc(name, ref, T))
	p := newPool(true)
	w := ld(a, gW)
	xs := newTokX(a, T, gX, gXStride)
	var la, lb, m0f, sel VecPhysical
	var mask, fix [2]VecPhysical
	if seq {
		for g := range mask {
			mask[g], fix[g] = p.get(), p.get()
			VMOVDQU64(int2Mask[g], mask[g])
			VMOVDQU64(int2Fix[g], fix[g])
		}
	} else {
		tab := ld(a, gTab)
		la, lb = p.get(), p.get()
		VMOVDQU64(at(tab, 0), la)
		VMOVDQU64(at(tab, 64), lb)
		m0f, sel = p.get(), p.get()
		bcastByte(m0f, 0x0f)
		VMOVDQU64(selHigh, sel)
	}
	// acc[t][h][g]: token t, unit h of the step (two chains for T <= 4: vpdpbusd's latency),
	// rows 16g..16g+15.
	chains := 2
	if T > 4 {
		chains = 1
	}
	acc := make([][2][2]VecPhysical, T)
	var all []VecPhysical
	for t := range acc {
		for h := 0; h < chains; h++ {
			copy(acc[t][h][:], p.getn(2))
			all = append(all, acc[t][h][:]...)
		}
		if chains == 1 {
			acc[t][1] = acc[t][0]
		}
	}
	wv, hi, x := p.get(), p.get(), p.get()
	segLoop(name, a, 1, &fuseEpi{T: T, regs: all}, func() { zeroAll(all...) }, func(int) {
		prefetchAhead(w, 0)
		for h := 0; h < 2; h++ {
			VBROADCASTI64X4(at(w, 32*h), wv)
			if seq {
				VPANDD(mask[1], wv, hi)
				VPANDD(mask[0], wv, wv)
			} else {
				VPSRLW(U8(4), wv, hi)
				VPTERNLOGD(U8(0xEA), sel, m0f, wv) // (wv & m0f) | sel
				VPTERNLOGD(U8(0xEA), sel, m0f, hi)
				VPERMI2B(lb, la, wv)
				VPERMI2B(lb, la, hi)
			}
			for t := range acc {
				VPBROADCASTD(xs.mem(t, 4*h), x)
				VPDPBUSD(x, wv, acc[t][h][0])
				VPDPBUSD(x, hi, acc[t][h][1])
			}
		}
		ADDQ(U8(64), w)
		xs.advance(8)
	}, func(sums Register) {
		for t := range acc {
			for g := 0; g < 2; g++ {
				if chains == 2 {
					VPADDD(acc[t][1][g], acc[t][0][g], acc[t][0][g])
				}
				if seq {
					VPSRAVD(fix[g], acc[t][0][g], acc[t][0][g])
				}
				VMOVDQU32(acc[t][0][g], at(sums, 128*t+64*g))
			}
		}
		ADDQ(U32(128*T), sums)
	})
	VZEROUPPER()
	RET()
}

// gemvI2SPairZ (gemvI2SLongT1AVX512) is gemvI2SZ for one token on two row quads a pass, for
// a long K (the driver's i2sLongK): each broadcast of a run's activations serves eight rows
// instead of four. The one-token kernel re-reads the activations once per pass over K, K
// bytes of weights apart, and at a long K those re-reads held it back: reading them from one
// fixed place instead (wrong sums, timing only), from DRAM on a 2-vCPU Xeon guest with a 480
// MiB L3, 4096x14336 and 4096x16384 read 96-99% of the roofline against 81-83 at one thread,
// 92-95 against 84-88 at two. Two quads' streams run side by side, K bytes apart: quad A's
// far prefetch turns, once it would pass A's end (which quad B's prefetch reads on into: the
// next pass's A), to the next pass's B (2*Aux on), so it needs K >= 2*i2sFar. From DRAM,
// two runs in turn: 4096x14336 95% of the roofline at one thread and 90-93 at two, against
// 81-82 and 82-85 one quad a pass. At a short K the two streams' prefetches cross (14336x4096
// and 2560x2560 read 77-86% against 87-94 with an earlier form of the turn).
func gemvI2SPairZ() {
	name := "gemvI2SLongT1AVX512"
	a := fn(name, name+" is gemvI2ST1AVX512 for a long K (Kp >= 2*4096, two row quads a pass); gemvI2SGeneric is its reference.")
	p := newPool(true)
	xs := newTokX(a, 1, gX, gXStride)
	mask := runMasks(p)
	var acc [2][2][]VecPhysical // [quad][row pair][run]
	var all []VecPhysical
	for q := range acc {
		for r := range acc[q] {
			acc[q][r] = p.getn(4)
			all = append(all, acc[q][r]...)
		}
	}
	wv := [2][]VecPhysical{p.getn(2), p.getn(2)}
	tmp := p.getn(4)
	x := p.get()
	aux, fa, turn := GP64(), GP64(), GP64() // quad bytes; quad A's far prefetch distance; blocks until it turns
	MOVQ(at(a, gAux), aux)
	i2sQuadSegsBy(name, a, 1, 2, func(w, quad Register) {
		xs.reset()
		MOVQ(U32(i2sFar), fa)
		MOVQ(aux, turn)
		SUBQ(U32(i2sFar), turn)
		SHRQ(U8(7), turn)
	}, func(w, cnt, sums Register) {
		zeroAll(all...)
		Label(name + "_blk")
		for off := 0; off < 128; off += 64 {
			prefetchLine(idx(w, fa, 1, off), at(w, prefetchNear+off))
			prefetchLine(idx(w, aux, 1, i2sFar+off), idx(w, aux, 1, prefetchNear+off))
		}
		DECQ(turn)
		JNZ(LabelRef(name + "_ahead"))
		LEAQ(Mem{Base: fa, Index: aux, Scale: 2}, fa)
		Label(name + "_ahead")
		for r := 0; r < 2; r++ {
			VMOVDQU64(at(w, 64*r), wv[0][r])
			VMOVDQU64(idx(w, aux, 1, 64*r), wv[1][r])
		}
		for s := 0; s < 4; s++ {
			VBROADCASTI64X4(xs.mem(0, 32*s), x)
			for q := 0; q < 2; q++ {
				for r := 0; r < 2; r++ {
					c := tmp[2*q+r]
					VPANDD(mask[s], wv[q][r], c)
					VPDPBUSD(x, c, acc[q][r][s])
				}
			}
		}
		SUBQ(I8(-128), w)
		xs.advance(128)
		DECQ(cnt)
		JNZ(LabelRef(name + "_blk"))
		// rows 4q..4q+3 of each quad -> 4 dwords at sums + 16q
		y, c, t := tmp[0], tmp[1], tmp[2]
		VMOVDQU32(i2sGather, y)
		for q := 0; q < 2; q++ {
			for r := 0; r < 2; r++ {
				foldRuns(acc[q][r])
			}
			quadRowSums(acc[q][0][0], acc[q][1][0], c, t, y)
			VMOVDQU32(c.AsX(), at(sums, 16*q))
		}
	})
}

// runMasks returns the masks that take each 32-input run's codes in place from an i2s byte:
// mask[s] keeps run s's two bits, the code times 4^(3-s) (run 3's mask is taken first).
func runMasks(p *pool) (mask [4]VecPhysical) {
	for _, s := range []int{3, 0, 1, 2} {
		mask[s] = p.get()
		bcastByte(mask[s], byte(3<<(6-2*s)))
	}
	return mask
}

// foldRuns folds a row pair's four run accumulators (codes taken in place, times 64, 16, 4
// and 1) into the first: runs 0-2 divided back by arithmetic shifts, then added.
func foldRuns(acc []VecPhysical) {
	for i := 0; i < 3; i++ {
		VPSRAD(U8(6-2*i), acc[i], acc[i])
	}
	for i := 1; i < 4; i++ {
		VPADDD(acc[i], acc[0], acc[0])
	}
}

// quadRowSums sums a row quad's accumulators to dwords 0-3 of c: lo holds rows 0 and 1 (128-bit
// lanes 0-1 and 2-3), hi rows 2 and 3; x is scratch and gather holds i2sGather.
func quadRowSums(lo, hi, c, x, gather VecPhysical) {
	VSHUFI64X2(U8(0x88), hi, lo, c) // lanes lo[0], lo[2], hi[0], hi[2]
	VSHUFI64X2(U8(0xDD), hi, lo, x) // lanes lo[1], lo[3], hi[1], hi[3]
	VPADDD(x, c, c)                 // lane r: row r's partial sums
	VPSHUFD(U8(0x4E), c, x)
	VPADDD(x, c, c)
	VPSHUFD(U8(0xB1), c, x)
	VPADDD(x, c, c)
	VPERMD(c, gather, c)
}

// quadDist returns a new register holding the argument block's field off, or field late
// from row quad from on.
func quadDist(a, quad Register, off, late int, from uint8) GPVirtual {
	d := GP64()
	MOVQ(at(a, off), d)
	CMPQ(quad, U8(from))
	CMOVQGE(at(a, late), d)
	return d
}

// i2sQuads emits the loop nest of the i2s GEMV kernels: a row block's eight row quads,
// each a contiguous stream of Aux bytes, each over its segments, each over its steps of one
// 128-byte block, prefetched i2sFar and prefetchNear ahead (or, with argPF, PF ahead in quads 0-6 and
// PF7 in quad 7, and into L2 Far ahead in quads 0-5 and Far6 in quads 6-7: gemvArgs). Per
// segment zero clears the accumulators and reduce stores the quad's four rows of each token
// at sums + 128t; block computes one step at w; xReset and xAdvance move the activations
// back to offset 0 and on by 128 bytes.
func i2sQuads(name string, a Register, T int, argPF bool, zero func(), block func(w Register), xReset, xAdvance func(), reduce func(sums Register)) {
	var prefetch func(w Register, off int)
	quadStart := func(w, quad Register) {
		xReset()
		prefetch = func(w Register, off int) { prefetchAheadBy(w, i2sFar, off) }
		if argPF {
			near, far := quadDist(a, quad, gPF, gPF7, 7), quadDist(a, quad, gFar, gFar6, 6)
			prefetch = func(w Register, off int) { prefetchLine(idx(w, far, 1, off), idx(w, near, 1, off)) }
		}
	}
	i2sQuadSegs(name, a, T, quadStart, func(w, cnt, sums Register) {
		zero()
		Label(name + "_blk")
		prefetch(w, 0)
		prefetch(w, 64)
		block(w)
		SUBQ(I8(-128), w)
		xAdvance()
		DECQ(cnt)
		JNZ(LabelRef(name + "_blk"))
		reduce(sums)
	})
}

// i2sQuadSegs emits the outer loops of the i2s GEMV kernels: a row block's eight row quads,
// each a contiguous stream of Aux bytes, each over its segments. quadStart runs at each
// quad's start (w at the quad's first byte); seg runs each segment of cnt steps (128-byte
// blocks) from w, leaves w at its end and stores the quad's four rows of each token at sums +
// 128t. Both may use cnt, w and quad as they wish otherwise.
func i2sQuadSegs(name string, a Register, T int, quadStart func(w, quad Register), seg func(w, cnt, sums Register)) {
	i2sQuadSegsBy(name, a, T, 1, quadStart, seg)
}

// i2sQuadSegsBy is i2sQuadSegs taking per (1 or 2) row quads a pass: seg then runs quads
// q..q+per-1, the first's stream at w and the second's Aux bytes on, and stores the second's
// rows 16 bytes after the first's.
func i2sQuadSegsBy(name string, a Register, T, per int, quadStart func(w, quad Register), seg func(w, cnt, sums Register)) {
	quad, wq, sumsQ := GP64(), GP64(), GP64()
	XORQ(quad, quad)
	MOVQ(at(a, gSums), sumsQ)
	MOVQ(at(a, gW), wq)
	Label(name + "_quad")
	w, nseg, sums := GP64(), GP64(), GP64()
	MOVQ(wq, w)
	quadStart(w, quad)
	MOVQ(at(a, gNSeg), nseg)
	MOVQ(sumsQ, sums)
	Label(name + "_seg")
	seg(w, segCount(a, nseg, gemvLoop), sums)
	ADDQ(U32(128*T), sums)
	DECQ(nseg)
	JNZ(LabelRef(name + "_seg"))
	for range per {
		ADDQ(at(a, gAux), wq)
	}
	ADDQ(U8(16*per), sumsQ)
	if per == 1 {
		INCQ(quad)
	} else {
		ADDQ(U8(per), quad)
	}
	CMPQ(quad, U8(8))
	JNE(LabelRef(name + "_quad"))
	VZEROUPPER()
	RET()
}

// gemvI2SZ (T = 1, 2): i2s on zmm, one row quad at a time (its blocks are one
// contiguous stream): a zmm holds two rows' 32-byte pieces of a 128-input block; masks give
// the codes of each 32-input run, multiplied with the activations of that run broadcast to
// both halves. Per segment each row's 8 lanes are reduced and stored. Aux: bytes per quad.
// (More tokens run in groups of at most four: gemvI2SRowZ for three and four.)
//
// Each run has its own accumulators, so run s's codes are taken in place, unshifted (w & 0xC0,
// w & 0x30, w & 0x0C, w & 0x03: the code times 64, 16, 4, 1, at most 192, still a u8), and its
// sums are divided back by an arithmetic shift before the reduction: exact, since every
// product is a multiple of the factor, and |sum| <= K/32 x 192 x 128 = 768 K stays inside
// int32 for K <= MaxDim. The six shifts the block saves take it from about 7.5 to 6.3 cycles
// in L1 (one token). From DRAM on an Emerald Rapids Xeon one token reads 89% of the roofline
// (median of six rounds, the 8B shapes, one thread); with its arithmetic taken out (the same
// loads and prefetches, an add per vector) 94-95%, where int8 reads 97-99: the ands and
// multiplies cost about five points of overlap there, the loop's shape the rest.
func gemvI2SZ(T int) {
	if T == 3 || T == 4 {
		gemvI2SRowZ(T)
		return
	}
	gemvI2SZNamed(T, gemvName("I2S", T, "AVX512"))
}

// gemvI2SZNamed writes gemvI2SZ's kernel for T = 1 or 2 as function name.
func gemvI2SZNamed(T int, name string) {
	a := fn(name, gemvDoc(name, "gemvI2SGeneric", T))
	p := newPool(true)
	xs := newTokX(a, T, gX, gXStride)
	mask := runMasks(p)
	acc := make([][2][]VecPhysical, T) // [t][row pair][run]
	var all []VecPhysical
	for t := range acc {
		for r := range acc[t] {
			acc[t][r] = p.getn(4)
			all = append(all, acc[t][r]...)
		}
	}
	wv := p.getn(2)
	x := p.get()
	cls := p.getn(8) // cls[2s+r]: run s of row pair r
	c := cls[0]
	i2sQuads(name, a, T, false, func() { zeroAll(all...) }, func(w Register) {
		VMOVDQU64(at(w, 0), wv[0])
		VMOVDQU64(at(w, 64), wv[1])
		for s := 0; s < 4; s++ {
			for r := 0; r < 2; r++ {
				VPANDD(mask[s], wv[r], cls[2*s+r])
			}
		}
		for s := 0; s < 4; s++ {
			for t := range acc {
				VBROADCASTI64X4(xs.mem(t, 32*s), x)
				for r := 0; r < 2; r++ {
					VPDPBUSD(x, cls[2*s+r], acc[t][r][s])
				}
			}
		}
	}, xs.reset, func() { xs.advance(128) }, func(sums Register) {
		// per token, rows 4q..4q+3 -> 4 dwords at sums + 128t.
		y := p.get()
		VMOVDQU32(i2sGather, y)
		for t := range acc {
			for r := 0; r < 2; r++ {
				foldRuns(acc[t][r])
			}
			quadRowSums(acc[t][0][0], acc[t][1][0], c, x, y)
			VMOVDQU32(c.AsX(), at(sums, 128*t))
		}
		p.put(y)
	})
}

// gemvI2SRowZ (T = 3, 4): i2s on zmm, one row quad at a time like gemvI2SZ, but each row's
// 32-byte piece is broadcast to both halves, so a vector holds one row's codes of two
// consecutive 32-input runs and multiplies a plain 64-byte load of activations. A broadcast
// load of activations per token and run (gemvI2SZ) costs more than a broadcast load per row
// once several tokens share each row. Runs 0 and 1 sit in bits 7-6 and 5-4 of a byte, runs 2
// and 3 in bits 3-2 and 1-0: one vgf2p8affineqb per vector, its matrix taking one field in
// the low half and the other in the high, brings them down to plain codes (i2sRuns). Per
// block: 8 of them beside the 32 vpdpbusd of four tokens. They replaced a shift and two
// masks per row (the low half's codes times 4, divided back at the end): a copy of the
// four-token block loop on L1-resident weights took 24.4 cycles instead of 26.4 on an
// Emerald Rapids Xeon, where the vpdpbusd and loads alone take 20; per-half variable shifts
// (8 vpsrlvq) had been 10% slower than the shift and masks. The prefetch distance (PF, PF7)
// and Acc come from the driver, which runs a long K in parts (gemvParts).
//
// What holds four tokens back from DRAM (2-vCPU Xeon guest, 480 MiB L3; the kernel called
// row block by row block over 1 GiB, K = 4096, one thread): it reads 10.5-11.6 GB/s where it
// runs 18-19 from L1 or L2 and one token 16. The prefetch distances do not move it (L1 0.5-4
// KiB ahead, L2 1-64 KiB or none: 10.4-11.4 GB/s), and without software prefetch it reads
// 5.4. Taking work out did little: no vgf2p8affineqb 10.9, no activation loads 10.7, neither
// 12.5, vpaddd for vpdpbusd 10.6, the weights as two 64-byte loads and four vshufi64x2 11.9,
// loaded one block ahead 9.9; no placement of the block loop (its first byte at 0-62 mod
// 64, or a 2-28-byte nop inside it) read more than 11.7. Cut to its two loads, four
// prefetches and 32 vpdpbusd it read 17.2-17.8, but one vpdpbusd or two zeroing vpxord more
// a block took it to 12-14, and moving that loop by 4 bytes to 12.3. The profile's samples
// sit on the prefetch instructions and the first weight load: the stream stalls there, and
// how far it overlaps the arithmetic turned on the loop's instructions and their placement
// more than on the vector pipes' load (why, this guest's missing counters do not tell).
func gemvI2SRowZ(T int) { gemvI2SRowZNamed(T, gemvName("I2S", T, "AVX512"), rowAffine) }

// rowDecode is how gemvI2SRowZNamed takes a row's codes from its broadcast piece.
type rowDecode int

const (
	// rowAffine: plain codes by vgf2p8affineqb (i2sRuns), one accumulator a row.
	rowAffine rowDecode = iota
	// rowMasked: codes in place by a vpandd per vector (i2sRowMask), one set of
	// accumulators for runs 0 and 1, one for runs 2 and 3 (their factors differ), divided
	// back by i2sRowFix.
	rowMasked
	// rowShifted: runs 2 and 3 in place by a vpandd (i2sRowMask[1]: the code times 4 in
	// the low half, 1 in the high), runs 0 and 1 shifted down by 4 first and masked the
	// same way, so both share one accumulator a row, divided back by i2sRowFix[1].
	rowShifted
)

// rowPad is how many chains of one vpaddd a block, which nothing reads, the one-token row
// kernel (gemvI2SRowT1AVX512, which only the zen4 tuning runs) carries beside its work. On
// Zen 4 they make its weight stream from DRAM faster, for a reason not found (stop 62 saw the
// same in C: three chains, +3-9%); from L2 and L3 they cost what they take (512x14336 and
// 2048x8192 cache-resident: 37-38 -> 32 GB/s, 0.86-0.88x). Two builds of one source differed
// by as much as this when run from two byte copies of one binary, so it was measured within
// one process: `bitd bench -format i2s -n 1 -rounds 21` over tunings whose row kernels had 0
// to 6 chains, paired by round, with each order of the runners once. Against none, one
// thread: 4096x14336 +3.8-8.0% (one chain +3.8, two +8.0, three +5.2 and +6.2, four +6.5 and
// +7.3, six +6.6), 2048x8192 +0.2-8.0% (four +3.8 and +8.0, six +0.2); two threads +0.7-6.2%
// but four -1.4 once (the slow memory state); 14336x4096, whose one-token calls run another
// kernel, moved 0.972-1.019 meanwhile. With four, one thread read 90.8-96.1% of the roofline
// on those two shapes against 86.7-89.2.
const rowPad = 4

// gemvI2SRowZNamed writes gemvI2SRowZ's kernel for T tokens as function name. For one
// token it is gemvI2SRowT1AVX512, the one-token kernel for a long K where kernels.Tuning
// picks it: what counts there is that its activations come as two 64-byte loads a block,
// and its prefetch distances from the driver.
//
// One token takes its codes in place instead (rowMasked), with a vpandd per vector
// (i2sRowMask: the code times 64 in the low half and 16 in the high for runs 0 and 1, 4
// and 1 for runs 2 and 3), into two sets of accumulators whose halves are divided back by
// vpsravd (i2sRowFix) before the reduction, exact as in gemvI2SZ. On Zen 4 vgf2p8affineqb shares
// the two vector pipes that run vpdpbusd and an and does not: with the affine form one
// token ran 28.4 GB/s on 4096x14336 even from L3 (two sets of accumulators with it: 28.2,
// so not vpdpbusd's latency), with the ands 36.9; from DRAM at one thread 90-93% of the
// roofline against 85-89 (2048x8192 and 4096x10240: 88-91 against 85-87; two threads on
// 4096x14336 94-95 against 85; `bitd bench`, 2-3 rounds of each build in turn).
//
// Three and four tokens on Zen 4 run rowShifted (gemvI2SAndT3AVX512, gemvI2SAndT4AVX512,
// which kernels.Tuning picks there): a shift and two ands a row instead of the two
// vgf2p8affineqb, off the pipes of the 32 vpdpbusd. From L3 four tokens then ran at 90-91%
// of the int8 peak on the 8B shapes against 76; from DRAM, three and four tokens took
// 15-25% less time at one and two threads (8B shapes, 2560x2560, two rounds each). The
// Xeon measurement above keeps rowAffine the default. Two tokens on Zen 4 run rowMasked
// (gemvI2SAndT2AVX512, 16 accumulators) in place of gemvI2SZ's two, whose eight
// broadcast loads of activations a block load Zen 4's one 64-byte load a cycle: from L3 on
// 4096x14336 94% of the int8 peak against 79; from DRAM at one thread 80-85% of the
// roofline against 49-55 on 4096x14336 and 2048x8192, 71-79 against 58-69 on the other
// shapes of the bench; at two threads 95-99 against 86-95 (2560x2560: 92-93 against 92-97).
func gemvI2SRowZNamed(T int, name string, dec rowDecode) {
	a := fn(name, gemvDoc(name, "gemvI2SGeneric", T))
	p := newPool(true)
	xs := newTokX(a, T, gX, gXStride)
	runs := p.getn(2)
	sets := 1
	switch dec {
	case rowMasked:
		sets = 2
		VMOVDQU64(i2sRowMask[0], runs[0])
		VMOVDQU64(i2sRowMask[1], runs[1])
	case rowShifted:
		VMOVDQU64(i2sRowMask[1], runs[0])
	default:
		VMOVDQU64(i2sRuns[0], runs[0])
		VMOVDQU64(i2sRuns[1], runs[1])
	}
	// acc[t][0][r]: token t, row r of the quad (two dot products per block each; rowMasked:
	// acc[t][j][r] takes runs 2j and 2j+1, one a block).
	acc, all := accSets(p, T, sets)
	cls := p.getn(8) // cls[2r+j]: row r, runs 2j and 2j+1
	xv := p.getn(2)
	var pad []VecPhysical // (one token: rowPad's chains)
	if T == 1 {
		pad = p.getn(rowPad)
		zeroAll(pad...)
	}
	i2sQuads(name, a, T, true, func() { zeroAll(all...) }, func(w Register) {
		for _, d := range pad {
			VPADDD(d, d, d)
		}
		for r := 0; r < 4; r++ {
			c0, c1 := cls[2*r], cls[2*r+1]
			VBROADCASTI64X4(at(w, 32*r), c1)
			switch dec {
			case rowMasked:
				VPANDD(runs[0], c1, c0)
				VPANDD(runs[1], c1, c1)
			case rowShifted:
				VPSRLD(U8(4), c1, c0)
				VPANDD(runs[0], c0, c0)
				VPANDD(runs[0], c1, c1)
			default:
				VGF2P8AFFINEQB(U8(0), runs[0], c1, c0)
				VGF2P8AFFINEQB(U8(0), runs[1], c1, c1)
			}
		}
		for t := range acc {
			VMOVDQU64(xs.mem(t, 0), xv[0])
			VMOVDQU64(xs.mem(t, 64), xv[1])
			for r := 0; r < 4; r++ {
				for j := 0; j < 2; j++ {
					VPDPBUSD(xv[j], cls[2*r+j], acc[t][j%sets][r])
				}
			}
		}
	}, xs.reset, func() { xs.advance(128) }, func(sums Register) {
		// per token, rows 4q..4q+3 -> 4 dwords at sums + 128t (added in parts after the first).
		y, u, v := cls[0], cls[1], cls[2]
		VMOVDQU32(i2sGather, y)
		for t := range acc {
			s := acc[t][0]
			switch dec {
			case rowMasked:
				VMOVDQU64(i2sRowFix[0], u)
				VMOVDQU64(i2sRowFix[1], v)
				for r := range s {
					VPSRAVD(u, s[r], s[r])
					VPSRAVD(v, acc[t][1][r], acc[t][1][r])
					VPADDD(acc[t][1][r], s[r], s[r])
				}
			case rowShifted:
				VMOVDQU64(i2sRowFix[1], u)
				for r := range s {
					VPSRAVD(u, s[r], s[r])
				}
			}
			// 128-bit lanes: s0, s1 -> [s0.0+s0.2, s0.1+s0.3, s1.0+s1.2, s1.1+s1.3]
			for i := 0; i < 4; i += 2 {
				VSHUFI64X2(U8(0x44), s[i+1], s[i], u)
				VSHUFI64X2(U8(0xEE), s[i+1], s[i], v)
				VPADDD(v, u, s[i])
			}
			quadRowSums(s[0], s[2], u, v, y)
			st := fmt.Sprintf("%s_st%d", name, t)
			CMPQ(at(a, gAcc), U8(0))
			JE(LabelRef(st))
			VPADDD(at(sums, 128*t), u.AsX(), u.AsX())
			Label(st)
			VMOVDQU32(u.AsX(), at(sums, 128*t))
		}
	})
}

// gemvInt8Z: int8 on zmm, four 128-byte units (16 inputs) per step; each unit is two
// vectors of 16 rows' dwords, made unsigned (xor 0x80: u = w+128) and multiplied with a
// broadcast dword of activations.
func gemvInt8Z(T int) {
	name := gemvName("Int8", T, "AVX512")
	a := fn(name, gemvDoc(name, "gemvInt8Generic (offset)", T))
	p := newPool(true)
	w := ld(a, gW)
	xs := newTokX(a, T, gX, gXStride)
	m80 := p.get()
	bcastByte(m80, 0x80)
	sets := 4
	if T >= 3 {
		sets = 2
	}
	if T >= 5 {
		sets = 1
	}
	acc := make([][][2]VecPhysical, T)
	var all []VecPhysical
	for t := range acc {
		for i := 0; i < sets; i++ {
			var r [2]VecPhysical
			copy(r[:], p.getn(2))
			acc[t] = append(acc[t], r)
			all = append(all, r[:]...)
		}
	}
	wv := p.getn(2)
	x := p.get()
	segLoop(name, a, 1, &fuseEpi{T: T, regs: all}, func() { zeroAll(all...) }, func(int) {
		for u := 0; u < 4; u++ {
			prefetchAheadBy(w, int8Far, 128*u)
			prefetchAheadBy(w, int8Far, 128*u+64)
			VPXORD(at(w, 128*u), m80, wv[0])
			VPXORD(at(w, 128*u+64), m80, wv[1])
			for t := range acc {
				VPBROADCASTD(xs.mem(t, 4*u), x)
				VPDPBUSD(x, wv[0], acc[t][u%sets][0])
				VPDPBUSD(x, wv[1], acc[t][u%sets][1])
			}
		}
		ADDQ(U32(512), w)
		xs.advance(16)
	}, func(sums Register) {
		for t := range acc {
			for g := 0; g < 2; g++ {
				for i := 1; i < sets; i++ {
					VPADDD(acc[t][i][g], acc[t][0][g], acc[t][0][g])
				}
				VMOVDQU32(acc[t][0][g], at(sums, 128*t+64*g))
			}
		}
		ADDQ(U32(128*T), sums)
	})
	VZEROUPPER()
	RET()
}

// Argument block offsets: kernels.lutArgs.
const (
	lW, lRBBytes, lNRB, lSums, lTab, lTabStride, lBlocks, lUnits = 0, 8, 16, 24, 32, 40, 48, 56
	lBX, lBTab, lBN, lBPer, lNext, lPF, lBDone, lTurn            = 64, 72, 80, 88, 96, 104, 112, 120
)

// takeChunk returns a new register c = min(n, most) and subtracts c from n: the next chunk
// of a loop whose int16 sums are flushed every most iterations.
func takeChunk(n Register, most uint32) GPVirtual {
	c := GP64()
	MOVQ(U32(most), c)
	CMPQ(n, c)
	CMOVQLT(n, c)
	SUBQ(c, n)
	return c
}

// lutState is the register state of the zmm lookup-table kernels (tl1, tl2).
type lutState struct {
	p                       *pool
	T                       int
	w, pf, kt               GPVirtual       // weight pointer, prefetch pointer (same place, next row block), table offset
	tabs                    []GPVirtual     // token tables
	acc16                   [][]VecPhysical // [token][chain]: vpaddw's 2-cycle latency wants several chains
	acc32                   [][2]VecPhysical
	m0f, dup, wz, i0, i1, l VecPhysical   // dup: dupBytes
	off0, off1              VecPhysical   // tl1Units' index offsets: words 0x1000 and 0x3020
	top, x, l2              VecPhysical   // tl2: the word sign bit (one token), triple 15's code being gathered, a second lookup result
	planes                  []VecPhysical // tl2, one token, shiftPipes: the block's five planes
	sh5, sh10               VecPhysical   // tl2: vpmultishiftqb controls, each word shifted right by 5 and 10 (shiftCtl; pairCtl with bytes)
	// bytes: tl2 with three or four tokens looks up tabTL2B byte planes with vpermb
	// (tl2Block). Its constants (sh0, sh5, sh10, m1f) and tl1Units' (m0f, dup, off0,
	// off1) share four registers, each loop loading its own (tl2Consts, tl1Consts).
	bytes bool
	sh0   VecPhysical // bytes: pairCtl(0)
	m1f   VecPhysical // bytes: words 0x1f1f
	hi    VecPhysical // bytes: words 0x2000
}

// lutChains is the number of int16 chains per token: with one token four chains keep
// vpaddw's latency off the critical path (tl2 looks up 16 entries per block, tl1 4 per
// iteration); two otherwise (tl1 with more than two tokens: one).
func lutChains(T int, tl2 bool) int {
	switch {
	case T == 1:
		return 4
	case tl2 || T <= 2:
		return 2
	}
	return 1
}

func newLUTState(a Register, T int, tl2 bool) *lutState {
	s := &lutState{p: newPool(true), T: T, bytes: tl2 && T >= 3}
	s.w, s.pf, s.kt = GP64(), GP64(), GP64()
	s.tabs = tokenPtrs(a, T, lTab, lTabStride)
	s.m0f, s.dup, s.off0, s.off1 = s.p.get(), s.p.get(), s.p.get(), s.p.get()
	if s.bytes {
		s.sh0, s.sh5, s.sh10, s.m1f = s.m0f, s.dup, s.off0, s.off1
		s.hi = s.p.get()
		bcastWord(s.hi, 0x2000)
	} else {
		s.tl1Consts()
	}
	for t := 0; t < T; t++ {
		s.acc16 = append(s.acc16, s.p.getn(lutChains(T, tl2)))
	}
	for t := 0; t < T; t++ {
		var r [2]VecPhysical
		copy(r[:], s.p.getn(2))
		s.acc32 = append(s.acc32, r)
	}
	s.wz, s.i0, s.i1, s.l = s.p.get(), s.p.get(), s.p.get(), s.p.get()
	if tl2 {
		s.x, s.l2 = s.p.get(), s.p.get()
	}
	if tl2 && T == 1 && shiftPipes {
		s.planes = append([]VecPhysical{s.wz}, s.p.getn(4)...)
	}
	if tl2 && !s.bytes && !shiftPipes {
		s.sh5, s.sh10 = s.p.get(), s.p.get()
		bcastQword(s.sh5, shiftCtl(5))
		bcastQword(s.sh10, shiftCtl(10))
		if T == 1 { // the bit-select of tl2Block's gather
			s.top = s.p.get()
			bcastWord(s.top, 0x8000)
		}
	}
	return s
}

// advancePF moves the prefetch pointer on by n with the weight stream, in kernels that
// prefetch in software (prefetchLine emits nothing in the others).
func (s *lutState) advancePF(n Op) {
	if softPrefetch {
		ADDQ(n, s.pf)
	}
}

// tl1Consts loads tl1Units' constants.
func (s *lutState) tl1Consts() {
	bcastByte(s.m0f, 0x0f)
	VMOVDQU64(dupBytes, s.dup)
	bcastWord(s.off0, 0x1000)
	bcastWord(s.off1, 0x3020)
}

// tl2Consts loads the constants of tl2Block's byte-plane lookups.
func (s *lutState) tl2Consts() {
	bcastQword(s.sh0, pairCtl(0))
	bcastQword(s.sh5, pairCtl(5))
	bcastQword(s.sh10, pairCtl(10))
	bcastWord(s.m1f, 0x1f1f)
}

// flush adds the int16 sums into the int32 accumulators (rows 0-15, 16-31). With paired,
// chains 2i+1 are first added into chains 2i in int16, halving the widening, which the
// caller's flush count must allow (tl2Blocks with one token's four chains: a pair of chains
// takes at most 10 blocks of 8 lookups of |entry| <= 381). The chains are left as they are:
// every loop that flushes zeroes them as it starts its next run.
func (s *lutState) flush(paired bool) {
	for t := 0; t < s.T; t++ {
		for i, c := range s.acc16[t] {
			if paired {
				if i%2 == 1 {
					continue
				}
				VPADDW(s.acc16[t][i+1], c, c)
			}
			VPMOVSXWD(c.AsY(), s.l)
			VPADDD(s.l, s.acc32[t][0], s.acc32[t][0])
			VEXTRACTI64X4(U8(1), c, s.l.AsY())
			VPMOVSXWD(s.l.AsY(), s.l)
			VPADDD(s.l, s.acc32[t][1], s.acc32[t][1])
		}
	}
}

func (s *lutState) zero16() {
	for _, c := range s.acc16 {
		zeroAll(c...)
	}
}

// lookup adds tl1 table entries (the 64-byte byte-plane table at the token's table + kt +
// off) indexed by idx (each word's two byte indexes, tl1Units) to the int16 accumulators.
func (s *lutState) lookup(idxv VecPhysical, off, chain int) {
	for t := 0; t < s.T; t++ {
		c := s.acc16[t][chain%len(s.acc16[t])]
		VPERMB(idx(s.tabs[t], s.kt, 1, off), idxv, s.l)
		VPADDW(s.l, c, c)
	}
}

// tl1Units runs n (a register, may be 0) tl1 units, two per iteration (one prefetch per
// 64-byte line), then an odd one. A unit adds to chains 2*(u%2) and 2*(u%2)+1 (modulo the
// token's chains), at most 256 per entry, so flushing every 32*chains units keeps a chain
// within 64 entries (16384). Against one unit per iteration with two chains for one token:
// 12-21% faster cache-resident, neutral from DRAM on this machine's slower memory.
//
// The lookups are vpermb on byte tables (tabTL1Z: a pair's 16 low bytes, then its 16 high
// bytes; the other pair's the same), one micro-op where vpermw is two (a port-0 and a
// port-5 one, on an Emerald Rapids Xeon): a vpermb copies each byte of the unit to both
// bytes of its row's word, and a bit-select per pair makes the word's indexes, the nibble
// in the low byte and the nibble plus 16 in the high (the second pair: the high nibble,
// shifted down, plus 32 and 48), so one vpermb looks up a row's int16 entry. Eight
// micro-ops a unit instead of nine, and each further token's lookups three instead of
// four. On L1-resident weights the kernel took 15.7 ns per 320 bytes instead of 17.1 with
// one token, 23.5 instead of 28.3 with two, 40.5 instead of 53 with four; from DRAM (four
// rounds old and new in turn, 8B shapes and 2560x2560) tl1 per token against i2s went
// 0.48-0.53 -> 0.59-0.64 with four tokens, and by 2-7% with one.
func (s *lutState) tl1Units(name string, n Register) {
	done := name + "_tl1done"
	TESTQ(n, n)
	JZ(LabelRef(done))
	if s.bytes {
		s.tl1Consts()
	}
	Label(name + "_tl1chunk")
	c := takeChunk(n, uint32(32*len(s.acc16[0])))
	s.zero16()
	unit := func(h int) {
		VMOVDQU64(at(s.w, 32*h), s.wz.AsY())
		VPERMB(s.wz, s.dup, s.i0)
		VPSRLW(U8(4), s.i0, s.i1)
		VPTERNLOGD(U8(0xEA), s.off0, s.m0f, s.i0) // (i0 & 0x0f0f) | 0x1000
		VPTERNLOGD(U8(0xEA), s.off1, s.m0f, s.i1)
		s.lookup(s.i0, 64*h, 2*h)
		s.lookup(s.i1, 64*h, 2*h+1)
	}
	CMPQ(c, U8(2))
	JLT(LabelRef(name + "_tl1odd"))
	Label(name + "_tl1pair")
	prefetchLine(at(s.pf, 0), at(s.w, prefetchNear))
	unit(0)
	unit(1)
	ADDQ(U8(64), s.w)
	s.advancePF(U8(64))
	ADDQ(U32(128), s.kt)
	SUBQ(U8(2), c)
	CMPQ(c, U8(2))
	JGE(LabelRef(name + "_tl1pair"))
	Label(name + "_tl1odd")
	TESTQ(c, c)
	JZ(LabelRef(name + "_tl1flush"))
	unit(0)
	ADDQ(U8(32), s.w)
	s.advancePF(U8(32))
	ADDQ(U8(64), s.kt)
	Label(name + "_tl1flush")
	s.flush(false)
	TESTQ(n, n)
	JNZ(LabelRef(name + "_tl1chunk"))
	Label(done)
}

// tl2Rows is the register set of one row block's codes in tl2Block.
type tl2Rows struct {
	v, code, x VecPhysical // the plane, a shifted plane, triple 15's code being gathered
	w          Mem         // the block's first byte
}

// tl2Block emits one block for the row blocks of rows (one or two) and every token: per
// plane, the word's low five bits are triple 3j's code as they stand (vpermw reads only
// those), shifts by 5 and 10 bring triples 3j+1 and 3j+2 down, and bit 15 goes into the
// gathered code of triple 15. The code indexes the triple's 32-word table (sums of the
// magnitudes, then their negations) directly. With two row blocks each table is loaded
// once into a register and serves both. acc names the int16 chain of a row block, token
// and triple.
//
// The shifts of the codes are vpmultishiftqb (shiftCtl), not vpsrlw: on an Emerald Rapids
// Xeon a zmm vpermw is two micro-ops, one on port 0 and one on port 5, and vpsrlw runs on
// port 0 only, vpmultishiftqb on port 5 (measured: eight independent ones of each alone and
// in pairs), so the shifts had loaded port 0 with 31 of a one-token block's 67 micro-ops
// against port 5's 16 (the adds and bit-selects go to either). Moved to port 5: a copy of
// the block loop on L1-resident data 38.9 -> 36.0 cycles (67 micro-ops: 33.5 at best); the
// kernel on L1-resident weights 13.0 -> 12.3 ns a block with one token, 21.5 -> 20.3 with
// two, 2% less with three and four.
//
// One token takes the planes in address order and gathers with a shift and a bit-select
// per plane (bit j lands at bit 15, the earlier ones below, then a shift by 11), or, in the
// kernel onShiftPipes writes, keeps each plane in a register of its own (lutState.planes)
// and gathers at the end of the block from plane 4 down with vpshldw. More
// tokens take them from plane 4 down and gather with one vpshldw per plane (x = x<<1 |
// v>>15): against the first way (tl2 from DRAM on the 8B shapes at one thread, pairs of
// runs old/new in turn) n = 3 ran 3-11% faster and n = 4 0-21%, by the state of this
// shared machine (in no set of pairs slower), n = 2 the same; with one token it was 3-7%
// slower from plane 4 down and 1-4% in address order, so one token keeps the first way.
//
// Three and four tokens (bytes) look up tabTL2B tables (byte planes: a triple's 32 int16
// entries' low bytes, then their high bytes) with vpermb. A triple's lookup index is made
// once per row block and serves every token: each word's two bytes take the code (one
// vpmultishiftqb, pairCtl, brings bits 5f.. of the word to both), masked to five bits, the
// high byte plus 32 (one vpternlogd), so one vpermb (one micro-op, on port 5) looks up the
// word's int16 entry. Per triple and row block that is two micro-ops, and each token's
// lookup two (vpermb, vpaddw) where vpermw and vpaddw are three: a block of one row block
// is 16*(2 + 2T) + 6 micro-ops instead of 16*3T + 15, 166 instead of 207 with four tokens,
// 134 instead of 159 with three. On L1-resident weights (the kernel over one row block's
// piece 2000 times) a block took 24.5 ns instead of 29.0-29.4 with three tokens, 30.7
// instead of 36.6-39.8 with four (the 0x2000 words from memory, broadcast by the
// vpternlogd, had cost 4% of that). Two tokens keep vpermw: 102 micro-ops against 111, but
// 48 of them bound to port 5 where vpermw's halves spread over both ports; with the 0x2000
// words from memory it ran 5-8% slower cache-resident, from a register within the noise.
func (s *lutState) tl2Block(rows []tl2Rows, acc func(r, t, tri int) VecPhysical) {
	perm := VPERMW
	if s.bytes {
		perm = VPERMB
	}
	tmp := [2]VecPhysical{s.l, s.l2}
	n := 0
	lookupAll := func(tri int, codes func(r int) VecPhysical) {
		for t := 0; t < s.T; t++ {
			var tab Op = idx(s.tabs[t], s.kt, 1, 64*tri)
			if len(rows) > 1 {
				VMOVDQU64(tab, s.wz)
				tab = s.wz
			}
			for r := range rows {
				d := tmp[n%2]
				n++
				perm(tab, codes(r), d)
				c := acc(r, t, tri)
				VPADDW(d, c, c)
			}
		}
	}
	plane := func(r int) VecPhysical { return rows[r].v }
	code := func(r int) VecPhysical { return rows[r].code }
	// index makes the rows' lookup indexes of triple 3j+i from their planes.
	ctl := []VecPhysical{s.sh0, s.sh5, s.sh10} // (sh0: bytes only)
	index := func(i int) func(r int) VecPhysical {
		switch {
		case s.bytes:
			for _, rw := range rows {
				VPMULTISHIFTQB(rw.v, ctl[i], rw.code)
				VPTERNLOGD(U8(0xEA), s.hi, s.m1f, rw.code) // (code & 0x1f1f) | 0x2000
			}
		case i == 0:
			return plane
		case shiftPipes:
			for _, rw := range rows {
				VPSRLW(U8(5*i), rw.v, rw.code)
			}
		default:
			for _, rw := range rows {
				VPMULTISHIFTQB(rw.v, ctl[i], rw.code)
			}
		}
		return code
	}
	keep := s.planes != nil // onShiftPipes (one row block): gathered at the end, from the planes' registers
	one := s.T == 1 && !keep
	for i := 0; i < 5; i++ {
		j := 4 - i
		if one || keep {
			j = i
		}
		for r := range rows {
			m := rows[r].w
			m.Disp += 64 * j
			if keep {
				rows[r].v = s.planes[j]
			}
			VMOVDQU64(m, rows[r].v)
		}
		for f := 0; f < 3; f++ {
			lookupAll(3*j+f, index(f))
		}
		for _, rw := range rows {
			switch {
			case keep: // (gathered after the last plane)
			case one && j == 0:
				VMOVDQA64(rw.v, rw.x)
			case one: // x = top ? v : x >> 1 (bit j of the code lands at bit 15, the earlier ones below)
				VPSRLW(U8(1), rw.x, rw.x)
				VPTERNLOGD(U8(0xd8), s.top, rw.v, rw.x)
			case j == 4:
				VPSRLW(U8(15), rw.v, rw.x)
			default: // x = x << 1 | v >> 15
				VPSHLDW(U8(1), rw.v, rw.x, rw.x)
			}
		}
	}
	last := func(r int) VecPhysical { return rows[r].x }
	for _, rw := range rows {
		switch {
		case keep: // x = x << 1 | v >> 15, from plane 4 down
			VPSRLW(U8(15), s.planes[4], rw.x)
			for j := 3; j >= 0; j-- {
				VPSHLDW(U8(1), s.planes[j], rw.x, rw.x)
			}
		case one:
			VPSRLW(U8(11), rw.x, rw.x)
		case s.bytes: // code = x | x << 8 | 0x2000 (x < 32)
			VPSLLW(U8(8), rw.x, rw.code)
			VPTERNLOGD(U8(0xFE), s.hi, rw.x, rw.code)
			last = code
		}
	}
	lookupAll(15, last)
}

// tl2Flush is how many blocks an int16 chain can take: |entry| <= 381, at most 32767.
func tl2Flush(perChainPerBlock int) uint32 { return uint32(32767 / (381 * perChainPerBlock)) }

// tl2Blocks runs n (a register, may be 0) tl2 blocks of one row block, flushing the int16
// chains into the int32 accumulators as often as their range requires.
func (s *lutState) tl2Blocks(name string, n Register) {
	TESTQ(n, n)
	JZ(LabelRef(name + "_tl2done"))
	if s.bytes { // (once per row block: tl1Units, after this, loads its own into the registers)
		s.tl2Consts()
	}
	Label(name + "_chunk")
	chains := len(s.acc16[0])
	paired := chains == 4 // (one token: see flush)
	most := tl2Flush(16 / chains)
	if paired {
		most = tl2Flush(2 * 16 / chains)
	}
	c := takeChunk(n, most)
	s.zero16()
	Label(name + "_blk")
	for u := 0; u < 5; u++ {
		prefetchLine(at(s.pf, 64*u), at(s.w, prefetchNear+64*u))
		if ntaAhead > 0 && !softPrefetch { // (two tokens: only their pairs, tl2Pairs)
			PREFETCHNTA(at(s.w, ntaAhead+64*u))
		}
	}
	s.tl2Block([]tl2Rows{{v: s.wz, code: s.i0, x: s.x, w: at(s.w, 0)}}, func(r, t, tri int) VecPhysical {
		return s.acc16[t][tri%chains]
	})
	ADDQ(U32(320), s.w)
	s.advancePF(U32(320))
	ADDQ(U32(1024), s.kt)
	DECQ(c)
	JNZ(LabelRef(name + "_blk"))
	s.flush(paired)
	TESTQ(n, n)
	JNZ(LabelRef(name + "_chunk"))
	Label(name + "_tl2done")
}

// tl2Pairs (two or more tokens) runs the chunk's tl2 blocks for row blocks two at a time
// while at least two remain (Units = 0 only: a tl1 tail goes one row block at a time): each table is loaded
// into a register once and serves both row blocks, halving the table loads. The int16
// sums are flushed straight into Sums. Advances w0, sums and the argument block's NRB;
// falls through with NRB in {0, 1}.
func (s *lutState) tl2Pairs(name string, a, w0, sums Register) {
	T := s.T
	p := s.p
	second := tl2Rows{v: p.get(), code: p.get(), x: p.get()}
	acc := func(r, t, tri int) VecPhysical { return s.acc16[t][r] } // lutChains gives two per token: one per row block
	rb := GP64()
	MOVQ(at(a, lRBBytes), rb)
	CMPQ(at(a, lUnits), U8(0))
	JNE(LabelRef(name + "_pairsdone"))
	if s.bytes {
		s.tl2Consts()
	}
	Label(name + "_pair")
	CMPQ(at(a, lNRB), U8(2))
	JLT(LabelRef(name + "_pairsdone"))
	MOVQ(w0, s.w)
	LEAQ(Mem{Base: w0, Index: rb, Scale: 2}, s.pf)
	XORQ(s.kt, s.kt)
	n := ld(a, lBlocks)
	TESTQ(n, n)
	JZ(LabelRef(name + "_pairnext"))
	Label(name + "_pchunk")
	c := takeChunk(n, tl2Flush(16))
	s.zero16()
	Label(name + "_pblk")
	for u := 0; u < 5; u++ {
		if ntaAhead > 0 {
			PREFETCHNTA(at(s.w, ntaAhead+64*u))
			PREFETCHNTA(Mem{Base: s.w, Index: rb, Scale: 1, Disp: ntaAhead + 64*u})
			PREFETCHT1(at(s.pf, 64*u))
			PREFETCHT1(Mem{Base: s.pf, Index: rb, Scale: 1, Disp: 64 * u})
			continue
		}
		PREFETCHT0(at(s.pf, 64*u))
		PREFETCHT0(Mem{Base: s.pf, Index: rb, Scale: 1, Disp: 64 * u})
	}
	second.w = Mem{Base: s.w, Index: rb, Scale: 1}
	s.tl2Block([]tl2Rows{{v: s.i1, code: s.i0, x: s.x, w: at(s.w, 0)}, second}, acc)
	ADDQ(U32(320), s.w)
	ADDQ(U32(320), s.pf)
	ADDQ(U32(1024), s.kt)
	DECQ(c)
	JNZ(LabelRef(name + "_pblk"))
	// flush: Sums[rb r][t] += the row block's chains, sign-extended
	for r := 0; r < 2; r++ {
		for t := 0; t < T; t++ {
			o := 128*T*r + 128*t
			VMOVDQU32(at(sums, o), s.acc32[t][0])
			VMOVDQU32(at(sums, o+64), s.acc32[t][1])
			cc := s.acc16[t][r]
			VPMOVSXWD(cc.AsY(), s.l)
			VPADDD(s.l, s.acc32[t][0], s.acc32[t][0])
			VEXTRACTI64X4(U8(1), cc, s.l2.AsY())
			VPMOVSXWD(s.l2.AsY(), s.l2)
			VPADDD(s.l2, s.acc32[t][1], s.acc32[t][1])
			VMOVDQU32(s.acc32[t][0], at(sums, o))
			VMOVDQU32(s.acc32[t][1], at(sums, o+64))
		}
	}
	TESTQ(n, n)
	JNZ(LabelRef(name + "_pchunk"))
	Label(name + "_pairnext")
	ADDQ(U32(256*T), sums)
	LEAQ(Mem{Base: w0, Index: rb, Scale: 2}, w0)
	SUBQ(U8(2), at(a, lNRB))
	JMP(LabelRef(name + "_pair"))
	Label(name + "_pairsdone")
	p.put(second.v, second.code, second.x)
}

// buildTables builds min(BN, BPer) of the tables lutArgs asks for (all BN if all): the
// next ones after the BDone already built. It counts BN down and BDone up in the argument
// block and never writes its pointers: a pointer stored by assembly has no write barrier,
// and BX advanced past its last triple points past the activations' object (the garbage
// collector then found a pointer to a free object and stopped the process).
func (s *lutState) buildTables(a Register, b *tl2Builder, name string, all bool) {
	n := GP64()
	MOVQ(at(a, lBN), n)
	if !all {
		CMPQ(n, at(a, lBPer))
		CMOVQGT(at(a, lBPer), n)
	}
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	SUBQ(n, at(a, lBN))
	x, d := GP64(), GP64()
	MOVQ(at(a, lBDone), d)
	ADDQ(n, at(a, lBDone))
	LEAQ(Mem{Base: d, Index: d, Scale: 2}, x) // 3 inputs per triple
	ADDQ(at(a, lBX), x)
	SHLQ(U8(6), d) // 64 bytes of tables per triple
	ADDQ(at(a, lBTab), d)
	Label(name)
	b.triple(at(x, 0), at(d, 0))
	ADDQ(U8(3), x)
	ADDQ(U8(64), d)
	DECQ(n)
	JNZ(LabelRef(name))
	Label(name + "_done")
}

// lutPF sets pf to where a lookup kernel prefetches while it reads the row block at w0: PF
// bytes ahead (the pieces of a chunk are contiguous: some row blocks), and once fewer than
// Turn bytes of the range are left, on at Next, the caller's stream's next chunk: Next +
// Turn - (row blocks left) * RBBytes.
func lutPF(name string, a, w0, pf Register) {
	MOVQ(w0, pf)
	ADDQ(at(a, lPF), pf)
	keep := name + "_pfkeep"
	CMPQ(at(a, lNext), U8(0))
	JE(LabelRef(keep))
	left := GP64()
	MOVQ(at(a, lNRB), left)
	IMULQ(at(a, lRBBytes), left)
	CMPQ(left, at(a, lTurn))
	JGT(LabelRef(keep))
	NEGQ(left)
	ADDQ(at(a, lTurn), left)
	ADDQ(at(a, lNext), left)
	MOVQ(left, pf)
	Label(keep)
}

// lutZ: the tl1/tl2 chunk kernel (see lutArgs) on zmm: for each row block, the chunk's
// blocks and units against the chunk's tables (which stay in L1 across the row blocks), a
// later row block's piece prefetched (the pieces are contiguous: PF bytes ahead, continued
// at Next past the range), the int32 sums added to Sums. With one token the tl2 kernel also
// builds the tables lutArgs asks for between row blocks. tl2 with two or more tokens takes
// the row blocks in pairs first (tl2Pairs); one token stays one row block at a time (pairs
// measured 10-25% slower cache-resident, and no faster from DRAM; on Zen 4, without
// software prefetch, 37-39% of the roofline at one thread against 60-65).
func lutZ(T int, tl2 bool) { lutZNamed(T, tl2, "") }

// lutZNamed writes lutZ's kernel with suffix on its name (hardwarePrefetch's "HW",
// nonTemporal's "NT").
func lutZNamed(T int, tl2 bool, suffix string) {
	f := "TL1"
	if tl2 {
		f = "TL2"
	}
	name := fmt.Sprintf("lut%sT%dAVX512%s", f, T, suffix)
	a := fn(name, fmt.Sprintf("%s is the %s chunk GEMV for %d token(s) (see lutArgs); lutGeneric (zmm tables) is its reference.%s", name, f, T, hwDoc()))
	s := newLUTState(a, T, tl2)
	w0, sums := ld(a, lW), ld(a, lSums)
	pairs := tl2 && T >= 2
	var bld *tl2Builder // one token: builds the tables lutArgs.BN asks for between row blocks
	if tl2 && T == 1 {
		bld = newTL2Builder(s.p, s.wz, s.i0, s.l)
	}
	if pairs {
		s.tl2Pairs(name, a, w0, sums)
		CMPQ(at(a, lNRB), U8(0))
		JE(LabelRef(name + "_end"))
	}
	Label(name + "_rb")
	MOVQ(w0, s.w)
	if softPrefetch { // (hardwarePrefetch: no pointer to keep)
		lutPF(name, a, w0, s.pf)
	}
	XORQ(s.kt, s.kt)
	// The row block's sums so far are added at its end, not loaded into the accumulators
	// here: such a load (from L2 or L3 once the stream has pushed the sums out of L1) may
	// sit at the head of the reorder buffer through the row block's first lookups. With it,
	// one-token tl2 from DRAM at one thread ran 4-10% slower in two sets of six alternating
	// runs (4096x14336, 14336x4096, 2560x2560), and within 2% in a third of eight rounds in
	// rotating order; the host's noise was 0.7-1.3x a run.
	zeroAll(flat2(s.acc32)...)
	if tl2 {
		nb := ld(a, lBlocks)
		s.tl2Blocks(name, nb)
	}
	n := ld(a, lUnits)
	s.tl1Units(name, n)
	for t := 0; t < T; t++ {
		VPADDD(at(sums, 128*t), s.acc32[t][0], s.acc32[t][0])
		VPADDD(at(sums, 128*t+64), s.acc32[t][1], s.acc32[t][1])
		VMOVDQU32(s.acc32[t][0], at(sums, 128*t))
		VMOVDQU32(s.acc32[t][1], at(sums, 128*t+64))
	}
	if bld != nil {
		s.buildTables(a, bld, name+"_bper", false)
	}
	ADDQ(U32(128*T), sums)
	ADDQ(at(a, lRBBytes), w0)
	DECQ(at(a, lNRB))
	JNZ(LabelRef(name + "_rb"))
	if bld != nil {
		s.buildTables(a, bld, name+"_brest", true)
	}
	if pairs {
		Label(name + "_end")
	}
	VZEROUPPER()
	RET()
}
