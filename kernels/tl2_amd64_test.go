//go:build !noasm

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// randTL2RowBlock is one tl2 row block of nb blocks and units tl1 tail units with random
// valid codes: magnitudes 0..13 with either sign (16, the negative zero, included), or
// magnitude mag with sign neg for every triple when mag >= 0.
func randTL2RowBlock(rng *rand.Rand, nb, units, mag int, neg bool) []byte {
	w := make([]byte, 320*nb+32*units)
	for b := 0; b < nb; b++ {
		for t := 0; t < 16; t++ {
			for r := 0; r < RowBlock; r++ {
				c := rng.IntN(14) + 16*rng.IntN(2)
				if mag >= 0 {
					c = mag
					if neg {
						c += 16
					}
				}
				setTL2Code(w[320*b:][:320], t, r, c)
			}
		}
	}
	for i := 320 * nb; i < len(w); i++ {
		w[i] = byte(rng.IntN(9) | rng.IntN(9)<<4)
	}
	return w
}

// TestUnpackTL2 holds unpackTL2AVX2 to unpackGeneric byte for byte on random codes (every
// code, the negative zero included) and block counts with and without a tl1 tail.
func TestUnpackTL2(t *testing.T) {
	if !ISAAvailable(ISAAVX2) {
		t.Skip("no AVX2")
	}
	rng := rand.New(rand.NewPCG(21, 21))
	for _, sh := range [][2]int{{1, 0}, {1, 1}, {2, 3}, {5, 0}, {7, 2}, {0, 4}} {
		nb, units := sh[0], sh[1]
		for rep := 0; rep < 4; rep++ {
			w := randTL2RowBlock(rng, nb, units, -1, false)
			kp := TL2Block*nb + 4*units
			got, want := make([]byte, RowBlock*kp+64), make([]byte, RowBlock*kp+64)
			for i := range got {
				got[i], want[i] = 0xEE, 0xEE
			}
			a := unpackArgs{W: unsafe.Pointer(&w[0]), B: unsafe.Pointer(&got[0]), N: nb, N2: units}
			unpackTL2AVX2(argp(&a))
			a.B = unsafe.Pointer(&want[0])
			unpackGeneric(&a, "tl2")
			check := func(what string) {
				for i := range want {
					if got[i] != want[i] {
						q, r, k := i/128, i%128/4, i%128%4
						t.Fatalf("%d blocks, %d units%s: byte %d (quad %d row %d input %d) = %d, want %d", nb, units, what, i, q, r, k, got[i], want[i])
					}
				}
			}
			check("")
			// The same row block as a panel-major blob holds it: blocks stride bytes apart,
			// the tail elsewhere; both unpacks must give the contiguous one's bytes.
			stride := 320 * (1 + rep)
			spread := make([]byte, stride*max(nb, 1)+32*units+64)
			for i := range spread {
				spread[i] = byte(rng.Uint32()) // (what lies between the blocks must not matter)
			}
			for b := 0; b < nb; b++ {
				copy(spread[stride*b:][:320], w[320*b:])
			}
			tail := spread[stride*max(nb, 1):]
			copy(tail, w[320*nb:][:32*units])
			for _, run := range []func(*unpackArgs){func(a *unpackArgs) { unpackTL2AVX2(argp(a)) }, func(a *unpackArgs) { unpackGeneric(a, "tl2") }} {
				for i := range got {
					got[i] = 0xEE
				}
				a := unpackArgs{W: unsafe.Pointer(&spread[0]), B: unsafe.Pointer(&got[0]), N: nb, N2: units, Stride: stride, Tail: unsafe.Pointer(&tail[0])}
				run(&a)
				check(fmt.Sprintf(", blocks %d bytes apart", stride))
			}
		}
	}
}

// lutCase is one chunk a lookup-kernel test runs: nrb row blocks of nb tl2 blocks and units
// tl1 units, with codes as randTL2RowBlock makes them (every triple of magnitude mag and
// sign neg when mag >= 0; tl1 units all pair code unitCode when that is >= 0), and table
// entries random, or +-ext (of the other sign for every other token) when ext != 0.
type lutCase struct {
	nb, units, nrb, mag int
	neg                 bool
	unitCode            int
	ext                 int16
}

// lutKernel is a lookup kernel under test: T tokens, tables in layout kind.
type lutKernel struct {
	name string
	fn   func(*byte)
	T    int
	kind tabKind
}

// checkLUT runs k on a chunk of case c and holds its sums (added to random ones) to
// lutGeneric's.
func checkLUT(t *testing.T, rng *rand.Rand, k lutKernel, c lutCase) {
	t.Helper()
	rbBytes := 320*c.nb + 32*c.units
	w := make([]byte, 0, c.nrb*rbBytes+1)
	for rb := 0; rb < c.nrb; rb++ {
		w = append(w, randTL2RowBlock(rng, c.nb, c.units, c.mag, c.neg)...)
		if c.unitCode >= 0 {
			for i := len(w) - 32*c.units; i < len(w); i++ {
				w[i] = byte(c.unitCode | c.unitCode<<4)
			}
		}
	}
	w = append(w, 0)
	per3 := tripleBytes(k.kind)
	tail := per3 * 16 * c.nb
	per := tail + 64*c.units + 64 // a token's tables, and a gap
	tab := make([]byte, per*k.T+1)
	entry := func(tok int, bound int) int16 {
		if c.ext != 0 {
			return c.ext * int16(1-2*(tok%2))
		}
		return int16(rng.IntN(2*bound+1) - bound)
	}
	for tok := 0; tok < k.T; tok++ {
		tt := tab[per*tok:]
		for tr := 0; tr < 16*c.nb; tr++ {
			for m := 1; m < 14; m++ {
				putTL2Entry(k.kind, tt[per3*tr:][:per3], m, entry(tok, 381))
			}
		}
		for u := 0; u < c.units; u++ {
			for h := 0; h < 2; h++ {
				for i := 0; i < 9; i++ {
					putPlane(tt[tail+64*u+32*h:], i, 16, entry(tok, 254))
				}
			}
		}
	}
	got, want := make([]int32, c.nrb*k.T*RowBlock), make([]int32, c.nrb*k.T*RowBlock)
	for i := range got {
		got[i] = int32(rng.IntN(1000))
		want[i] = got[i]
	}
	a := lutArgs{W: unsafe.Pointer(&w[0]), RBBytes: rbBytes, NRB: c.nrb, Sums: unsafe.Pointer(&got[0]),
		Tab: unsafe.Pointer(&tab[0]), TabStride: per, Blocks: c.nb, Units: c.units}
	k.fn(argp(&a))
	a.Sums, a.NRB = unsafe.Pointer(&want[0]), c.nrb // the kernel counts NRB down
	lutGeneric(&a, k.T, k.kind)
	for i := range want {
		if got[i] != want[i] {
			rb, tok, r := i/(k.T*RowBlock), i/RowBlock%k.T, i%RowBlock
			t.Fatalf("%s, %+v: row block %d token %d row %d: %d, want %d", k.name, c, rb, tok, r, got[i], want[i])
		}
	}
}

// tl2Cases are random chunks of nbs blocks with and without a tl1 tail (nrb 3), and
// chunks of extNBs blocks at the extremes of the int16 chains: every code the same
// magnitude and sign against entries of +-381.
func tl2Cases(nbs, extNBs []int, nrb int) []lutCase {
	var cases []lutCase
	for _, nb := range nbs {
		for _, units := range []int{0, 3} {
			cases = append(cases, lutCase{nb: nb, units: units, nrb: 3, mag: -1, unitCode: -1})
		}
	}
	for _, nb := range extNBs {
		for _, ext := range []int16{381, -381} {
			for _, neg := range []bool{false, true} {
				for _, mag := range []int{1, 13} {
					cases = append(cases, lutCase{nb: nb, nrb: nrb, mag: mag, neg: neg, unitCode: -1, ext: ext})
				}
			}
		}
	}
	return cases
}

// TestLUTTL2AVX2 holds lutTL2T1AVX2 and lutTL2T2AVX2 to lutGeneric (ymm tables) on random
// codes and tables, and on the extremes of the int16 sums over enough blocks for several
// flushes, with several row blocks.
func TestLUTTL2AVX2(t *testing.T) {
	if !ISAAvailable(ISAAVX2) {
		t.Skip("no AVX2")
	}
	rng := rand.New(rand.NewPCG(22, 22))
	cases := append(tl2Cases([]int{1, 4, 5, 6, 11, 48}, []int{23}, 2), lutCase{nb: 0, units: 5, nrb: 2, mag: -1, unitCode: -1})
	for _, k := range []lutKernel{{"lutTL2T1AVX2", lutTL2T1AVX2, 1, tabTL2Y}, {"lutTL2T2AVX2", lutTL2T2AVX2, 2, tabTL2Y}} {
		for _, c := range cases {
			checkLUT(t, rng, k, c)
		}
	}
}

// TestLUTTL2AVX512 holds the zmm tl2 chunk kernels (one to four tokens, with and without
// software prefetch) to lutGeneric on random codes and tables, and at the extremes of
// their int16 chains over a chunk's most blocks (TL2Chunk) and over 23, enough for several
// flushes of the kernels' own counts, with three row blocks (the pair kernels take row
// blocks two at a time).
func TestLUTTL2AVX512(t *testing.T) {
	if !ISAAvailable(ISAAVX512) {
		t.Skip("no AVX-512")
	}
	rng := rand.New(rand.NewPCG(23, 23))
	ks := []lutKernel{
		{"lutTL2T1AVX512", lutTL2T1AVX512, 1, tabTL2Z}, {"lutTL2T1AVX512HW", lutTL2T1AVX512HW, 1, tabTL2Z},
		{"lutTL2T2AVX512", lutTL2T2AVX512, 2, tabTL2Z}, {"lutTL2T2AVX512NT", lutTL2T2AVX512NT, 2, tabTL2Z},
		{"lutTL2T3AVX512", lutTL2T3AVX512, 3, tabTL2B}, {"lutTL2T4AVX512", lutTL2T4AVX512, 4, tabTL2B},
	}
	for _, k := range ks {
		for _, c := range tl2Cases([]int{1, 5, TL2Chunk, 23}, []int{TL2Chunk, 23}, 3) {
			checkLUT(t, rng, k, c)
		}
	}
}

// TestLUTTL1Extremes holds the tl1 chunk kernels that sum int16 lookups (zmm one token,
// AVX2 one and two tokens) to lutGeneric where their chains run widest: every unit's two
// pair codes one sum of two equal weights (+-(x0 + x1)) against entries of +-254, the
// other sign for the second token, over enough units for several of the kernels' flushes
// (333 units: a flush every 32 units a chain), and on random units and tables.
func TestLUTTL1Extremes(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 24))
	var ks []lutKernel
	if ISAAvailable(ISAAVX512) {
		ks = append(ks, lutKernel{"lutTL1T1AVX512", lutTL1T1AVX512, 1, tabTL1Z})
	}
	if ISAAvailable(ISAAVX2) {
		ks = append(ks, lutKernel{"lutTL1T1AVX2", lutTL1T1AVX2, 1, tabTL1Y}, lutKernel{"lutTL1T2AVX2", lutTL1T2AVX2, 2, tabTL1Y})
	}
	for _, k := range ks {
		for _, units := range []int{1, 7, 64, 200, 333} {
			for _, ext := range []int16{0, 254, -254} {
				c := lutCase{units: units, nrb: 3, mag: -1, unitCode: -1, ext: ext}
				if ext != 0 {
					c.unitCode = rng.IntN(9)
				}
				checkLUT(t, rng, k, c)
			}
		}
	}
}

// TestTL2Panel holds tl2PanelT1AVX512 to tl2PanelT4AVX512, tl2PanelT1AVX2 and
// tl2PanelT2AVX2 to tl2PanelGeneric: random codes and tables on part or all of a panel,
// and the extremes of the int16 sums (every code of one magnitude and sign against entries
// of +-381, of the other sign for every other token) over enough blocks for several
// widenings, the last group of blocks of every size from one to five. tl2PanelT1AVX512
// builds its tables from the activations: random ones, or every one +-127 (or -128) where
// the others take entries of +-381 (buildLUT's tables are the reference's).
func TestTL2Panel(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 23))
	type pcase struct {
		nb, nrb, g, mag int
		neg             bool
		ext             int16
	}
	var cases []pcase
	for _, nb := range []int{1, 2, 4, 5, 6, 11, 23} {
		cases = append(cases, pcase{nb, 3, 3, -1, false, 0}, pcase{nb, 5, 16, -1, false, 0}, pcase{nb, 16, 16, -1, false, 0})
	}
	for _, nb := range []int{20, 21, 22, 23, 24} {
		for _, ext := range []int16{381, -381} {
			for _, neg := range []bool{false, true} {
				cases = append(cases, pcase{nb, 2, 4, 13, neg, ext}, pcase{nb, 2, 4, 1, neg, ext})
			}
		}
	}
	type pk struct {
		name     string
		fn       func(*byte)
		T        int
		isa      ISA
		kind     tabKind
		tabBlock int
		acts     bool // Tab: the activations, 48 a block (fmtOps.panelActs)
	}
	for _, k := range []pk{
		{"tl2PanelT1AVX512", tl2PanelT1AVX512, 1, ISAAVX512, tabTL2Z, 1024, true}, {"tl2PanelT2AVX512", tl2PanelT2AVX512, 2, ISAAVX512, tabTL2Z, 1024, false},
		{"tl2PanelT3AVX512", tl2PanelT3AVX512, 3, ISAAVX512, tabTL2Z, 1024, false}, {"tl2PanelT4AVX512", tl2PanelT4AVX512, 4, ISAAVX512, tabTL2Z, 1024, false},
		{"tl2PanelT1AVX2", tl2PanelT1AVX2, 1, ISAAVX2, tabTL2Y, 512, false}, {"tl2PanelT2AVX2", tl2PanelT2AVX2, 2, ISAAVX2, tabTL2Y, 512, false},
	} {
		if !ISAAvailable(k.isa) {
			t.Logf("%s: no %s", k.name, k.isa)
			continue
		}
		T, fn, tabBlock, per := k.T, k.fn, k.tabBlock, tripleBytes(k.kind)
		for _, c := range cases {
			// the panel: g row blocks' blocks side by side, block after block; the call
			// takes nrb of them from row block 1 on (or 0 where nrb = g)
			first := min(1, c.g-c.nrb)
			w := make([]byte, 320*c.nb*c.g+1)
			for rb := 0; rb < c.g; rb++ {
				s := randTL2RowBlock(rng, c.nb, 0, c.mag, c.neg)
				for b := 0; b < c.nb; b++ {
					copy(w[320*(b*c.g+rb):][:320], s[320*b:])
				}
			}
			tabStride := tabBlock*c.nb + 64 // a token's tables, and a gap
			tab := make([]byte, tabStride*T)
			var x []int8 // (k.acts: one token's activations)
			if k.acts {
				x = make([]int8, TL2Block*c.nb+1)
				for i := range x {
					x[i] = int8(rng.IntN(256) - 128)
					if c.ext != 0 {
						x[i] = int8(c.ext / 3)
					}
					if c.ext < 0 && i%5 == 0 {
						x[i] = -128 // (-384 at most: 16 triples, 5 blocks, within int16)
					}
				}
				for b := 0; b < c.nb; b++ {
					buildLUT(k.kind, Layout{K3: TL2Block}, x[TL2Block*b:], tab[tabBlock*b:][:tabBlock])
				}
			}
			for tok := 0; tok < T && !k.acts; tok++ {
				for b := 0; b < c.nb; b++ {
					for tr := 0; tr < 16; tr++ {
						for m := 1; m < 14; m++ {
							e := c.ext * int16(1-2*(tok%2))
							if e == 0 {
								e = int16(rng.IntN(763) - 381)
							}
							putTL2Entry(k.kind, tab[tok*tabStride+tabBlock*b+per*tr:][:per], m, e)
						}
					}
				}
			}
			got, want := make([]int32, c.nrb*T*RowBlock), make([]int32, c.nrb*T*RowBlock)
			for i := range got {
				got[i] = int32(rng.IntN(1000))
				want[i] = got[i]
			}
			acc := make([]int16, c.nrb*T*RowBlock)
			a := panelArgs{W: unsafe.Pointer(&w[320*first]), NRB: c.nrb, BStride: 320 * c.g, Blocks: c.nb, Tab: unsafe.Pointer(&tab[0]),
				TabStride: tabStride, Sums: unsafe.Pointer(&got[0]), Acc: unsafe.Pointer(&acc[0])}
			if k.acts {
				a.Tab = unsafe.Pointer(&x[0])
			}
			fn(argp(&a))
			a.Sums, a.Tab = unsafe.Pointer(&want[0]), unsafe.Pointer(&tab[0])
			tl2PanelGeneric(&a, T, k.kind, tabBlock)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%s, %+v: row block %d token %d row %d: %d, want %d", k.name, c, i/(T*RowBlock), i/RowBlock%T, i%RowBlock, got[i], want[i])
				}
			}
		}
	}
}
