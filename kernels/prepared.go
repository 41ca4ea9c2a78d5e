package kernels

import (
	"sync/atomic"
	"unsafe"

	"bitgo/quantcfg"
)

// layerPrep: the weight scales laid out per row block and segment (so the epilogue loads
// 32 rows' scales with two vector loads), and the bias padded to Mp.
type layerPrep struct {
	ws          []float32    // [Mp/32][nseg][32] (row, group), or [32] (tensor)
	wsRB, wsSeg int          // floats between row blocks and between segments in ws
	bias        []float32    // Mp floats, nil without bias
	chunks      []chunkPiece // a chunk-major blob's chunks (nil for the other formats)
	site        *oneSite     // the one-token kernel choice of l's format and shape (oneSiteFor; nil: none)
}

// chunkPiece is one chunk of a chunk-major blob (tl1, tl2) as a sweep reads it: its first
// input (Layout.ChunkK0) and its steps (tl2 blocks, tl1 units: Layout.ChunkSpan), and row
// block 0's piece of it: the blob offset
// and the size, which is also the bytes between row blocks (Layout.Piece). Row block rb's
// piece starts at off + rb*size. Made once per layer: a sweep asks for every chunk's, and
// working them out anew in each call (Layout's methods: divisions, copies of the Layout,
// five times a chunk) took 120-190 ns a chunk, now about 50 (the Go side of a one-token
// tl2 call on 64x14336 from cache, its kernel calls removed: 30 chunks, 5.0-6.6 us a call
// against 2.6).
type chunkPiece struct{ k0, sc, off, size int }

// chunkPieces lists ly's chunks (nil unless ly is chunk-major).
func chunkPieces(ly Layout) []chunkPiece {
	if !ly.Chunked() {
		return nil
	}
	cs := make([]chunkPiece, ly.Chunks())
	for c := range cs {
		_, sc := ly.ChunkSpan(c)
		off, size := ly.Piece(0, c)
		cs[c] = chunkPiece{ly.ChunkK0(c), sc, off, size}
	}
	return cs
}

// simdPrep returns l's layerPrep, building it on first use (callers racing to be first
// may each build one; one of them is kept). Every Prepare and every Run asks for it, the
// Runs of every worker and of every piece a worker steals, so all but the first call are
// one atomic load: with an RWMutex around a map (before), each call wrote the lock's
// reader count, one cache line that every CPU's calls took from the others
// (BenchmarkLayerPrep, two CPUs at it: 35 ns a lookup, now 1.7).
func (l *Layer) simdPrep() *layerPrep {
	if p := (*layerPrep)(atomic.LoadPointer(&l.prep)); p != nil {
		return p
	}
	p := buildPrep(l)
	if atomic.CompareAndSwapPointer(&l.prep, nil, unsafe.Pointer(p)) {
		return p
	}
	return (*layerPrep)(atomic.LoadPointer(&l.prep))
}

func buildPrep(l *Layer) *layerPrep {
	ly := l.Layout
	p := &layerPrep{chunks: chunkPieces(ly), site: oneSiteFor(l)}
	if l.Bias != nil {
		p.bias = make([]float32, ly.Mp)
		copy(p.bias, l.Bias)
	}
	if l.Spec.Format.IsFloat() {
		return p
	}
	nseg := l.Segments()
	switch l.Spec.Scale.Kind {
	case quantcfg.ScaleTensor:
		p.ws = make([]float32, RowBlock)
		for i := range p.ws {
			p.ws[i] = l.Scales[0]
		}
	default: // row, group
		p.ws = make([]float32, ly.Mp*nseg)
		p.wsSeg, p.wsRB = RowBlock, RowBlock*nseg
		for m := 0; m < ly.M; m++ {
			for j := 0; j < nseg; j++ {
				p.ws[(m/RowBlock)*p.wsRB+j*RowBlock+m%RowBlock] = l.Scales[l.WSIndex(m, j)]
			}
		}
	}
	return p
}
