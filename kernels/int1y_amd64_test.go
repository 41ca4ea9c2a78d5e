//go:build amd64 && !noasm

package kernels

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// int1YKernels are the AVX2 int1 panel kernels (the zen3 tuning's twin too) and their token
// counts.
var int1YKernels = []struct {
	name string
	fn   func(*byte)
	T    int
}{{"int1PanelT1AVX2", int1PanelT1AVX2, 1}, {"int1PanelT1AVX2L1", int1PanelT1AVX2L1, 1}, {"int1PanelT2AVX2", int1PanelT2AVX2, 2}}

// int1YTabs builds c's tabInt1Y tables (each token's for all of Kp, a 64-byte gap between
// tokens) and returns them with their token stride.
func int1YTabs(c *int1PanelCase) ([]byte, int) {
	stride := int1TabYBlock*c.l.Kp/32 + 64
	tab := make([]byte, stride*c.T)
	for t := range c.T {
		buildInt1TabYGeneric(c.x[t*c.l.Kp:][:c.l.Kp], tab[t*stride:])
	}
	return tab, stride
}

// checkInt1Y runs kernel fn over row blocks [rb0, rb1) (one panel) and blocks [b0, b1) of c
// with sums stride sstride, Sums and Acc pre-filled with junk, and holds Sums (gaps
// included) to int1PanelGeneric's and Acc's tail to what it held.
func checkInt1Y(t *testing.T, name string, fn func(*byte), c *int1PanelCase, tab []byte, tabStride, rb0, rb1, b0, b1, sstride int, rng *rand.Rand) {
	t.Helper()
	nrb := rb1 - rb0
	if sstride == 0 {
		sstride = 128 * c.T
	}
	got := make([]int32, nrb*sstride/4)
	for i := range got {
		got[i] = int32(rng.Uint32())
	}
	want := append([]int32(nil), got...)
	const guard = 64
	acc := make([]int16, nrb*c.T*RowBlock+guard)
	for i := range acc {
		acc[i] = int16(rng.Uint32())
	}
	tail := append([]int16(nil), acc[nrb*c.T*RowBlock:]...)
	a := c.args(rb0, rb1, b0, b1, sstride, got, acc)
	a.Tab, a.TabStride = unsafe.Pointer(&tab[int1TabYBlock*b0]), tabStride
	fn(argp(a))
	a.Sums = unsafe.Pointer(&want[0])
	int1PanelGeneric(a, c.T)
	for i := range want {
		if got[i] != want[i] {
			j := i * 4
			t.Fatalf("%s, %dx%d, row blocks [%d,%d) blocks [%d,%d) sstride %d: row block %d token %d row %d (or gap): %d, want %d",
				name, c.l.M, c.l.K, rb0, rb1, b0, b1, sstride, rb0+j/sstride, j%sstride/128, j%128/4, got[i], want[i])
		}
	}
	for i, v := range acc[nrb*c.T*RowBlock:] {
		if v != tail[i] {
			t.Fatalf("%s, %dx%d, row blocks [%d,%d) blocks [%d,%d): Acc written past its %d row blocks", name, c.l.M, c.l.K, rb0, rb1, b0, b1, nrb)
		}
	}
}

// TestInt1PanelY: the AVX2 int1 panel kernels add, bit for bit, what int1PanelGeneric adds:
// K not a multiple of 32, one row block, a short last panel, every NRB of a panel, row
// ranges inside a panel, block ranges of 0 to several flush periods (int1Flush = 7)
// and right at their ends, a sums stride above 128*T, many -128 activations, and the
// extremes (all activations -128 under all -1 or all +1 weights: 4096 a block in each row,
// 28672 over a flush period).
func TestInt1PanelY(t *testing.T) {
	if !ISAAvailable(ISAAVX2) {
		t.Skip("no AVX2/FMA")
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for _, k := range int1YKernels {
		T := k.T
		for _, sh := range [][2]int{{20, 300}, {96, 40}, {1100, 520}, {2081, 700}, {4096, 224}} {
			c := newInt1PanelCase(t, sh[0], sh[1], T, uint64(sh[0]))
			tab, ts := int1YTabs(c)
			nb, nrb := c.l.Kp/32, c.l.RowBlocks()
			// whole panels, all blocks
			for p0 := 0; p0 < nrb; p0 += Int1Panel {
				checkInt1Y(t, k.name, k.fn, c, tab, ts, p0, min(nrb, p0+Int1Panel), 0, nb, 0, rng)
			}
			// every NRB from the panel's start, and ranges inside it, over block ranges
			last := min(nrb, Int1Panel)
			for n := 1; n <= last; n++ {
				b1 := 1 + (n*5)%nb
				checkInt1Y(t, k.name, k.fn, c, tab, ts, 0, n, 0, b1, 128*T+32*(n%3), rng)
				if n < last {
					checkInt1Y(t, k.name, k.fn, c, tab, ts, last-n, last, nb-b1, nb, 0, rng)
				}
			}
			for _, bs := range []int{0, 1, 2, 6, 7, 8, 13, 14, 15, 21, 22} {
				if bs > nb {
					continue
				}
				rb0, b1 := min(1, nrb-1), nb
				if bs == 0 {
					b1 = 0 // (the pointers stay inside the blob)
				}
				checkInt1Y(t, k.name, k.fn, c, tab, ts, rb0, min(nrb, rb0+3), b1-bs, b1, 128*T+64, rng)
			}
		}
		// extremes: every activation -128, every weight -1 (0xff) or +1 (0x00)
		for _, fill := range []byte{0xff, 0x00} {
			c := newInt1PanelCase(t, 96, 32*22, T, 5)
			for i := range c.bl {
				c.bl[i] = fill
			}
			for i := range c.x {
				c.x[i] = -128
			}
			int1Bias(c.x, c.xb)
			tab, ts := int1YTabs(c)
			for _, bs := range []int{7, 8, 14, 21, 22} {
				checkInt1Y(t, k.name, k.fn, c, tab, ts, 0, 3, 0, bs, 0, rng)
			}
		}
	}
}

// TestInt1PanelYBlocks0: with Blocks = 0 the kernels leave Sums and Acc as they were.
func TestInt1PanelYBlocks0(t *testing.T) {
	if !ISAAvailable(ISAAVX2) {
		t.Skip("no AVX2/FMA")
	}
	for _, k := range int1YKernels {
		c := newInt1PanelCase(t, 64, 64, k.T, 1)
		tab, ts := int1YTabs(c)
		sums := make([]int32, 2*128*k.T/4)
		acc := make([]int16, 2*k.T*RowBlock)
		for i := range sums {
			sums[i] = int32(i)
		}
		for i := range acc {
			acc[i] = int16(i)
		}
		a := c.args(0, 2, 0, 0, 0, sums, acc)
		a.Tab, a.TabStride = unsafe.Pointer(&tab[0]), ts
		k.fn(argp(a))
		for i := range sums {
			if sums[i] != int32(i) {
				t.Fatalf("%s: Blocks = 0 changed Sums[%d]", k.name, i)
			}
		}
		for i := range acc {
			if acc[i] != int16(i) {
				t.Fatalf("%s: Blocks = 0 changed Acc[%d]", k.name, i)
			}
		}
	}
}

// TestBuildInt1TabY: the generic builder's tables hold T_q[c] = 2*A + 64*B + p_q - 512 with
// A in 0..31, B in 0..16 and P = sum_q p_q - 4096 (int1y.go), and int1BuildTabYAVX2 writes
// the same bytes, only its blocks' bytes.
func TestBuildInt1TabY(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for _, nb := range []int{0, 1, 2, 5, 64} {
		x := make([]int8, 32*nb)
		for i := range x {
			x[i] = int8(rng.IntN(256) - 128)
			switch rng.IntN(4) {
			case 0:
				x[i] = -128
			case 1:
				x[i] = 127
			}
		}
		if nb == 2 { // a block of all -128 (T = -512 and 512 in every quad)
			for i := 32; i < 64; i++ {
				x[i] = -128
			}
		}
		want := make([]byte, int1TabYBlock*nb+64)
		buildInt1TabYGeneric(x, want)
		for b := range nb {
			blk := want[int1TabYBlock*b:]
			par := 0
			for q := range 8 {
				xq := x[32*b+4*q:][:4]
				p := int(int1QuadSum(0, xq)) & 1
				par += p
				for c := range 16 {
					A, B := int(blk[32*q+c]), int(blk[32*q+16+c])
					if A > 31 || B > 16 || 2*A+64*B+p-512 != int(int1QuadSum(c, xq)) {
						t.Fatalf("block %d quad %d code %d: A %d B %d p %d, T %d", b, q, c, A, B, p, int1QuadSum(c, xq))
					}
				}
			}
			for i := range 8 {
				if v := int16(binary.LittleEndian.Uint16(blk[256+2*i:])); int(v) != par-4096 {
					t.Fatalf("block %d: P word %d = %d, want %d", b, i, v, par-4096)
				}
			}
		}
		if !ISAAvailable(ISAAVX2) {
			continue
		}
		got := make([]byte, len(want))
		for i := range got {
			got[i] = 0xa5
		}
		var xp *int8
		if nb > 0 {
			xp = &x[0]
		}
		int1BuildTabYAVX2(xp, nb, &got[0])
		for i := range got {
			w := want[i]
			if i >= int1TabYBlock*nb {
				w = 0xa5
			}
			if got[i] != w {
				t.Fatalf("%d blocks: int1BuildTabYAVX2 byte %d (block %d, offset %d) = %#x, want %#x", nb, i, i/int1TabYBlock, i%int1TabYBlock, got[i], w)
			}
		}
	}
}

// FuzzInt1PanelY: the AVX2 int1 panel kernels against int1PanelGeneric on fuzzed shapes,
// row ranges inside a panel and block ranges.
func FuzzInt1PanelY(f *testing.F) {
	f.Add(uint16(70), uint16(300), uint8(0), uint8(2), uint8(0), uint8(9), uint8(1), uint64(1))
	f.Add(uint16(1100), uint16(45), uint8(31), uint8(4), uint8(1), uint8(1), uint8(2), uint64(2))
	f.Add(uint16(2081), uint16(700), uint8(3), uint8(32), uint8(7), uint8(14), uint8(1), uint64(3))
	f.Fuzz(func(t *testing.T, m, k uint16, rb0, nrb, b0, blocks, tok uint8, seed uint64) {
		if !ISAAvailable(ISAAVX2) {
			t.Skip("no AVX2/FMA")
		}
		M, K := 1+int(m)%2200, 1+int(k)%800
		kern := int1YKernels[int(tok)%2]
		c := newInt1PanelCase(t, M, K, kern.T, seed)
		tab, ts := int1YTabs(c)
		nb, rbs := c.l.Kp/32, c.l.RowBlocks()
		r0 := int(rb0) % rbs
		end := min(rbs, (r0/Int1Panel+1)*Int1Panel) // (the panel's end)
		r1 := r0 + 1 + int(nrb)%(end-r0)
		b := int(b0) % nb
		checkInt1Y(t, kern.name, kern.fn, c, tab, ts, r0, r1, b, b+int(blocks)%(nb-b+1), 128*kern.T+32*int(tok%4), rand.New(rand.NewPCG(seed, 1)))
	})
}
