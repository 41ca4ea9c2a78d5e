package kernels

import (
	"encoding/binary"
	"unsafe"
)

// int1Bias writes x's inputs as the int1 kernels read activations (int1Args.X): u8 x+128,
// eight at a time (a byte at a time it took 1.07 us for K = 2560, 4% of a call of
// 2560x2560 from DRAM at one thread).
func int1Bias(x []int8, dst []byte) {
	dst = dst[:len(x)]
	n := len(x) &^ 7
	for i := 0; i < n; i += 8 {
		v := binary.LittleEndian.Uint64(unsafe.Slice((*byte)(unsafe.Pointer(&x[i])), 8))
		binary.LittleEndian.PutUint64(dst[i:], v^0x8080808080808080)
	}
	for i := n; i < len(x); i++ {
		dst[i] = byte(x[i]) ^ 0x80
	}
}

// int1QuadSum is T_q[c] of int1.go: the sum of the four inputs at x, each negated where
// code c has its bit set.
func int1QuadSum(c int, x []int8) int16 {
	s := 0
	for i := range 4 {
		s += (1 - 2*(c>>i&1)) * int(x[i])
	}
	return int16(s)
}

// int1PanelGeneric is the reference of the int1 panel kernels of T tokens (int1Args): it
// reads the weights' bits and the biased activations at X, never Tab or Acc.
func int1PanelGeneric(a *int1Args, T int) {
	for i := range a.NRB {
		for t := range T {
			x := unsafe.Slice((*byte)(unsafe.Add(a.X, t*a.XStride)), 32*a.Blocks)
			sums := unsafe.Slice((*int32)(unsafe.Add(a.Sums, i*a.SStride+128*t)), RowBlock)
			for b := range a.Blocks {
				blk := unsafe.Slice((*byte)(unsafe.Add(a.W, b*a.BStride+int1BlockBytes*i)), int1BlockBytes)
				for r := range RowBlock {
					s := int32(0)
					for h := range 2 {
						v := binary.LittleEndian.Uint16(blk[64*h+2*r:])
						for j := range 16 {
							xv := int32(int8(x[32*b+16*h+j] ^ 0x80))
							if v>>j&1 != 0 {
								s -= xv
							} else {
								s += xv
							}
						}
					}
					sums[r] += s
				}
			}
		}
	}
}

// int1PanelGenericT is int1PanelGeneric for T tokens as an assembly kernel's function.
func int1PanelGenericT(T int) func(*byte) {
	return func(p *byte) { int1PanelGeneric((*int1Args)(unsafe.Pointer(p)), T) }
}
