package kernels

import (
	"fmt"

	"bitgo/quantcfg"
)

// tl2ChunkBefore is the most blocks of a tl2 blob's chunks in the chunk-major layouts
// before kernels/5, by the revision that first changed tl2 after the blob's: 12 in
// kernels/2 and kernels/3, 10 in kernels/4.
var tl2ChunkBefore = map[string]int{"kernels/4": 12, "kernels/5": 10}

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
	changed, _ := layoutChange(rev, f)
	chunk := tl2ChunkBefore[changed]
	if f != quantcfg.TL2 || chunk == 0 {
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
