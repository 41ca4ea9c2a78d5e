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
		floatYPair(bf)
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
	if bf {
		ADDQ(U8(64), w)
	} else {
		SUBQ(I8(-128), w)
	}
	ADDQ(xs, x)
	DECQ(k)
	JNZ(LabelRef(name + "_k"))
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
	prefetchAhead(w, 0)
	if bf {
		VMOVDQU(at(w, 0), wv[1])
		VMOVDQU(at(w, 32), wv[3])
		VPUNPCKLWD(wv[1], zero, wv[0]) // rows 0-3, 8-11
		VPUNPCKHWD(wv[1], zero, wv[1]) // rows 4-7, 12-15
		VPUNPCKLWD(wv[3], zero, wv[2]) // rows 16-19, 24-27
		VPUNPCKHWD(wv[3], zero, wv[3]) // rows 20-23, 28-31
	} else {
		prefetchAhead(w, 64)
		for i := range wv {
			VMOVUPS(at(w, 32*i), wv[i])
		}
	}
	for t := range acc {
		VBROADCASTSS(at(x, 4*t), xv)
		for i := range wv {
			VMULPS(xv, wv[i], tm)
			VADDPS(tm, acc[t][i], acc[t][i])
		}
	}
	if bf {
		ADDQ(U8(64), w)
	} else {
		SUBQ(I8(-128), w)
	}
	ADDQ(xs, x)
	DECQ(k)
	JNZ(LabelRef(name + "_k"))
	// store masks
	mb := xv
	VPBROADCASTD(at(a, fMask), mb)
	for i := range wv {
		VPAND(rowBitsF.Offset(32*i), mb, wv[i])
		VPCMPEQD(rowBitsF.Offset(32*i), wv[i], wv[i])
	}
	b, out := ld(a, fBias), ld(a, fOut)
	for t := range acc {
		r := acc[t]
		if bf {
			VPERM2F128(U8(0x20), r[1], r[0], tm)   // rows 0-7
			VPERM2F128(U8(0x31), r[1], r[0], r[1]) // rows 8-15
			VMOVAPS(tm, r[0])
			VPERM2F128(U8(0x20), r[3], r[2], tm)   // rows 16-23
			VPERM2F128(U8(0x31), r[3], r[2], r[3]) // rows 24-31
			VMOVAPS(tm, r[2])
		}
		TESTQ(b, b)
		JZ(LabelRef(fmt.Sprintf("%s_nobias%d", name, t)))
		for i := range r {
			VADDPS(at(b, 32*i), r[i], r[i])
		}
		Label(fmt.Sprintf("%s_nobias%d", name, t))
		for i := range r {
			VMASKMOVPS(r[i], wv[i], at(out, 32*i))
		}
		if t+1 < T {
			ADDQ(at(a, fOutStride), out)
		}
	}
	VZEROUPPER()
	RET()
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
// sums are floatY's bit for bit.
func floatYPair(bf bool) {
	name := "floatF32P1AVX2"
	rowBytes := 128
	if bf {
		name, rowBytes = "floatBF16P1AVX2", 64
	}
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
		prefetchAhead(wp, 0)
		if bf {
			VMOVDQU(at(wp, 0), wv[1])
			VMOVDQU(at(wp, 32), wv[3])
			VPUNPCKLWD(wv[1], zero, wv[0]) // rows 0-3, 8-11
			VPUNPCKHWD(wv[1], zero, wv[1]) // rows 4-7, 12-15
			VPUNPCKLWD(wv[3], zero, wv[2]) // rows 16-19, 24-27
			VPUNPCKHWD(wv[3], zero, wv[3]) // rows 20-23, 28-31
		} else {
			prefetchAhead(wp, 64)
			for i := range wv {
				VMOVUPS(at(wp, 32*i), wv[i])
			}
		}
		for i := range wv {
			VMULPS(xv, wv[i], tm)
			VADDPS(tm, acc[b][i], acc[b][i])
		}
	}
	if bf {
		ADDQ(U8(64), w)
		ADDQ(U8(64), w2)
	} else {
		SUBQ(I8(-128), w)
		SUBQ(I8(-128), w2)
	}
	ADDQ(xs, x)
	DECQ(k)
	JNZ(LabelRef(name + "_k"))
	// store masks
	VPBROADCASTD(at(a, fMask), xv)
	for i := range wv {
		VPAND(rowBitsF.Offset(32*i), xv, wv[i])
		VPCMPEQD(rowBitsF.Offset(32*i), wv[i], wv[i])
	}
	b, out := ld(a, fBias), ld(a, fOut)
	for h, r := range acc {
		if bf {
			VPERM2F128(U8(0x20), r[1], r[0], tm)   // rows 0-7
			VPERM2F128(U8(0x31), r[1], r[0], r[1]) // rows 8-15
			VMOVAPS(tm, r[0])
			VPERM2F128(U8(0x20), r[3], r[2], tm)   // rows 16-23
			VPERM2F128(U8(0x31), r[3], r[2], r[3]) // rows 24-31
			VMOVAPS(tm, r[2])
		}
		TESTQ(b, b)
		JZ(LabelRef(fmt.Sprintf("%s_nobias%d", name, h)))
		for i := range r {
			VADDPS(at(b, 128*h+32*i), r[i], r[i])
		}
		Label(fmt.Sprintf("%s_nobias%d", name, h))
		for i := range r {
			VMASKMOVPS(r[i], wv[i], at(out, 128*h+32*i))
		}
	}
	VZEROUPPER()
	RET()
}
