package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Argument block offsets: kernels.floatArgs.
const (
	fW, fX, fXStride, fK, fBias, fOut, fOutStride, fMask = 0, 8, 16, 24, 32, 40, 48, 56
)

var (
	bfRowOrder Mem // vpermt2q: rows in order from the unpacked halves
	rowBitsF   Mem // dword i = 1 << i (AVX2 store masks)
)

// genFloat writes the bf16 and f32 kernels: one row block, T tokens, the activations
// transposed ([K][T] floats, so the T values of one input are adjacent; X is that block,
// XStride the bytes between inputs), acc = acc + float32(w*x) in input order (vmulps then
// vaddps: no FMA), then the bias and a masked store.
func genFloat() {
	bfRowOrder = dwordTable("bfRowOrder", []uint32{0, 0, 1, 0, 8, 0, 9, 0, 2, 0, 3, 0, 10, 0, 11, 0, 4, 0, 5, 0, 12, 0, 13, 0, 6, 0, 7, 0, 14, 0, 15, 0})
	var bits []uint32
	for i := 0; i < 32; i++ {
		bits = append(bits, 1<<i)
	}
	rowBitsF = dwordTable("rowBitsF", bits)
	for _, bf := range []bool{true, false} {
		for T := 1; T <= 12; T++ {
			floatZ(T, bf)
		}
		hardwarePrefetch(func() { floatZNamed(1, bf, floatName(1, bf, "AVX512")+"HW") })
		for T := 1; T <= 2; T++ {
			floatY(T, bf)
		}
		withL1(func() { floatYPair(bf) })
	}
}

func floatName(T int, bf bool, isa string) string {
	f := "F32"
	if bf {
		f = "BF16"
	}
	return fmt.Sprintf("float%sT%d%s", f, T, isa)
}

func floatZ(T int, bf bool) { floatZNamed(T, bf, floatName(T, bf, "AVX512")) }

// floatZNamed writes floatZ's kernel as function name.
func floatZNamed(T int, bf bool, name string) {
	a := fn(name, fmt.Sprintf("%s is the float GEMV/GEMM tile of one row block for %d token(s) (see floatArgs); floatGeneric is its reference.", name, T)+hwDoc())
	p := newPool(true)
	w, x, xs, k := ld(a, fW), ld(a, fX), ld(a, fXStride), ld(a, fK)
	acc := make([][2]VecPhysical, T)
	for t := range acc {
		copy(acc[t][:], p.getn(2))
	}
	zeroAll(flat2(acc)...)
	w0, w1, xv, zero := p.get(), p.get(), p.get(), p.get()
	if bf {
		VPXORD(zero, zero, zero)
	}
	Label(name + "_k")
	if bf {
		prefetchAhead(w, 0)
		VMOVDQU64(at(w, 0), w1)
		VPUNPCKLWD(w1, zero, w0) // rows 0-3, 8-11, 16-19, 24-27
		VPUNPCKHWD(w1, zero, w1) // rows 4-7, 12-15, 20-23, 28-31
	} else {
		prefetchAhead(w, 0)
		prefetchAhead(w, 64)
		VMOVUPS(at(w, 0), w0)
		VMOVUPS(at(w, 64), w1)
	}
	for t := range acc {
		for i, wi := range []VecPhysical{w0, w1} {
			tm := xv
			if i == 1 {
				tm = p.get()
			}
			VMULPS_BCST(at(x, 4*t), wi, tm)
			VADDPS(tm, acc[t][i], acc[t][i])
			if i == 1 {
				p.put(tm)
			}
		}
	}
	floatNext(name, bf, x, xs, k, w)
	// rows in order (bf16), bias, masked store
	if bf {
		VMOVDQU64(bfRowOrder, w0)
		VMOVDQU64(bfRowOrder.Offset(64), w1)
	}
	m := GP64()
	MOVQ(at(a, fMask), m)
	KMOVW(m.As32(), K1)
	SHRQ(U8(16), m)
	KMOVW(m.As32(), K2)
	b, out := ld(a, fBias), ld(a, fOut)
	for t := range acc {
		lo, hi := acc[t][0], acc[t][1]
		if bf {
			VMOVDQA64(lo, xv)
			VPERMT2Q(hi, w0, xv) // rows 0-15
			VPERMT2Q(hi, w1, lo) // rows 16-31
			lo, hi = xv, lo
		}
		TESTQ(b, b)
		JZ(LabelRef(fmt.Sprintf("%s_nobias%d", name, t)))
		VADDPS(at(b, 0), lo, lo)
		VADDPS(at(b, 64), hi, hi)
		Label(fmt.Sprintf("%s_nobias%d", name, t))
		VMOVUPS(lo, K1, at(out, 0))
		VMOVUPS(hi, K2, at(out, 64))
		if t+1 < T {
			ADDQ(at(a, fOutStride), out)
		}
	}
	VZEROUPPER()
	RET()
}

func floatY(T int, bf bool) {
	name := floatName(T, bf, "AVX2")
	a := fn(name, fmt.Sprintf("%s is the float GEMV of one row block for %d token(s) (see floatArgs); floatGeneric is its reference.", name, T))
	p := newPool(false)
	w, x, xs, k := ld(a, fW), ld(a, fX), ld(a, fXStride), ld(a, fK)
	acc := make([][4]VecPhysical, T)
	var all []VecPhysical
	for t := range acc {
		copy(acc[t][:], p.getn(4))
		all = append(all, acc[t][:]...)
	}
	zeroAll(all...)
	wv := p.getn(4)
	xv, zero, tm := p.get(), p.get(), p.get()
	VPXOR(zero, zero, zero)
	Label(name + "_k")
	floatYWeights(w, wv, zero, bf)
	for t := range acc {
		VBROADCASTSS(at(x, 4*t), xv)
		for i := range wv {
			VMULPS(xv, wv[i], tm)
			VADDPS(tm, acc[t][i], acc[t][i])
		}
	}
	floatNext(name, bf, x, xs, k, w)
	floatYMasks(a, xv, wv)
	b, out := ld(a, fBias), ld(a, fOut)
	for t := range acc {
		floatYStore(fmt.Sprintf("%s_nobias%d", name, t), acc[t][:], wv, tm, b, out, 0, bf)
		if t+1 < T {
			ADDQ(at(a, fOutStride), out)
		}
	}
	VZEROUPPER()
	RET()
}

// floatNext ends a float kernel's step over one input: each row block's weights ws move
// on by an input's (64 bytes for bf16, 128 for f32), x by xs, and back to name_k until k
// counts down to 0.
func floatNext(name string, bf bool, x, xs, k Register, ws ...Register) {
	for _, w := range ws {
		if bf {
			ADDQ(U8(64), w)
		} else {
			SUBQ(I8(-128), w)
		}
	}
	ADDQ(xs, x)
	DECQ(k)
	JNZ(LabelRef(name + "_k"))
}

// floatYWeights loads floatY's weights of one input at w (32 rows) into wv as float32,
// prefetching ahead (bf16: rows 0-3 and 8-11, 4-7 and 12-15, 16-19 and 24-27, 20-23 and
// 28-31, widened against zero; f32: rows in order).
func floatYWeights(w Register, wv []VecPhysical, zero VecPhysical, bf bool) {
	prefetchAhead(w, 0)
	if bf {
		VMOVDQU(at(w, 0), wv[1])
		VMOVDQU(at(w, 32), wv[3])
		VPUNPCKLWD(wv[1], zero, wv[0]) // rows 0-3, 8-11
		VPUNPCKHWD(wv[1], zero, wv[1]) // rows 4-7, 12-15
		VPUNPCKLWD(wv[3], zero, wv[2]) // rows 16-19, 24-27
		VPUNPCKHWD(wv[3], zero, wv[3]) // rows 20-23, 28-31
		return
	}
	prefetchAhead(w, 64)
	for i := range wv {
		VMOVUPS(at(w, 32*i), wv[i])
	}
}

// floatYMasks sets m[i] to the vmaskmovps mask of rows 8i..8i+7 from Mask (clobbers t).
func floatYMasks(a Register, t VecPhysical, m []VecPhysical) {
	VPBROADCASTD(at(a, fMask), t)
	for i := range m {
		VPAND(rowBitsF.Offset(32*i), t, m[i])
		VPCMPEQD(rowBitsF.Offset(32*i), m[i], m[i])
	}
}

// floatYStore puts one row block's sums r (floatYWeights's order) in row order, adds the
// bias at b+off when b is not nil (skip: the label past it) and stores the rows of masks m
// at out+off (clobbers r and tm).
func floatYStore(skip string, r, m []VecPhysical, tm VecPhysical, b, out Register, off int, bf bool) {
	if bf {
		VPERM2F128(U8(0x20), r[1], r[0], tm)   // rows 0-7
		VPERM2F128(U8(0x31), r[1], r[0], r[1]) // rows 8-15
		VMOVAPS(tm, r[0])
		VPERM2F128(U8(0x20), r[3], r[2], tm)   // rows 16-23
		VPERM2F128(U8(0x31), r[3], r[2], r[3]) // rows 24-31
		VMOVAPS(tm, r[2])
	}
	TESTQ(b, b)
	JZ(LabelRef(skip))
	for i := range r {
		VADDPS(at(b, off+32*i), r[i], r[i])
	}
	Label(skip)
	for i := range r {
		VMASKMOVPS(r[i], m[i], at(out, off+32*i))
	}
}

// floatYPair writes float<F>P1AVX2, floatY's one-token kernel over two whole row blocks
// that follow one another in the blob: the second's weights at W + K*rowBytes (64 bytes an
// input for bf16, 128 for f32), its bias at Bias + 128, its outputs at Out + 128, Mask for
// both. Each input's weights of the two row blocks are read in turn, so the call reads two
// streams. On an AVX2-only Zen 3 (2-vCPU EPYC guest, one thread, 1 GiB of DRAM) a plain
// read of one stream with this prefetch ran 14.8-15.2 GB/s where two ran 17.3-17.9, and a C
// copy of the bf16 loop 12.0 GB/s where two row blocks at a time ran 14.8 (15 rounds in
// turn, medians). The kernel itself, against floatY's one row block a call in one process
// (`bitd bench` of a scratch build whose zen4 tuning took the pair, -tuning default,zen4,
// 15 rounds; 4096x14336, 14336x4096, 2560x2560, 2560x6912): bf16 1.16-1.20x at one
// thread (75-76% of the roofline to 88-94), 1.06-1.21x at two; f32 1.13-1.20x and
// 1.07-1.18x. Each row keeps its own chain of vmulps and vaddps in input order, so the
// sums are floatY's bit for bit. The zen3 tuning's kernel (suffix L1) prefetches into L1
// only (withL1).
func floatYPair(bf bool) {
	name := "floatF32P1AVX2"
	rowBytes := 128
	if bf {
		name, rowBytes = "floatBF16P1AVX2", 64
	}
	name = l1Name(name)
	a := fn(name, fmt.Sprintf("%s is the float GEMV of two whole row blocks that follow one another for one token (see floatArgs: the second's weights at W + K*%d, its bias and outputs 128 bytes on, Mask for both); floatGeneric is its reference.", name, rowBytes))
	p := newPool(false)
	w, x, xs, k := ld(a, fW), ld(a, fX), ld(a, fXStride), ld(a, fK)
	w2 := GP64()
	MOVQ(k, w2)
	SHLQ(U8(6), w2)
	if !bf {
		SHLQ(U8(1), w2)
	}
	ADDQ(w, w2)
	acc := [2][]VecPhysical{p.getn(4), p.getn(4)} // [row block][rows 8i..8i+7, or bf16's order]
	zeroAll(append(acc[0], acc[1]...)...)
	wv := p.getn(4)
	xv, zero, tm := p.get(), p.get(), p.get()
	VPXOR(zero, zero, zero)
	Label(name + "_k")
	VBROADCASTSS(at(x, 0), xv)
	for b, wp := range []Register{w, w2} {
		floatYWeights(wp, wv, zero, bf)
		for i := range wv {
			VMULPS(xv, wv[i], tm)
			VADDPS(tm, acc[b][i], acc[b][i])
		}
	}
	floatNext(name, bf, x, xs, k, w, w2)
	floatYMasks(a, xv, wv)
	b, out := ld(a, fBias), ld(a, fOut)
	for h, r := range acc {
		floatYStore(fmt.Sprintf("%s_nobias%d", name, h), r, wv, tm, b, out, 128*h, bf)
	}
	VZEROUPPER()
	RET()
}
