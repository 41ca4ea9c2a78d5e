package kernels

import (
	"encoding/binary"
	"unsafe"
)

// Generic (pure Go) versions of the GEMV operations of gemv_amd64.s: they define what each
// assembly function computes (see gemvArgs) and the tests compare the two. They are not in
// the dispatch list: the reference kernel is the portable path.

func bytesAt(p unsafe.Pointer, n int) []byte { return unsafe.Slice((*byte)(p), n) }

func int8At(p unsafe.Pointer, n int) []int8 { return unsafe.Slice((*int8)(p), n) }

func int32At(p unsafe.Pointer, n int) []int32 { return unsafe.Slice((*int32)(p), n) }

// segRange returns segment j's inputs [k0, k1) for steps of kstep inputs.
func (a *gemvArgs) segRange(j, kstep int) (int, int) {
	k0 := j * a.SegSteps * kstep
	if j == a.NSeg-1 {
		return k0, k0 + a.LastSteps*kstep
	}
	return k0, k0 + a.SegSteps*kstep
}

func (a *gemvArgs) kp(kstep int) int { return ((a.NSeg-1)*a.SegSteps + a.LastSteps) * kstep }

// gemvSums runs u(r, k) * x(t, k) over every segment, token and row (adding to Sums when
// a.Acc != 0).
func gemvSums(a *gemvArgs, T, kstep int, u func(r, k int) int32, x func(t, k int) int32) {
	sums := int32At(a.Sums, a.NSeg*T*RowBlock)
	for j := 0; j < a.NSeg; j++ {
		k0, k1 := a.segRange(j, kstep)
		for t := 0; t < T; t++ {
			for r := 0; r < RowBlock; r++ {
				var s int32
				for k := k0; k < k1; k++ {
					s += u(r, k) * x(t, k)
				}
				if a.Acc != 0 {
					s += sums[(j*T+t)*RowBlock+r]
				}
				sums[(j*T+t)*RowBlock+r] = s
			}
		}
	}
}

func xNat(a *gemvArgs, kp int) func(t, k int) int32 {
	return func(t, k int) int32 { return int32(int8At(unsafe.Add(a.X, t*a.XStride), kp)[k]) }
}

// gemvI2SGeneric: u = the i2s code (w+1); x natural; a step is one 128-input block;
// Aux is the bytes per row quad (W may point into the quads, at a part of K).
func gemvI2SGeneric(a *gemvArgs, T int) {
	kp := a.kp(128)
	w := bytesAt(a.W, 7*a.Aux+kp)
	u := func(r, k int) int32 {
		b, s, j := k/128, k%128/32, k%32
		return int32(w[r/4*a.Aux+(b*4+r%4)*32+j] >> (6 - 2*s) & 3)
	}
	gemvSums(a, T, 128, u, xNat(a, kp))
}

// gemvInt2Generic: u = Tab[code] (Tab[0:16] maps a nibble's low code to its unsigned level);
// x natural.
func gemvInt2Generic(a *gemvArgs, T, kstep int) {
	kp := a.kp(kstep)
	w := bytesAt(a.W, 8*kp)
	tab := bytesAt(a.Tab, 32)
	u := func(r, k int) int32 {
		return int32(tab[w[32*(k/4)+4*(r%8)+k%4]>>(2*(r/8))&3])
	}
	gemvSums(a, T, kstep, u, xNat(a, kp))
}

// gemvInt2SeqGeneric: u = the code (consecutive levels: seqCodebook); no table; x natural.
func gemvInt2SeqGeneric(a *gemvArgs, T int) {
	kp := a.kp(8)
	w := bytesAt(a.W, 8*kp)
	u := func(r, k int) int32 {
		return int32(w[32*(k/4)+4*(r%8)+k%4] >> (2 * (r / 8)) & 3)
	}
	gemvSums(a, T, 8, u, xNat(a, kp))
}

// gemvInt8Generic: u = w+128 with int8 x (offset), or u = w with int16 x (x16) or int8 x.
func gemvInt8Generic(a *gemvArgs, T int, offset, x16 bool) {
	kp := a.kp(4)
	w := bytesAt(a.W, 32*kp)
	u := func(r, k int) int32 {
		v := int32(int8(w[128*(k/4)+4*r+k%4]))
		if offset {
			v += 128
		}
		return v
	}
	x := xNat(a, kp)
	if x16 {
		x = func(t, k int) int32 {
			return int32(unsafe.Slice((*int16)(unsafe.Add(a.X, t*a.XStride)), kp)[k])
		}
	}
	gemvSums(a, T, 4, u, x)
}

// planeEntry reads the int16 entry i of a table stored as byte planes: its low byte at
// d[i], its high byte plane bytes later.
func planeEntry(d []byte, i, plane int) int32 {
	return int32(int16(uint16(d[i]) | uint16(d[plane+i])<<8))
}

// putPlane writes planeEntry i.
func putPlane(d []byte, i, plane int, v int16) { d[i], d[plane+i] = byte(v), byte(uint16(v)>>8) }

// putTL2Entry writes the sum s of magnitude v (0..15) into a tl2 triple's table d in layout
// kind, and its negation (entry 16 + v) where the layout holds it (tl2Entry reads them).
func putTL2Entry(kind tabKind, d []byte, v int, s int16) {
	switch kind {
	case tabTL2Z:
		putI16(d[2*v:], s)
		putI16(d[32+2*v:], -s)
	case tabTL2B:
		putPlane(d, v, 32, s)
		putPlane(d, 16+v, 32, -s)
	default: // tabTL2Y: magnitudes only
		putPlane(d, v, 16, s)
	}
}

// tl1Table reads entry i of pair h (0, 1) of a unit's 64-byte table.
func tl1Table(d []byte, h, i int) int32 { return planeEntry(d[32*h:], i, 16) }

// tl2Entry reads entry c (0..31: the magnitude's sum, negated from 16 on) of a tl2 triple's
// table d in layout kind.
func tl2Entry(kind tabKind, d []byte, c int) int32 {
	switch kind {
	case tabTL2Z:
		return int32(int16(binary.LittleEndian.Uint16(d[2*c:])))
	case tabTL2B:
		return planeEntry(d, c, 32)
	}
	e := planeEntry(d, c&15, 16) // tabTL2Y: magnitudes only
	if c&16 != 0 {
		e = -e
	}
	return e
}

// lutGeneric: the tl1/tl2 chunk operation (see lutArgs), tables in layout kind (a tl1
// kind: no blocks; a tl2 kind: blocks, then the tail in tailKind's layout).
func lutGeneric(a *lutArgs, T int, kind tabKind) {
	per := tripleBytes(kind) // (a tl1 layout: no blocks)
	nb, units := a.Blocks, a.Units
	if !isTL2Tab(kind) {
		nb = 0
	}
	unitBytes := 64 * units // a tl1 unit's two 32-byte pair tables
	if kind == tabTL1M {
		unitBytes = 16 * ((units + 3) / 4) // four units' reordered activations in 16 bytes
	}
	sums := int32At(a.Sums, a.NRB*T*RowBlock)
	for rb := 0; rb < a.NRB; rb++ {
		w := bytesAt(unsafe.Add(a.W, rb*a.RBBytes), 320*nb+32*units)
		for t := 0; t < T; t++ {
			tab := bytesAt(unsafe.Add(a.Tab, t*a.TabStride), per*16*nb+unitBytes)
			for r := 0; r < RowBlock; r++ {
				var s int32
				for b := 0; b < nb; b++ {
					p := w[320*b:]
					for tr := 0; tr < 16; tr++ {
						s += tl2Entry(kind, tab[per*(16*b+tr):], int(tl2Code(p, tr, r)))
					}
				}
				tt := tab[per*16*nb:]
				for u := 0; u < units; u++ {
					v := w[320*nb+32*u+r]
					if kind == tabTL1M { // u = w+1 codes times the reordered activations
						for p, c := range [4]int{int(v & 15), int(v & 15), int(v >> 4), int(v >> 4)} {
							code := c / 3 % 3
							if p%2 == 1 {
								code = c % 3
							}
							s += int32(code) * int32(int8(tt[16*(u/4)+4*p+u%4]))
						}
						continue
					}
					s += tl1Table(tt[64*u:], 0, int(v&15)) + tl1Table(tt[64*u:], 1, int(v>>4))
				}
				sums[(rb*T+t)*RowBlock+r] += s
			}
		}
	}
	if a.BN > 0 {
		x := unsafe.Slice((*int8)(a.BX), 3*a.BN)
		buildLUT(tabTL2Z, Layout{K3: 3 * a.BN}, x, bytesAt(a.BTab, 64*a.BN))
	}
}

// tl2PanelGeneric is the panel kernels' reference (see panelArgs) for T tokens, tables in
// layout kind, tabBlock bytes a block.
func tl2PanelGeneric(a *panelArgs, T int, kind tabKind, tabBlock int) {
	sums := int32At(a.Sums, a.NRB*T*RowBlock)
	per := tripleBytes(kind)
	for i := 0; i < a.NRB; i++ {
		for t := 0; t < T; t++ {
			for b := 0; b < a.Blocks; b++ {
				p := bytesAt(unsafe.Add(a.W, b*a.BStride+320*i), 320)
				tab := bytesAt(unsafe.Add(a.Tab, t*a.TabStride+tabBlock*b), 16*per)
				for r := 0; r < RowBlock; r++ {
					var s int32
					for tr := 0; tr < 16; tr++ {
						s += tl2Entry(kind, tab[per*tr:], tl2Code(p, tr, r))
					}
					sums[(i*T+t)*RowBlock+r] += s
				}
			}
		}
	}
}
