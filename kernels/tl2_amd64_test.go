//go:build !noasm

package kernels

import (
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
			for i := range want {
				if got[i] != want[i] {
					q, r, k := i/128, i%128/4, i%128%4
					t.Fatalf("%d blocks, %d units: byte %d (quad %d row %d input %d) = %d, want %d", nb, units, i, q, r, k, got[i], want[i])
				}
			}
		}
	}
}

// TestLUTTL2AVX2 holds lutTL2T1AVX2 and lutTL2T2AVX2 to lutGeneric (ymm tables) on random
// codes and tables, and on the extremes of the int16 sums: every code the same magnitude and
// sign against tables of +-381 (the second token's of the other sign) over enough blocks for
// several flushes, with several row blocks.
func TestLUTTL2AVX2(t *testing.T) {
	if !ISAAvailable(ISAAVX2) {
		t.Skip("no AVX2")
	}
	rng := rand.New(rand.NewPCG(22, 22))
	type tcase struct {
		nb, units, nrb, mag int
		neg                 bool
		ext                 int16 // table entries all +-ext when nonzero
	}
	var cases []tcase
	for _, nb := range []int{1, 4, 5, 6, 11, 48} {
		for _, units := range []int{0, 3} {
			cases = append(cases, tcase{nb: nb, units: units, nrb: 3, mag: -1})
		}
	}
	for _, ext := range []int16{381, -381} {
		for _, neg := range []bool{false, true} {
			for _, mag := range []int{1, 13} {
				cases = append(cases, tcase{nb: 23, units: 0, nrb: 2, mag: mag, neg: neg, ext: ext})
			}
		}
	}
	cases = append(cases, tcase{nb: 0, units: 5, nrb: 2, mag: -1})
	kernels := []func(*byte){nil, lutTL2T1AVX2, lutTL2T2AVX2}
	for T := 1; T <= 2; T++ {
		for _, c := range cases {
			rbBytes := 320*c.nb + 32*c.units
			w := make([]byte, 0, c.nrb*rbBytes+1)
			for rb := 0; rb < c.nrb; rb++ {
				w = append(w, randTL2RowBlock(rng, c.nb, c.units, c.mag, c.neg)...)
			}
			w = append(w, 0)
			per := 512*c.nb + 64*c.units + 64 // a token's tables, and a gap
			tab := make([]byte, per*T+1)
			for tok := 0; tok < T; tok++ {
				tt := tab[per*tok:]
				for tr := 0; tr < 16*c.nb; tr++ {
					for m := 1; m < 14; m++ {
						e := int16(rng.IntN(763) - 381)
						if c.ext != 0 {
							e = c.ext * int16(1-2*tok)
						}
						tt[32*tr+m], tt[32*tr+16+m] = byte(e), byte(uint16(e)>>8)
					}
				}
				for u := 0; u < c.units; u++ {
					for h := 0; h < 2; h++ {
						for i := 0; i < 9; i++ {
							e := int16(rng.IntN(509) - 254)
							tt[512*c.nb+64*u+32*h+i], tt[512*c.nb+64*u+32*h+16+i] = byte(e), byte(uint16(e)>>8)
						}
					}
				}
			}
			got, want := make([]int32, c.nrb*T*RowBlock), make([]int32, c.nrb*T*RowBlock)
			for i := range got {
				got[i] = int32(rng.IntN(1000))
				want[i] = got[i]
			}
			a := lutArgs{W: unsafe.Pointer(&w[0]), RBBytes: rbBytes, NRB: c.nrb, Sums: unsafe.Pointer(&got[0]),
				Tab: unsafe.Pointer(&tab[0]), TabStride: per, Blocks: c.nb, Units: c.units}
			kernels[T](argp(&a))
			a.Sums, a.NRB = unsafe.Pointer(&want[0]), c.nrb // the kernel counts NRB down
			lutGeneric(&a, T, tabTL2Y)
			for i := range want {
				if got[i] != want[i] {
					rb, tok, r := i/(T*RowBlock), i/RowBlock%T, i%RowBlock
					t.Fatalf("%d token(s), %+v: row block %d token %d row %d: %d, want %d", T, c, rb, tok, r, got[i], want[i])
				}
			}
		}
	}
}

// TestLUTTL2AVX512 holds the zmm tl2 chunk kernels (one to four tokens, with and without
// software prefetch) to lutGeneric on random codes and tables, and on the extremes of their
// int16 chains: every code the same magnitude and sign against entries of +-381 (the other
// sign for every other token) over a chunk's most blocks (TL2Chunk) and over 23, enough
// for several flushes of the kernels' own counts, with one to three row blocks (the pair
// kernels take row blocks two at a time).
func TestLUTTL2AVX512(t *testing.T) {
	if !ISAAvailable(ISAAVX512) {
		t.Skip("no AVX-512")
	}
	rng := rand.New(rand.NewPCG(23, 23))
	type tcase struct {
		nb, units, nrb, mag int
		neg                 bool
		ext                 int16 // every entry of magnitude 1..13 +-ext when nonzero
	}
	var cases []tcase
	for _, nb := range []int{1, 5, TL2Chunk, 23} {
		for _, units := range []int{0, 3} {
			cases = append(cases, tcase{nb: nb, units: units, nrb: 3, mag: -1})
		}
	}
	for _, nb := range []int{TL2Chunk, 23} {
		for _, ext := range []int16{381, -381} {
			for _, neg := range []bool{false, true} {
				for _, mag := range []int{1, 13} {
					cases = append(cases, tcase{nb: nb, nrb: 3, mag: mag, neg: neg, ext: ext})
				}
			}
		}
	}
	kernels := []struct {
		name string
		fn   func(*byte)
		T    int
		kind tabKind
	}{
		{"lutTL2T1AVX512", lutTL2T1AVX512, 1, tabTL2Z}, {"lutTL2T1AVX512HW", lutTL2T1AVX512HW, 1, tabTL2Z},
		{"lutTL2T2AVX512", lutTL2T2AVX512, 2, tabTL2Z}, {"lutTL2T2AVX512NT", lutTL2T2AVX512NT, 2, tabTL2Z},
		{"lutTL2T3AVX512", lutTL2T3AVX512, 3, tabTL2B}, {"lutTL2T4AVX512", lutTL2T4AVX512, 4, tabTL2B},
	}
	for _, k := range kernels {
		for _, c := range cases {
			rbBytes := 320*c.nb + 32*c.units
			w := make([]byte, 0, c.nrb*rbBytes+1)
			for rb := 0; rb < c.nrb; rb++ {
				w = append(w, randTL2RowBlock(rng, c.nb, c.units, c.mag, c.neg)...)
			}
			w = append(w, 0)
			per := 64*16*c.nb + 64*c.units + 64 // a token's tables, and a gap
			tab := make([]byte, per*k.T+1)
			for tok := 0; tok < k.T; tok++ {
				tt := tab[per*tok:]
				for tr := 0; tr < 16*c.nb; tr++ {
					d := tt[64*tr:][:64]
					for m := 1; m < 14; m++ {
						e := int16(rng.IntN(763) - 381)
						if c.ext != 0 {
							e = c.ext * int16(1-2*(tok%2))
						}
						for _, ce := range [2]struct {
							code int
							v    int16
						}{{m, e}, {16 + m, -e}} {
							if k.kind == tabTL2B {
								d[ce.code], d[32+ce.code] = byte(ce.v), byte(uint16(ce.v)>>8)
							} else {
								d[2*ce.code], d[2*ce.code+1] = byte(ce.v), byte(uint16(ce.v)>>8)
							}
						}
					}
				}
				for u := 0; u < c.units; u++ {
					for h := 0; h < 2; h++ {
						for i := 0; i < 9; i++ {
							e := int16(rng.IntN(509) - 254)
							o := 64*16*c.nb + 64*u + 32*h + i
							tt[o], tt[o+16] = byte(e), byte(uint16(e)>>8)
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
	}
}

// TestLUTTL1Extremes holds the tl1 chunk kernels that sum int16 lookups (zmm one token,
// AVX2 one and two tokens) to lutGeneric where their chains run widest: every unit's two
// pair codes one sum of two equal weights (+-(x0 + x1)) against entries of +-254, the
// other sign for the second token, over enough units for several flushes (the chains take
// 32 units each between flushes), and on random units and tables.
func TestLUTTL1Extremes(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 24))
	kernels := []struct {
		name string
		fn   func(*byte)
		T    int
		kind tabKind
		isa  ISA
	}{
		{"lutTL1T1AVX512", lutTL1T1AVX512, 1, tabTL1Z, ISAAVX512},
		{"lutTL1T1AVX2", lutTL1T1AVX2, 1, tabTL1Y, ISAAVX2}, {"lutTL1T2AVX2", lutTL1T2AVX2, 2, tabTL1Y, ISAAVX2},
	}
	for _, k := range kernels {
		if !ISAAvailable(k.isa) {
			continue
		}
		for _, units := range []int{1, 7, 64, 200, 333} {
			for _, ext := range []int16{0, 254, -254} {
				const nrb = 3
				code := byte(rng.IntN(9)) // the same pair code for every pair when ext != 0
				w := make([]byte, nrb*32*units+1)
				for i := range w[:nrb*32*units] {
					w[i] = byte(rng.IntN(9) | rng.IntN(9)<<4)
					if ext != 0 {
						w[i] = code | code<<4
					}
				}
				per := 64*units + 64
				tab := make([]byte, per*k.T+1)
				for tok := 0; tok < k.T; tok++ {
					for u := 0; u < units; u++ {
						for h := 0; h < 2; h++ {
							for i := 0; i < 9; i++ {
								e := int16(rng.IntN(509) - 254)
								if ext != 0 {
									e = ext * int16(1-2*tok)
								}
								o := per*tok + 64*u + 32*h + i
								tab[o], tab[o+16] = byte(e), byte(uint16(e)>>8)
							}
						}
					}
				}
				got, want := make([]int32, nrb*k.T*RowBlock), make([]int32, nrb*k.T*RowBlock)
				for i := range got {
					got[i] = int32(rng.IntN(1000))
					want[i] = got[i]
				}
				a := lutArgs{W: unsafe.Pointer(&w[0]), RBBytes: 32 * units, NRB: nrb, Sums: unsafe.Pointer(&got[0]),
					Tab: unsafe.Pointer(&tab[0]), TabStride: per, Units: units}
				k.fn(argp(&a))
				a.Sums, a.NRB = unsafe.Pointer(&want[0]), nrb
				lutGeneric(&a, k.T, k.kind)
				for i := range want {
					if got[i] != want[i] {
						rb, tok, r := i/(k.T*RowBlock), i/RowBlock%k.T, i%RowBlock
						t.Fatalf("%s, %d units, entries %d: row block %d token %d row %d: %d, want %d", k.name, units, ext, rb, tok, r, got[i], want[i])
					}
				}
			}
		}
	}
}
