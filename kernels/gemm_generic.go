package kernels

import (
	"encoding/binary"
	"unsafe"
)

// Generic versions of the GEMM operations of gemm_amd64.s (see unpackArgs, gemmArgs).

// unpackGeneric decodes a row block into B[q][r][i] = u(r, 4q+i) with u = w+1 (ternary
// formats), Tab[code] (int2), the sign bit (int1: 1 for -1), w+128 (int8). A tl2 or int1
// row block is read block by block, Stride bytes apart (0: side by side), as a panel-major
// blob holds it (Layout.BlockAt): N blocks of 48 inputs (tl2, then the tl1 tail) or 32
// (int1, 128 bytes each, int1.go).
func unpackGeneric(a *unpackArgs, f string) {
	var kp int
	switch f {
	case "i2s":
		kp = 128 * a.N
	case "tl2":
		kp = TL2Block*a.N + 4*a.N2
	case "int1":
		kp = 32 * a.N
	default:
		kp = 4 * a.N
	}
	b := bytesAt(a.B, RowBlock*kp)
	put := func(r, k int, u byte) { b[(k/4)*128+4*r+k%4] = u }
	switch f {
	case "i2s":
		w := bytesAt(a.W, 8*kp)
		for r := 0; r < RowBlock; r++ {
			for k := 0; k < kp; k++ {
				blk, s, j := k/128, k%128/32, k%32
				put(r, k, w[r/4*a.N2+(blk*4+r%4)*32+j]>>(6-2*s)&3)
			}
		}
	case "int2":
		w, tab := bytesAt(a.W, 8*kp), bytesAt(a.Tab, 16)
		for r := 0; r < RowBlock; r++ {
			for k := 0; k < kp; k++ {
				put(r, k, tab[w[32*(k/4)+4*(r%8)+k%4]>>(2*(r/8))&3])
			}
		}
	case "int1":
		stride := a.Stride
		if stride == 0 {
			stride = int1BlockBytes
		}
		for blk := 0; blk < a.N; blk++ {
			p := bytesAt(unsafe.Add(a.W, stride*blk), int1BlockBytes)
			for h := 0; h < 2; h++ {
				for r := 0; r < RowBlock; r++ {
					v := binary.LittleEndian.Uint16(p[64*h+2*r:])
					for j := 0; j < 16; j++ {
						put(r, 32*blk+16*h+j, byte(v>>j&1))
					}
				}
			}
		}
	case "int8":
		w := bytesAt(a.W, 32*kp)
		for r := 0; r < RowBlock; r++ {
			for k := 0; k < kp; k++ {
				put(r, k, w[128*(k/4)+4*r+k%4]^0x80)
			}
		}
	case "tl1":
		unpackTL1Units(bytesAt(a.W, 8*kp), 0, a.N, put)
	case "tl2":
		stride := a.Stride
		if stride == 0 {
			stride = 320
		}
		for blk := 0; blk < a.N; blk++ {
			p := bytesAt(unsafe.Add(a.W, stride*blk), 320)
			for t := 0; t < 16; t++ {
				for r := 0; r < RowBlock; r++ {
					v := tl2Value(tl2Code(p, t, r))
					d0 := (v + 13) / 9
					rem := v + 13 - 9*d0
					k := TL2Block*blk + 3*t
					put(r, k, byte(d0))
					put(r, k+1, byte(rem/3))
					put(r, k+2, byte(rem%3))
				}
			}
		}
		tail := a.Tail
		if tail == nil {
			tail = unsafe.Add(a.W, stride*a.N)
		}
		unpackTL1Units(bytesAt(tail, 32*a.N2), TL2Block*a.N, a.N2, put)
	}
}

func unpackTL1Units(w []byte, k0, units int, put func(r, k int, u byte)) {
	for u := 0; u < units; u++ {
		for r := 0; r < RowBlock; r++ {
			v := w[32*u+r]
			for h := 0; h < 2; h++ {
				idx := v >> (4 * h) & 15
				k := k0 + 4*u + 2*h
				put(r, k, idx/3)
				put(r, k+1, idx%3)
			}
		}
	}
}

// tileGeneric is the micro-kernel for T tokens.
func tileGeneric(a *gemmArgs, T int) {
	nq := (a.NSeg-1)*a.SegQ + a.LastQ
	b := bytesAt(a.B, 128*nq)
	for j := 0; j < a.NSeg; j++ {
		q0, q1 := j*a.SegQ, j*a.SegQ+a.SegQ
		if j == a.NSeg-1 {
			q1 = q0 + a.LastQ
		}
		sums := int32At(unsafe.Add(a.Sums, j*a.SumsSeg), T*RowBlock)
		for t := 0; t < T; t++ {
			for r := 0; r < RowBlock; r++ {
				var s int32
				for q := q0; q < q1; q++ {
					x := int8At(unsafe.Add(a.X, q*a.XQ+4*t), 4)
					for i := 0; i < 4; i++ {
						s += int32(b[128*q+4*r+i]) * int32(x[i])
					}
				}
				sums[t*RowBlock+r] = s
			}
		}
	}
}
