//go:build !noasm

package kernels

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestTwoStreamKernels: the two-stream kernel (fmtOps.l1.two1) against its reference run
// on each row block alone, over segments of ragged lengths (a chunk of i2sY1Flush blocks
// and less), the two row blocks at an odd distance and their sums apart.
func TestTwoStreamKernels(t *testing.T) {
	if !ISAAvailable(ISAAVX2) {
		t.Skip("no AVX2 here")
	}
	const name = "gemvI2STwoT1AVX2"
	rng := rand.New(rand.NewPCG(81, 2))
	for _, c := range []struct{ seg, nseg, last int }{{1, 1, 1}, {7, 1, 7}, {8, 1, 8}, {9, 1, 9}, {7, 2, 3}, {15, 3, 1}, {2, 3, 16}, {43, 2, 85}} {
		kp := ((c.nseg-1)*c.seg + c.last) * 128
		rbBytes := 8 * kp // 32 rows of 2-bit codes
		w := make([]byte, 3*rbBytes+192)
		for i := range w { // i2s codes are 0, 1 or 2
			w[i] = byte(rng.IntN(3) | rng.IntN(3)<<2 | rng.IntN(3)<<4 | rng.IntN(3)<<6)
		}
		x := make([]int8, kp)
		for i := range x {
			x[i] = int8(rng.IntN(256) - 128)
		}
		a := gemvArgs{X: unsafe.Pointer(&x[0]), XStride: kp, SegSteps: c.seg, NSeg: c.nseg, LastSteps: c.last, Aux: kp}
		ns := c.nseg * RowBlock
		want := make([]int32, 2*ns)
		dist := 2*rbBytes + 192 // the second row block's offset
		for j, off := range []int{0, dist} {
			a.W, a.Sums = unsafe.Pointer(&w[off]), unsafe.Pointer(&want[j*ns])
			gemvI2SGeneric(&a, 1)
		}
		got := make([]int32, 2*ns+16) // the second's sums 16 int32 past the first's
		for i := range got {
			got[i] = -7
		}
		a.W, a.Sums, a.W2Off, a.Sums2Off = unsafe.Pointer(&w[0]), unsafe.Pointer(&got[0]), dist, 4*(ns+16)
		gemvI2STwoT1AVX2(argp(&a))
		for i := range want {
			j := i
			if i >= ns {
				j += 16
			}
			if got[j] != want[i] {
				t.Fatalf("%s, segments of %d steps, %d of them, the last %d: row block %d segment %d row %d: got %d, want %d",
					name, c.seg, c.nseg, c.last, i/ns, i%ns/RowBlock, i%RowBlock, got[j], want[i])
			}
		}
		for i := ns; i < ns+16; i++ {
			if got[i] != -7 {
				t.Fatalf("%s: wrote between the two row blocks' sums (int32 %d)", name, i)
			}
		}
	}
}
