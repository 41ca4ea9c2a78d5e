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
	before := l
	before.tl2Chunk = tl2ChunkBefore // the same streams, chunked as kernels/2 and kernels/3 did
	out := make([]byte, len(blob))
	var stream []byte
	for rb := range l.RowBlocks() {
		stream = before.RowBlockData(blob, rb, stream)
		l.SetRowBlockData(out, rb, stream)
	}
	if err := CheckBlob(l, out); err != nil {
		return nil, fmt.Errorf("tl2 blob of %s, re-chunked: %w", rev, err)
	}
	return out, nil
}
