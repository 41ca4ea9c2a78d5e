package kernels

import (
	"testing"

	"bitgo/quantcfg"
)

// TestChunkPieces: the sweeps' per-layer chunk list gives every row block's piece where
// Layout.Piece and ChunkSpan do.
func TestChunkPieces(t *testing.T) {
	for _, c := range []struct {
		f    quantcfg.Format
		m, k int
	}{{quantcfg.TL2, 96, 48}, {quantcfg.TL2, 70, 2560}, {quantcfg.TL2, 32, 14336}, {quantcfg.TL2, 64, 20}, {quantcfg.TL1, 64, 2560}, {quantcfg.TL1, 33, 8196}, {quantcfg.I2S, 64, 256}} {
		ly, err := NewLayout(c.f, c.m, c.k)
		if err != nil {
			t.Fatal(err)
		}
		lys := []Layout{ly}
		if c.f == quantcfg.TL2 {
			old, _ := tl2Before("kernels/3", ly)
			lys = append(lys, old)
		}
		for _, ly := range lys {
			cs := chunkPieces(ly)
			if !ly.Chunked() {
				if cs != nil {
					t.Errorf("%s %dx%d: %d chunks for a layout that is not chunk-major", c.f, c.m, c.k, len(cs))
				}
				continue
			}
			if len(cs) != ly.Chunks() {
				t.Fatalf("%s %dx%d: %d chunks, Chunks() = %d", c.f, c.m, c.k, len(cs), ly.Chunks())
			}
			for ci, cp := range cs {
				_, sc := ly.ChunkSpan(ci)
				if k0 := ly.ChunkK0(ci); cp.k0 != k0 || cp.sc != sc {
					t.Errorf("%s %dx%d chunk %d: input %d, %d steps; ChunkK0 %d, ChunkSpan %d steps", c.f, c.m, c.k, ci, cp.k0, cp.sc, k0, sc)
				}
				for rb := range ly.RowBlocks() {
					off, size := ly.Piece(rb, ci)
					if cp.off+rb*cp.size != off || cp.size != size {
						t.Errorf("%s %dx%d chunk %d row block %d: piece at %d (%d bytes), Piece %d (%d)", c.f, c.m, c.k, ci, rb, cp.off+rb*cp.size, cp.size, off, size)
					}
				}
			}
		}
	}
}

// TestInt1Layout holds an int1 blob to int1.go's picture: every weight's bit where BlockAt
// and the block's planes put it (2*ceil(Mrb/64) panels of nearly the same size, the last
// one shorter where they do not divide Mrb; rows and inputs past M and K padded with +1).
// And the panel sizes of the real shapes' M: even shares for two workers.
func TestInt1Layout(t *testing.T) {
	for _, c := range [][3]int{{40, 300, 1}, {2081, 45, 17}, {1024, 64, 16}, {3809, 40, 30}, {1, 1, 1}, {6912, 33, 27}} {
		m, k, P := c[0], c[1], c[2]
		w, blob, l := packRandom(t, quantcfg.Int1, m, k, 7)
		if l.PanelRows() != P {
			t.Fatalf("%dx%d: panels of %d row blocks, want %d", m, k, l.PanelRows(), P)
		}
		for rb := range l.RowBlocks() {
			p := rb / P
			rb0, g := l.Panel(p)
			off, stride := l.BlockAt(rb, 0)
			if want := rb0*l.RowBlockBytes + int1BlockBytes*(rb-rb0); off != want || stride != int1BlockBytes*g || rb0 != P*p {
				t.Fatalf("%dx%d row block %d: at %d stride %d, want %d and %d", m, k, rb, off, stride, want, int1BlockBytes*g)
			}
			for b := range l.Kp / 32 {
				for h := range 2 {
					for r := range RowBlock {
						word := uint16(blob[off+b*stride+64*h+2*r]) | uint16(blob[off+b*stride+64*h+2*r+1])<<8
						for j := range 16 {
							row, in := rb*RowBlock+r, 32*b+16*h+j
							neg := row < m && in < k && w.Q[row*k+in] < 0
							if word>>j&1 == 1 != neg {
								t.Fatalf("%dx%d row %d input %d: bit %d, want -1 %v", m, k, row, in, word>>j&1, neg)
							}
						}
					}
				}
			}
		}
	}
	for _, c := range [][3]int{{2560, 20, 4}, {3840, 30, 4}, {4096, 32, 4}, {6912, 27, 8}, {13824, 31, 14}, {14336, 32, 14}, {28672, 32, 28}, {11008, 29, 12}, {64000, 32, 63}} {
		l, err := NewLayout(quantcfg.Int1, c[0], 64)
		if err != nil || l.PanelRows() != c[1] || l.Panels() != c[2] {
			t.Errorf("M = %d: %d panels of %d row blocks (%v), want %d of %d", c[0], l.Panels(), l.PanelRows(), err, c[2], c[1])
		}
	}
}
