package kernels

import (
	"fmt"

	"bitgo/quantcfg"
)

// tl2ChunkOf is the most blocks of a chunk in the tl2 blobs of the revisions before
// kernels/5 that Relayout reads, all chunk-major (kernels/1 encoded tl2 otherwise).
var tl2ChunkOf = map[string]int{"kernels/2": 12, "kernels/3": 12, "kernels/4": 10}

// Relayout returns a packed m x k blob of format f, packed in layout revision rev, in this
// build's layout (LayoutRevision): the blob itself where f's layout has not changed since
// rev; a chunk-major tl2 blob of kernels/2 to kernels/4 laid out as this revision lays out
// its shape (panel-major, or chunk-major in chunks of up to 10 blocks: Layout.Paneled) into
// a new slice (its blocks and tail are the same) and checked (CheckBlob). Any other change is
// ReadsLayout's error: the blob has to be packed again from its weights.
func Relayout(rev string, f quantcfg.Format, m, k int, blob []byte) ([]byte, error) {
	err := ReadsLayout(rev, f)
	if err == nil {
		return blob, nil
	}
	chunk := tl2ChunkOf[rev]
	if f != quantcfg.TL2 || chunk == 0 {
		return nil, err
	}
	l, err := NewLayout(f, m, k)
	if err != nil {
		return nil, err
	}
	if len(blob) != l.Bytes() {
		return nil, fmt.Errorf("%w: %s %dx%d blob has %d bytes, want %d", ErrShape, f, m, k, len(blob), l.Bytes())
	}
	before := l
	before.tl2Chunk = chunk // the same streams, chunk-major as rev stored them
	out := make([]byte, len(blob))
	var stream []byte
	for rb := range l.RowBlocks() {
		stream = before.RowBlockData(blob, rb, stream)
		l.SetRowBlockData(out, rb, stream)
	}
	if err := CheckBlob(l, out); err != nil {
		return nil, fmt.Errorf("tl2 blob of %s, laid out for %s: %w", rev, LayoutRevision, err)
	}
	return out, nil
}
