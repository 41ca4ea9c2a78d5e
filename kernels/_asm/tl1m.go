package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// tl1 on zmm through vpdpbusd, as i2s runs (tabTL1M): the kernel decodes each pair index to
// its two codes u = w+1 (idx/3, idx%3) and multiplies them with the activations, where the
// lookup-table kernels (lutZ) look up sums of activations. Four consecutive units of a
// row block (128 bytes: unit j's byte r is row r's pairs at inputs 4j..4j+3) become, by
// two vpermt2b, two vectors whose dword r holds row r's byte of each of the four units
// (rows 0-15, then 16-31). A vpermb of one of two 64-byte tables on those bytes (the low
// nibble; the high one after a word shift: a table is its 16 entries broadcast four times,
// so the two bits above the nibble do not matter) gives, in dword r, row r's codes of input
// p of each unit (p = 0..3: the low pair's first and second input, the high pair's), and
// one vpdpbusd multiplies them with the four activations of input p of the four units,
// a dword broadcast from the call's reordered activations (tabTL1M: per four units, 16
// bytes, dword p = x[4j+p] for j = 0..3). Each lane is one row's sum: no horizontal sums.
// Per 128 bytes 2 vpermt2b, 2 shifts, 8 vpermb and 8 vpdpbusd a token, where the lookups
// take 16 micro-ops per 64 bytes and a token. The sums are of u*x; the epilogue's
// correction (c0 = -1: the sum of x) makes them w*x. Calls of one token run lutZ's
// lookups instead, whose stream reads DRAM faster (tl1MAhead in package kernels).

var (
	tl1mIdx  [2]Mem // vpermt2b: dword r <- byte r (rows 0-15; 16-31) of units 0-3 of two registers
	tl1mCode [2]Mem // tl1CodeBytes: nibble -> idx/3, idx%3 (16 bytes, broadcast to the four lanes for vpermb)
	tl1mTail Mem    // per units left (0-3) two qword load masks of the last four units' 128 bytes
	tl1mX    Mem    // vpshufb: byte 4p+j <- byte 4j+p of each 16 (tabTL1M's reordering)
)

func genTL1M() {
	var ix [2][]byte
	for h := range ix {
		for r := 16 * h; r < 16*h+16; r++ {
			ix[h] = append(ix[h], byte(r), byte(32+r), byte(64+r), byte(96+r))
		}
	}
	tl1mIdx = [2]Mem{table("tl1mIdx0", ix[0]), table("tl1mIdx1", ix[1])}
	d3, m3 := tl1CodeBytes()
	tl1mCode = [2]Mem{table("tl1mDiv3", d3), table("tl1mMod3", m3)}
	var tail []byte
	for left := 0; left < 4; left++ {
		for q := 0; q < 2; q++ { // 32 bytes a unit: units 2q and 2q+1 in qword mask q
			n := min(max(left-2*q, 0), 2)
			m := uint64(1)<<(32*n) - 1
			if n == 2 {
				m = ^uint64(0)
			}
			for b := 0; b < 8; b++ {
				tail = append(tail, byte(m>>(8*b)))
			}
		}
	}
	tl1mTail = table("tl1mTail", tail)
	var xp []byte
	for l := 0; l < 4; l++ {
		for p := 0; p < 4; p++ {
			for j := 0; j < 4; j++ {
				xp = append(xp, byte(4*j+p))
			}
		}
	}
	tl1mX = table("tl1mX", xp)
	lutBuildTL1M()
	for T := 1; T <= 4; T++ {
		lutTL1MZ(T)
	}
}

// lutBuildTL1M writes tabTL1M's reordered activations for the full sixteens of units.
func lutBuildTL1M() {
	TEXT("lutBuildTL1MAVX512", NOSPLIT, "func(x *int8, units int, dst *byte)")
	Pragma("noescape")
	Doc("lutBuildTL1MAVX512 writes the tabTL1M activations of units (a multiple of 16) tl1 units",
		"at x: per four units 16 bytes, byte 4p+j = x[4j+p]; buildLUT is its reference.")
	x, n, d := Load(Param("x"), GP64()), Load(Param("units"), GP64()), Load(Param("dst"), GP64())
	p := newPool(true)
	perm, v := p.get(), p.get()
	VMOVDQU64(tl1mX, perm)
	SHRQ(U8(4), n)
	JZ(LabelRef("tl1mb_done"))
	Label("tl1mb")
	VMOVDQU64(at(x, 0), v)
	VPSHUFB(perm, v, v)
	VMOVDQU64(v, at(d, 0))
	ADDQ(U8(64), x)
	ADDQ(U8(64), d)
	DECQ(n)
	JNZ(LabelRef("tl1mb"))
	Label("tl1mb_done")
	VZEROUPPER()
	RET()
}

// lutTL1MZ: the tl1 chunk kernel (see lutArgs) on zmm through vpdpbusd, tables of kind
// tabTL1M, for T tokens: per row block the chunk's units four at a time (the last up to
// three under masks), prefetching into L1 only (lutArgs.PF is tl1MAhead bytes: see there).
func lutTL1MZ(T int) {
	name := fmt.Sprintf("lutTL1MT%dAVX512", T)
	a := fn(name, fmt.Sprintf("%s is the tl1 chunk GEMV through vpdpbusd for %d token(s) (see lutArgs, tabTL1M);", name, T),
		"lutGeneric (tabTL1M) is its reference.")
	p := newPool(true)
	idx0, idx1, d3, m3 := p.get(), p.get(), p.get(), p.get()
	VMOVDQU64(tl1mIdx[0], idx0)
	VMOVDQU64(tl1mIdx[1], idx1)
	VBROADCASTI32X4(tl1mCode[0], d3)
	VBROADCASTI32X4(tl1mCode[1], m3)
	chains := max(1, 4/T)
	acc := make([][2][]VecPhysical, T) // [token][rows 0-15, 16-31][chain]
	var all []VecPhysical
	for t := range acc {
		for h := range acc[t] {
			acc[t][h] = p.getn(chains)
			all = append(all, acc[t][h]...)
		}
	}
	v, hv := p.getn(2), p.getn(2) // the units' bytes by row (rows 0-15, 16-31), their high nibbles
	c := p.getn(2)                // decoded codes
	tabs := tokenPtrs(a, T, lTab, lTabStride)
	w0, sums := ld(a, lW), ld(a, lSums)
	w, pf, kt := GP64(), GP64(), GP64()
	groups, left := ld(a, lUnits), GP64()
	MOVQ(groups, left)
	SHRQ(U8(2), groups)
	ANDQ(U8(3), left)
	tm := GP64()
	LEAQ(tl1mTail, tm)
	SHLQ(U8(4), left) // the tail masks' offset
	KMOVQ(idx(tm, left, 1, 0), K1)
	KMOVQ(idx(tm, left, 1, 8), K2)
	// four units (128 bytes at w, or the masked ones already in v) against the activations at
	// kt: rows by dword, then codes, then the dot products.
	four := func(mem bool, hiMem Op) {
		if mem {
			VMOVDQU64(at(w, 0), v[0])
			VMOVDQA64(v[0], v[1]) // (one load: cache-resident as fast as two, n = 4 1-3% faster)
		}
		VPERMT2B(hiMem, idx0, v[0])
		VPERMT2B(hiMem, idx1, v[1])
		VPSRLW(U8(4), v[0], hv[0])
		VPSRLW(U8(4), v[1], hv[1])
		n := 0
		for h := 0; h < 2; h++ {
			for q := 0; q < 4; q++ {
				src, tab := v[h], d3
				if q >= 2 {
					src = hv[h]
				}
				if q%2 == 1 {
					tab = m3
				}
				d := c[n%2]
				n++
				VPERMB(tab, src, d)
				for t := 0; t < T; t++ {
					VPDPBUSD_BCST(idx(tabs[t], kt, 1, 4*q), d, acc[t][h][q%chains])
				}
			}
		}
	}
	Label(name + "_rb")
	MOVQ(w0, w)
	lutPF(name, a, w0, pf)
	XORQ(kt, kt)
	zeroAll(all...)
	n := GP64()
	MOVQ(groups, n)
	TESTQ(n, n)
	JZ(LabelRef(name + "_tail"))
	Label(name + "_four")
	PREFETCHT0(at(pf, 0))
	PREFETCHT0(at(pf, 64))
	four(true, at(w, 64))
	SUBQ(I8(-128), w)
	SUBQ(I8(-128), pf)
	ADDQ(U8(16), kt)
	DECQ(n)
	JNZ(LabelRef(name + "_four"))
	Label(name + "_tail")
	TESTQ(left, left)
	JZ(LabelRef(name + "_store"))
	VMOVDQU8_Z(at(w, 0), K1, v[0])
	VMOVDQU8_Z(at(w, 64), K2, hv[0])
	VMOVDQA64(v[0], v[1])
	four(false, hv[0])
	Label(name + "_store")
	for t := range acc {
		for h, ch := range acc[t] {
			for _, r := range ch[1:] {
				VPADDD(r, ch[0], ch[0])
			}
			VPADDD(at(sums, 128*t+64*h), ch[0], ch[0])
			VMOVDQU32(ch[0], at(sums, 128*t+64*h))
		}
	}
	ADDQ(U32(128*T), sums)
	ADDQ(at(a, lRBBytes), w0)
	DECQ(at(a, lNRB))
	JNZ(LabelRef(name + "_rb"))
	VZEROUPPER()
	RET()
}
