//go:build !noasm

package kernels

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestUnpackInt1 holds unpackInt1AVX2 to unpackGeneric byte for byte on random blocks, side
// by side (Stride 0) and as a panel-major blob holds a row block (blocks Stride bytes apart,
// random bytes between them), over ragged K, and checks that neither writes past the row
// block's Kp/4 quads.
func TestUnpackInt1(t *testing.T) {
	if !ISAAvailable(ISAAVX2) {
		t.Skip("no AVX2")
	}
	rng := rand.New(rand.NewPCG(31, 1))
	for _, k := range []int{1, 31, 32, 33, 64, 100, 257, 1000, 4096, 14336 + 17} {
		nb := (k + 31) / 32
		kp := 32 * nb
		for _, stride := range []int{0, 128, 256, 128 * 7, 128 * Int1Panel} {
			step := max(stride, int1BlockBytes)
			w := make([]byte, step*(nb-1)+int1BlockBytes+64)
			for i := range w {
				w[i] = byte(rng.Uint32()) // (what lies between the blocks must not matter)
			}
			var want []byte
			for _, run := range []struct {
				name string
				fn   func(*unpackArgs)
			}{
				{"unpackGeneric", func(a *unpackArgs) { unpackGeneric(a, "int1") }},
				{"unpackInt1AVX2", func(a *unpackArgs) { unpackInt1AVX2(argp(a)) }},
			} {
				got := make([]byte, RowBlock*kp+64)
				for i := range got {
					got[i] = 0xEE
				}
				a := unpackArgs{W: unsafe.Pointer(&w[0]), B: unsafe.Pointer(&got[0]), N: nb, Stride: stride}
				run.fn(&a)
				for i, v := range got[RowBlock*kp:] {
					if v != 0xEE {
						t.Fatalf("K=%d stride %d: %s wrote byte %d past the row block's %d", k, stride, run.name, RowBlock*kp+i, RowBlock*kp)
					}
				}
				if want == nil {
					want = got
					continue
				}
				for i := range want {
					if got[i] != want[i] {
						q, r, j := i/128, i%128/4, i%4
						t.Fatalf("K=%d stride %d: %s byte %d (quad %d row %d input %d) = %d, want %d",
							k, stride, run.name, i, q, r, 4*q+j, got[i], want[i])
					}
				}
			}
		}
	}
}
