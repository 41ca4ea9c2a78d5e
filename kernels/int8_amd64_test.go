//go:build !noasm

package kernels

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestInt8HalvesSegments: the one-token AVX2 int8 kernel (and its zen3 twin), which reads a segment of
// int8HalvesMin steps or more as two halves, against gemvInt8Generic on segment lengths
// the layouts never give (Kp is a multiple of 32, so whole layers have steps in eights):
// odd ones, where the first half takes one step more, either side of int8HalvesMin, and a
// last segment of a single step.
func TestInt8HalvesSegments(t *testing.T) {
	const halvesMin = 64 // kernels/_asm's int8HalvesMin
	if !ISAAvailable(ISAAVX2) {
		t.Skip("no AVX2 here")
	}
	rng := rand.New(rand.NewPCG(8, 1))
	for _, c := range []struct{ seg, nseg, last int }{
		{halvesMin, 1, halvesMin}, {halvesMin + 1, 1, halvesMin + 1}, {halvesMin - 1, 2, halvesMin + 3},
		{2*halvesMin + 7, 3, 1}, {halvesMin + 2, 2, halvesMin + 5}, {3, 2, 2*halvesMin + 1},
	} {
		steps := (c.nseg-1)*c.seg + c.last
		w := make([]byte, 128*steps)
		for i := range w {
			w[i] = byte(rng.UintN(256))
		}
		x := make([]int16, 4*steps)
		for i := range x {
			x[i] = int16(rng.IntN(256) - 128)
		}
		got, want := make([]int32, c.nseg*RowBlock), make([]int32, c.nseg*RowBlock)
		a := gemvArgs{W: unsafe.Pointer(&w[0]), X: unsafe.Pointer(&x[0]), XStride: 8 * steps, SegSteps: c.seg, NSeg: c.nseg, LastSteps: c.last}
		a.Sums = unsafe.Pointer(&want[0])
		gemvInt8Generic(&a, 1, false, true)
		for _, kern := range []struct {
			name string
			fn   func(*byte)
		}{{"gemvInt8T1AVX2", gemvInt8T1AVX2}, {"gemvInt8T1AVX2L1", gemvInt8T1AVX2L1}} { // (L1: zen3's twin)
			for i := range got {
				got[i] = -7
			}
			a.Sums = unsafe.Pointer(&got[0])
			kern.fn(argp(&a))
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%s, segments of %d steps, %d of them, the last %d: segment %d row %d: got %d, want %d", kern.name, c.seg, c.nseg, c.last, i/RowBlock, i%RowBlock, got[i], want[i])
				}
			}
		}
	}
}
