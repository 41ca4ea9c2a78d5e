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
