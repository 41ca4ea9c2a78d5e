package kernels

import (
	"fmt"

	"bitgo/quantcfg"
)

// tl2Before returns how revision rev, one before this build's, laid out a tl2 blob of l's
// shape (the row blocks' streams are the same in all of them), and false for a revision
// whose tl2 blocks were encoded otherwise (kernels/1) or that is not one before this
// build's:
//   - kernels/2 and kernels/3: chunk-major, chunks of up to 12 blocks;
//   - kernels/4: chunk-major, chunks of up to 10;
//   - kernels/5: panel-major in panels of 16 row blocks where it has at least 85 blocks
//     and 128 row blocks (K >= 4080, M > 4064), chunk-major in chunks of up to 10
//     otherwise;
//   - kernels/6: panel-major in panels of 32 row blocks where it has at least 53 blocks and
//     120 row blocks (K >= 2544, M > 3808), chunk-major in chunks of up to 10 otherwise;
//   - kernels/7: panel-major where it has at least 53 blocks and 64 row blocks (K >= 2544,
//     M > 2016), in two panels (ceil(row blocks/2) and the rest) below 120 row blocks and
//     in panels of 32 from 120 on, chunk-major in chunks of up to 10 otherwise.
func tl2Before(rev string, l Layout) (Layout, bool) {
	l.panel, l.tl2Chunk = 0, 0
	switch rev {
	case "kernels/2", "kernels/3":
		l.tl2Chunk = 12
	case "kernels/4":
		l.tl2Chunk = 10
	case "kernels/5":
		if l.TL2Blocks() >= 85 && l.RowBlocks() >= 128 {
			l.panel = 16
		} else {
			l.tl2Chunk = 10
		}
	case "kernels/6":
		if l.TL2Blocks() >= 53 && l.RowBlocks() >= 120 {
			l.panel = 32
		} else {
			l.tl2Chunk = 10
		}
	case "kernels/7":
		switch mrb := l.RowBlocks(); {
		case l.TL2Blocks() < 53 || mrb < 64:
			l.tl2Chunk = 10
		case mrb < 120:
			l.panel = (mrb + 1) / 2
		default:
			l.panel = 32
		}
	default:
		return Layout{}, false
	}
	return l, true
}

// Relayout returns a packed m x k blob of format f, packed in layout revision rev, in this
// build's layout (LayoutRevision):
//   - the blob itself where f's layout has not changed since rev, or has not for its shape (a
//     tl2 blob of kernels/4 to kernels/7 that is chunk-major now too, or of kernels/6 or
//     kernels/7 in the panels it has now: checked, CheckBlob);
//   - a tl2 blob of kernels/2 to kernels/7 (tl2Before) laid out as this revision lays out its
//     shape (panel-major in panels of TL2Panel row blocks or in two, or chunk-major in chunks
//     of up to TL2Chunk blocks: Layout.Paneled) into a new slice (its blocks and tails are
//     the same), and checked;
//   - an int1 blob of kernels/1 to kernels/8 (row block after row block, VNNI4-interleaved:
//     int1DecodeV8) encoded again in this revision's layout (int1.go) into a new slice.
//
// Any other change is ReadsLayout's error: the blob has to be packed again from its weights.
func Relayout(rev string, f quantcfg.Format, m, k int, blob []byte) ([]byte, error) {
	err := ReadsLayout(rev, f)
	if err == nil {
		return blob, nil
	}
	if f != quantcfg.TL2 && f != quantcfg.Int1 {
		return nil, err
	}
	l, lerr := NewLayout(f, m, k)
	if lerr != nil {
		return nil, lerr
	}
	if f == quantcfg.Int1 {
		if !KnownLayout(rev) { // (ReadsLayout's error: not a revision before this one)
			return nil, err
		}
		return int1Relayout(l, blob)
	}
	before, ok := tl2Before(rev, l)
	if !ok {
		return nil, err
	}
	if len(blob) != l.Bytes() {
		return nil, fmt.Errorf("%w: %s %dx%d blob has %d bytes, want %d", ErrShape, f, m, k, len(blob), l.Bytes())
	}
	out := blob // laid out as this revision lays its shape out, unless:
	if before.PanelRows() != l.PanelRows() || !l.Paneled() && before.steps().most != l.steps().most {
		out = make([]byte, len(blob))
		var stream []byte
		for rb := range l.RowBlocks() {
			stream = before.RowBlockData(blob, rb, stream)
			l.SetRowBlockData(out, rb, stream)
		}
	}
	if err := CheckBlob(l, out); err != nil {
		return nil, fmt.Errorf("tl2 blob of %s, laid out for %s: %w", rev, LayoutRevision, err)
	}
	return out, nil
}

// int1Relayout returns an int1 blob of layout kernels/1 to kernels/8 (every row block's 4*Kp
// bytes in turn, int1DecodeV8) in this revision's layout. Every bit pattern is a valid int1
// blob, so only its size is checked.
func int1Relayout(l Layout, blob []byte) ([]byte, error) {
	if len(blob) != l.Bytes() {
		return nil, fmt.Errorf("%w: %s %dx%d blob has %d bytes, want %d", ErrShape, l.Format, l.M, l.K, len(blob), l.Bytes())
	}
	out := make([]byte, len(blob))
	w := make([]int8, RowBlock*l.Kp)
	stream := make([]byte, l.RowBlockBytes)
	for rb := range l.RowBlocks() {
		int1DecodeV8(l, blob[rb*l.RowBlockBytes:(rb+1)*l.RowBlockBytes], w)
		clear(stream)
		int1Encode(l, w, stream)
		l.SetRowBlockData(out, rb, stream)
	}
	return out, nil
}
