package kernels

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"bitgo/quantcfg"
)

// int1PanelCase is a packed int1 layer with T tokens of random activations (some -128, the
// extreme the kernels' int16 sums must hold), for the panel kernels' tests.
type int1PanelCase struct {
	l  Layout
	w  Weights
	bl []byte
	x  []int8 // [T][Kp], zero past K
	xb []byte // int1Bias(x)
	T  int
}

func newInt1PanelCase(t *testing.T, m, k, T int, seed uint64) *int1PanelCase {
	t.Helper()
	w, blob, l := packRandom(t, quantcfg.Int1, m, k, seed)
	rng := rand.New(rand.NewPCG(seed, 77))
	c := &int1PanelCase{l: l, w: w, bl: blob, x: make([]int8, T*l.Kp), xb: make([]byte, T*l.Kp), T: T}
	for tk := range T {
		for i := range k {
			v := int8(rng.IntN(256) - 128)
			if rng.IntN(3) == 0 {
				v = -128
			}
			c.x[tk*l.Kp+i] = v
		}
	}
	int1Bias(c.x, c.xb)
	return c
}

// want is the exact sum of row m's weights times token t's inputs k0..k1-1.
func (c *int1PanelCase) want(m, t, k0, k1 int) int32 {
	s := int32(0)
	if m >= c.l.M {
		for k := k0; k < min(k1, c.l.K); k++ {
			s += int32(c.x[t*c.l.Kp+k]) // (padding rows are +1)
		}
		return s
	}
	for k := k0; k < min(k1, c.l.K); k++ {
		s += int32(c.w.Q[m*c.l.K+k]) * int32(c.x[t*c.l.Kp+k])
	}
	return s
}

// args returns the int1Args of row blocks [rb0, rb1) (one panel) over blocks [b0, b1), the
// sums laid out with stride sstride (bytes; 0: 128*T) from sums[0].
func (c *int1PanelCase) args(rb0, rb1, b0, b1, sstride int, sums []int32, acc []int16) *int1Args {
	if sstride == 0 {
		sstride = 128 * c.T
	}
	base, stride := c.l.BlockAt(rb0, 0)
	return &int1Args{
		W: unsafe.Pointer(&c.bl[base+b0*stride]), NRB: rb1 - rb0, BStride: stride, Blocks: b1 - b0,
		X: unsafe.Pointer(&c.xb[32*b0]), XStride: c.l.Kp, Sums: unsafe.Pointer(&sums[0]), SStride: sstride,
		Acc: unsafe.Pointer(&acc[0]),
	}
}

// TestInt1PanelGeneric: the reference panel kernel adds the exact sums of any stretch of
// blocks over any row blocks of a panel, with a sums stride of its own, to what Sums held.
func TestInt1PanelGeneric(t *testing.T) {
	for _, sh := range [][3]int{{70, 300, 1}, {2081, 96, 3}, {1100, 45, 2}} {
		c := newInt1PanelCase(t, sh[0], sh[1], sh[2], 3)
		nb := c.l.Kp / 32
		for _, span := range [][4]int{{0, c.l.RowBlocks(), 0, nb}, {1, 2, 1, nb}, {0, 1, 0, 1}} {
			rb0, rb1, b0, b1 := span[0], min(span[1], c.l.RowBlocks()), span[2], span[3]
			if g := c.l.PanelRows(); rb0/g != (rb1-1)/g { // (one panel's)
				rb1 = (rb0/g + 1) * g
			}
			sstride := 128*c.T + 64
			sums := make([]int32, (rb1-rb0)*sstride/4)
			for i := range sums {
				sums[i] = int32(i)
			}
			int1PanelGeneric(c.args(rb0, rb1, b0, b1, sstride, sums, make([]int16, 1)), c.T)
			for i := range rb1 - rb0 {
				for tk := range c.T {
					for r := range RowBlock {
						j := (i*sstride+128*tk)/4 + r
						if got, want := sums[j]-int32(j), c.want((rb0+i)*RowBlock+r, tk, 32*b0, 32*b1); got != want {
							t.Fatalf("%v %v: row block %d token %d row %d: %d, want %d", sh, span, rb0+i, tk, r, got, want)
						}
					}
				}
			}
		}
	}
}

// TestUnpackGenericInt1: the GEMM unpack's reference, reading each row block where a packed
// blob holds it (Layout.BlockAt: its first block and the panel's stride, as unpackRB passes
// them), gives u = 1 for every weight -1 and 0 for +1, and 0 for the padding (rows past M,
// inputs past K), over ragged K, short last panels and more than one panel.
func TestUnpackGenericInt1(t *testing.T) {
	for _, sh := range [][2]int{{40, 1}, {70, 31}, {33, 33}, {1100, 100}, {96, 257}, {64, 4096}} {
		m, k := sh[0], sh[1]
		w, blob, l := packRandom(t, quantcfg.Int1, m, k, uint64(m*k))
		dst := make([]byte, RowBlock*l.Kp)
		for rb := range l.RowBlocks() {
			off, stride := l.BlockAt(rb, 0)
			unpackGeneric(&unpackArgs{W: unsafe.Pointer(&blob[off]), B: unsafe.Pointer(&dst[0]), N: l.Kp / 32, Stride: stride}, "int1")
			for r := range RowBlock {
				for i := range l.Kp {
					want := byte(0)
					if row := rb*RowBlock + r; row < m && i < k && w.Q[row*k+i] == -1 {
						want = 1
					}
					if got := dst[128*(i/4)+4*r+i%4]; got != want {
						t.Fatalf("%dx%d: row %d input %d: u = %d, want %d", m, k, rb*RowBlock+r, i, got, want)
					}
				}
			}
		}
	}
}

// TestInt1Bias: every length, the tail past the last eight bytes included, becomes u8 x+128.
func TestInt1Bias(t *testing.T) {
	x := make([]int8, 40)
	for i := range x {
		x[i] = int8(i*37 - 128)
	}
	for n := range len(x) + 1 {
		dst := make([]byte, n+1)
		dst[n] = 0x5a
		int1Bias(x[:n], dst[:n])
		for i := range n {
			if dst[i] != byte(int(x[i])+128) {
				t.Fatalf("n=%d: byte %d = %d, want %d", n, i, dst[i], int(x[i])+128)
			}
		}
		if dst[n] != 0x5a {
			t.Fatalf("n=%d: wrote past the end", n)
		}
	}
}
