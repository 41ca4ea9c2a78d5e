package kernels

import (
	"fmt"

	"bitgo/quantcfg"
)

// tl2ChunkBefore is TL2Chunk as layouts kernels/2 and kernels/3 had it.
const tl2ChunkBefore = 12

// Relayout returns a packed m x k blob of format f, packed in layout revision rev, in this
// build's layout (LayoutRevision): the blob itself where f's layout has not changed since
// rev; a tl2 blob of kernels/2 or kernels/3 re-chunked into a new slice (its chunks held up
// to 12 blocks; the blocks themselves are the same) and checked (CheckBlob). Any other
// change is ReadsLayout's error: the blob has to be packed again from its weights.
func Relayout(rev string, f quantcfg.Format, m, k int, blob []byte) ([]byte, error) {
	err := ReadsLayout(rev, f)
	if err == nil {
		return blob, nil
	}
	if changed, _ := layoutChange(rev, f); f != quantcfg.TL2 || changed != "kernels/4" {
		return nil, err // (tl2 of kernels/1 first changed in kernels/2: another encoding)
	}
	l, err := NewLayout(f, m, k)
	if err != nil {
		return nil, err
	}
	if len(blob) != l.Bytes() {
		return nil, fmt.Errorf("%w: %s %dx%d blob has %d bytes, want %d", ErrShape, f, m, k, len(blob), l.Bytes())
	}
	out := make([]byte, len(blob))
	stream := make([]byte, l.RowBlockBytes)
	for rb := range l.RowBlocks() {
		tl2PiecesWith(l, tl2ChunkBefore, rb, func(b, o, n int) { copy(stream[o:o+n], blob[b:b+n]) })
		l.SetRowBlockData(out, rb, stream)
	}
	if err := CheckBlob(l, out); err != nil {
		return nil, fmt.Errorf("tl2 blob of %s, re-chunked: %w", rev, err)
	}
	return out, nil
}

// tl2PiecesWith is Layout.pieces for a tl2 blob whose chunks hold at most most blocks:
// fn(blob offset, stream offset, bytes) for row block rb's piece of each chunk in turn.
func tl2PiecesWith(l Layout, most, rb int, fn func(b, o, n int)) {
	ns, mrb := l.K3/TL2Block, l.RowBlocks()
	nc := max(1, (ns+most-1)/most)
	for c := 0; c < nc; c++ {
		s0 := c * ns / nc
		size := 320 * ((c+1)*ns/nc - s0)
		if c == nc-1 {
			size += 8 * l.Kp1
		}
		fn(mrb*320*s0+rb*size, 320*s0, size)
	}
}
