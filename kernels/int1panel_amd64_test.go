//go:build amd64 && !noasm

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"bitgo/quantcfg"
)

// int1PanelKernel is an int1 panel kernel under test, of T tokens.
type int1PanelKernel struct {
	name string
	fn   func(*byte)
	T    int
}

var int1PanelKernels = []int1PanelKernel{
	{"int1PanelT1AVX512", int1PanelT1AVX512, 1}, {"int1PanelT2AVX512", int1PanelT2AVX512, 2},
	{"int1PanelT3AVX512", int1PanelT3AVX512, 3}, {"int1PanelT4AVX512", int1PanelT4AVX512, 4},
}

// int1Run holds a case's biased activations as a kernel call reads them: token t's xs bytes
// apart (not Kp: the stride is the call's own).
type int1Run struct {
	xb []byte
	xs int
}

func newInt1Run(c *int1PanelCase) *int1Run {
	kp := c.l.Kp
	r := &int1Run{xs: kp + 96}
	r.xb = make([]byte, r.xs*c.T)
	for t := range c.T {
		copy(r.xb[t*r.xs:], c.xb[t*kp:][:kp])
	}
	return r
}

// checkInt1Panel runs kernel k and int1PanelGeneric on row blocks [rb0, rb1) (one panel) and
// blocks [b0, b1) of case c with a sums stride of sstride bytes, sums pre-filled with random
// values, and holds every int32 of the sums (the gaps between row blocks too) to the
// reference's, and the scratch past Acc's [NRB][T][32] to what it held. Tab is nil: the
// kernels build their tables from X.
func checkInt1Panel(t *testing.T, rng *rand.Rand, k int1PanelKernel, c *int1PanelCase, r *int1Run, rb0, rb1, b0, b1, sstride int) {
	t.Helper()
	T, nrb := c.T, rb1-rb0
	n := nrb * sstride / 4
	got, want := make([]int32, n+1), make([]int32, n+1)
	for i := range got {
		got[i] = int32(rng.Uint32() >> 2) // (far from overflow: the reference wraps as int32 does)
		want[i] = got[i]
	}
	acc := make([]int16, nrb*T*32+32)
	const guard = 0x5a5a
	for i := range acc {
		acc[i] = guard
	}
	a := c.args(rb0, rb1, b0, b1, sstride, got, acc)
	a.X, a.XStride = unsafe.Pointer(&r.xb[32*b0]), r.xs
	ref := *a
	ref.Sums = unsafe.Pointer(&want[0])
	k.fn(argp(a))
	int1PanelGeneric(&ref, T)
	for i := range got {
		if got[i] != want[i] {
			rb, off := i*4/sstride, i*4%sstride
			t.Fatalf("%s %dx%d: row blocks [%d, %d) blocks [%d, %d) sstride %d: row block %d token %d row %d (sums int32 %d): %d, want %d",
				k.name, c.l.M, c.l.K, rb0, rb1, b0, b1, sstride, rb0+rb, off/128, off%128/4, i, got[i], want[i])
		}
	}
	for i := nrb * T * 32; i < len(acc); i++ {
		if acc[i] != guard {
			t.Fatalf("%s: Acc written past [NRB][T][32] at int16 %d", k.name, i)
		}
	}
}

// int1ExtremeCase is a case whose activations are all -128 (or, in every third block,
// 127) and whose rows are all -1, all +1 or random in turn: row sums of 4096 a block in
// magnitude, at the int16 sums' limit over a flush period.
func int1ExtremeCase(t *testing.T, m, k, T int) *int1PanelCase {
	t.Helper()
	c := newInt1PanelCase(t, m, k, T, 9)
	for r := range m {
		for i := range k {
			switch r % 3 {
			case 0:
				c.w.Q[r*k+i] = -1
			case 1:
				c.w.Q[r*k+i] = 1
			}
		}
	}
	blob, err := PackNew(quantcfg.Int1, m, k, c.w)
	if err != nil {
		t.Fatal(err)
	}
	c.bl = blob
	for tk := range T {
		for i := range k {
			c.x[tk*c.l.Kp+i] = -128
			if i/32%3 == 2 && tk%2 == 1 {
				c.x[tk*c.l.Kp+i] = 127
			}
		}
	}
	int1Bias(c.x, c.xb)
	return c
}

// TestInt1PanelAVX512 holds every zmm int1 panel kernel to int1PanelGeneric: whole panels
// of several shapes (one row block, K not a multiple of 32, a short last panel), every
// number of row blocks from 1 to 32 within a panel, block ranges of every length from 0 to
// past four flush periods (from block 0 and from later ones), sums with a stride larger
// than 128*T, and activations at the int16 extreme.
func TestInt1PanelAVX512(t *testing.T) {
	if !ISAAvailable(ISAAVX512) {
		t.Skip("no AVX-512 (VNNI, BW, VBMI)")
	}
	rng := rand.New(rand.NewPCG(31, 31))
	for _, k := range int1PanelKernels {
		T := k.T
		// whole panels, every block
		for _, sh := range [][2]int{{32, 32}, {20, 45}, {70, 300}, {1100, 45}, {2081, 96}, {3000, 232}, {1056, 1000}} {
			c := newInt1PanelCase(t, sh[0], sh[1], T, uint64(sh[0]+sh[1]))
			r := newInt1Run(c)
			nb := c.l.Kp / 32
			for p := range c.l.Panels() {
				rb0, g := c.l.Panel(p)
				for _, ss := range []int{128 * T, 128*T + 64} {
					checkInt1Panel(t, rng, k, c, r, rb0, rb0+g, 0, nb, ss)
				}
			}
		}
		// sub-ranges: row blocks [rb0, rb0+nrb) of a panel, blocks [b0, b0+n)
		c := newInt1PanelCase(t, 2081, 1000, T, 5) // 66 row blocks: panels of 32, 32, 2; 32 blocks
		r := newInt1Run(c)
		for nrb := 1; nrb <= 32; nrb++ {
			rb0 := 32 + (32-nrb)/2
			for _, n := range []int{0, 1, 2, 6, 7, 8, 13, 14, 15, 21, 22, 28, 29, 31} {
				b0 := (nrb + n) % (32 - n) // (b0 < 32: args points at block b0)
				checkInt1Panel(t, rng, k, c, r, rb0, rb0+nrb, b0, b0+n, 128*T+32*(nrb%3))
			}
		}
		for n := 0; n <= 32; n++ { // the short last panel
			checkInt1Panel(t, rng, k, c, r, 64, 66, 0, n, 128*T)
		}
		// the extremes: rows of +-4096 a block, the most a flush period holds
		e := int1ExtremeCase(t, 1100, 1000, T)
		er := newInt1Run(e)
		for _, n := range []int{1, 6, 7, 8, 13, 14, 15, 21, 28, 31, 32} {
			for _, span := range [][2]int{{0, 32}, {32, 34}, {33, 35}} {
				checkInt1Panel(t, rng, k, e, er, span[0], span[1], 32-n, 32, 128*T+64)
			}
		}
	}
}

// TestInt1PanelBlocksZero: a call of no blocks leaves Sums (and Acc) as they were.
func TestInt1PanelBlocksZero(t *testing.T) {
	if !ISAAvailable(ISAAVX512) {
		t.Skip("no AVX-512 (VNNI, BW, VBMI)")
	}
	for _, k := range int1PanelKernels {
		c := newInt1PanelCase(t, 100, 64, k.T, 1)
		r := newInt1Run(c)
		sums := make([]int32, 4*32*k.T)
		for i := range sums {
			sums[i] = int32(i*7 - 3)
		}
		acc := make([]int16, 4*32*k.T)
		for i := range acc {
			acc[i] = int16(i)
		}
		a := c.args(0, 4, 1, 1, 0, sums, acc)
		a.X, a.XStride = unsafe.Pointer(&r.xb[32]), r.xs
		k.fn(argp(a))
		for i := range sums {
			if sums[i] != int32(i*7-3) {
				t.Fatalf("%s: Blocks = 0 changed sums[%d]", k.name, i)
			}
		}
		for i := range acc {
			if acc[i] != int16(i) {
				t.Fatalf("%s: Blocks = 0 changed Acc[%d]", k.name, i)
			}
		}
	}
}

// BenchmarkInt1Panel: the int1 panel kernels cache-resident (the first panel of a
// 4096x2560 blob, 32 row blocks at K = 2560: 320 KiB of weights, in L2).
func BenchmarkInt1Panel(b *testing.B) {
	if !ISAAvailable(ISAAVX512) {
		b.Skip("no AVX-512 (VNNI, BW, VBMI)")
	}
	for _, k := range int1PanelKernels {
		b.Run(fmt.Sprintf("int1/4096x2560-panel/%s", k.name), func(b *testing.B) {
			l, err := NewLayout(quantcfg.Int1, 4096, 2560)
			if err != nil {
				b.Fatal(err)
			}
			blob, err := PackNew(quantcfg.Int1, 4096, 2560, RandomWeights(rand.New(rand.NewPCG(1, 1)), quantcfg.Int1, 4096, 2560, 1))
			if err != nil {
				b.Fatal(err)
			}
			xb := make([]byte, k.T*l.Kp)
			for i := range xb {
				xb[i] = byte(i * 37)
			}
			sums := make([]int32, 32*32*k.T)
			acc := make([]int16, 32*32*k.T)
			_, g := l.Panel(0)
			_, stride := l.BlockAt(0, 0)
			a := &int1Args{W: unsafe.Pointer(&blob[0]), NRB: g, BStride: stride, Blocks: l.Kp / 32,
				X: unsafe.Pointer(&xb[0]), XStride: l.Kp, Sums: unsafe.Pointer(&sums[0]), SStride: 128 * k.T,
				Acc: unsafe.Pointer(&acc[0])}
			b.SetBytes(int64(g * l.RowBlockBytes))
			b.ReportAllocs()
			for b.Loop() {
				k.fn(argp(a))
			}
		})
	}
}
