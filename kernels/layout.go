package kernels

import (
	"fmt"
	"slices"

	"bitgo/quantcfg"
)

// RowBlock is the number of output rows stored together: the unit of thread partitioning.
const RowBlock = 32

// TL2Block is the number of inputs (16 triples) in one tl2 block.
const TL2Block = 48

// TL2Chunk is the most tl2 blocks in one chunk (480 inputs): a chunk-major tl2 blob stores
// its chunks one after another, each holding every row block's piece of it (see tl2.go). A
// chunk's tables take 1 KiB of L1 a block and token, and the one-token kernel builds the
// next chunk's beside them (two sets). With 12 (layout kernels/3) that was 24 KiB of a 32 KiB
// L1d beside the weight stream, and on Zen 4 a 12-block chunk swept slower per byte than an
// 11-block one of the same call (per-chunk timings of 4096x14336 at one thread: 21.4 us
// against 17.9 for 12 and 11 blocks of 128 row blocks, 23.0 and 25.2 GB/s). Against 12, one
// thread from DRAM (medians of 12-16 interleaved rounds in shuffled order, the 8B shapes,
// 2560x2560 and 2560x6912): 10 read 5-12% more at one token, 5-23% at two and 1-13% at
// four; two threads +15-25% on the 8B shapes (one A/B of 12 rounds, noisier); cache-resident
// within -5..+2%. 9 and 8 read about as 10, 6 less than 12 (its per-chunk costs).
const TL2Chunk = 10

// TL2Panel is the most row blocks in one panel of a panel-major tl2 blob of at least
// TL2TwoPanelRowBlocks row blocks (see tl2.go): the blob stores its panels one after
// another, and within a panel block after block, each holding every row block's 320 bytes
// of it side by side. (16 in layout kernels/5.)
const TL2Panel = 32

// A tl2 blob is panel-major when it has at least TL2PanelMinBlocks tl2 blocks (K >= 1008)
// and TL2PanelMinRowBlocks row blocks (M > 2016), and chunk-major otherwise. Below
// TL2TwoPanelRowBlocks row blocks (M <= 3808) it is two panels, of ceil(row blocks/2) and
// the rest, so that two workers take one each; from it on, panels of TL2Panel. (In layout
// kernels/7 panel-major only from 53 blocks, K >= 2544; in kernels/6 only from 53 blocks
// and TL2TwoPanelRowBlocks row blocks.) See tl2.go for the measurements behind the rule.
const (
	TL2PanelMinBlocks    = 21
	TL2PanelMinRowBlocks = 64
	TL2TwoPanelRowBlocks = 120
)

// tl2PanelRows returns the row blocks per panel of a tl2 blob of nb blocks and mrb row
// blocks in this revision's layout: TL2Panel or half its row blocks where it is
// panel-major, 0 where it is chunk-major.
func tl2PanelRows(nb, mrb int) int {
	switch {
	case nb < TL2PanelMinBlocks || mrb < TL2PanelMinRowBlocks:
		return 0
	case mrb < TL2TwoPanelRowBlocks:
		return (mrb + 1) / 2
	}
	return TL2Panel
}

// LayoutRevision names this package's blob layouts as pack files (paged.PackHeader.Layout)
// and packed uploads (the wire's `layout`) record them: the last of layoutHistory. Bump it
// whenever a format's layout changes, adding the revision to layoutHistory, so that blobs
// packed before are refused with a clear error instead of being misread.
const LayoutRevision = "kernels/9"

// layoutHistory lists the layout revisions, oldest first, each with the formats whose layout
// it changed; every other format is as in kernels/1.
var layoutHistory = []layoutRev{
	{"kernels/1", nil},
	{"kernels/2", []quantcfg.Format{quantcfg.TL2}},  // the tl2 block: five planes of 5-bit codes instead of index nibbles and sign words
	{"kernels/3", []quantcfg.Format{quantcfg.TL1}},  // the tl1 blob chunk-major, like tl2's
	{"kernels/4", []quantcfg.Format{quantcfg.TL2}},  // tl2's chunks at most 10 blocks instead of 12 (TL2Chunk)
	{"kernels/5", []quantcfg.Format{quantcfg.TL2}},  // tl2 blobs of K >= 4080 and M > 4064 panel-major: panels of 16 row blocks, block then row block
	{"kernels/6", []quantcfg.Format{quantcfg.TL2}},  // tl2 panels of 32 row blocks (TL2Panel), and panel-major from K >= 2544 and M > 3808
	{"kernels/7", []quantcfg.Format{quantcfg.TL2}},  // tl2 panel-major from M > 2016 too, in two panels up to M = 3808
	{"kernels/8", []quantcfg.Format{quantcfg.TL2}},  // tl2 panel-major from K >= 1008 (21 blocks) instead of 2544
	{"kernels/9", []quantcfg.Format{quantcfg.Int1}}, // int1 in blocks of 32 inputs, 16 bits of a row to a word, panel-major (int1PanelRows)
}

// KnownLayout reports whether rev is one of layoutHistory's revisions.
func KnownLayout(rev string) bool { return layoutIndex(rev) >= 0 }

type layoutRev struct {
	rev     string
	changed []quantcfg.Format
}

func layoutIndex(rev string) int {
	return slices.IndexFunc(layoutHistory, func(h layoutRev) bool { return h.rev == rev })
}

// layoutChange returns the first revision after rev that changed f's layout, "" when none
// did, and false when rev is not a known revision.
func layoutChange(rev string, f quantcfg.Format) (string, bool) {
	i := layoutIndex(rev)
	if i < 0 {
		return "", false
	}
	for _, h := range layoutHistory[i+1:] {
		if slices.Contains(h.changed, f) {
			return h.rev, true
		}
	}
	return "", true
}

// ReadsLayout returns nil when a blob of format f packed in layout revision rev is a blob
// of this package's layout, and otherwise an error saying why not (an unknown revision, or
// the revision that changed f's layout since rev).
func ReadsLayout(rev string, f quantcfg.Format) error {
	changed, known := layoutChange(rev, f)
	switch {
	case !known:
		return fmt.Errorf("blob layout %q is not one this build knows (it reads %s, and from %s on the formats unchanged since)", rev, LayoutRevision, layoutHistory[0].rev)
	case changed != "":
		return fmt.Errorf("%s blobs changed layout in %s, after %s (this build reads %s)", f, changed, rev, LayoutRevision)
	}
	return nil
}

// TL1Chunk is the most tl1 units (4 inputs each) in one chunk of a tl1 blob (1024 inputs,
// whose lookup tables for one token take 16 KiB of L1); see tl1.go.
const TL1Chunk = 256

// Layout gives the padded geometry and byte sizes of a layer's packed blob.
type Layout struct {
	Format quantcfg.Format
	M, K   int // logical rows (outputs) and columns (inputs)
	Mp, Kp int // padded; for tl2 Kp = K3 + Kp1
	// tl2 only: inputs [0, K3) are tl2 blocks, [K3, K) the tl1 tail, padded to Kp1.
	K3, Kp1 int
	// RowBlockBytes is the size of one row block's stream: contiguous in the blob for every
	// format but tl1, tl2 and int1, whose streams are interleaved chunk by chunk, or block by
	// block within panels (panel-major tl2, int1; RowBlockData gathers one).
	RowBlockBytes int
	// panel > 0: a panel-major blob, panels of up to panel row blocks: int1 (int1PanelRows), or
	// tl2 (TL2Panel, or half the row blocks in two panels: tl2PanelRows; 16 in a kernels/5
	// blob that Relayout reads); 0: chunk-major tl2, or any other format.
	panel int
	// tl2Chunk > 0: a chunk-major tl2 blob of an older revision, whose chunks held at most
	// tl2Chunk blocks (12 in kernels/2 and kernels/3, 10 in kernels/4 to kernels/7), which
	// Relayout reads (0: this revision's, TL2Chunk).
	tl2Chunk int
}

// NewLayout returns the layout of a layer. It checks the shape against quantcfg's limits.
func NewLayout(f quantcfg.Format, m, k int) (Layout, error) {
	fi, ok := f.Info()
	if !ok {
		return Layout{}, fmt.Errorf("%w: %w", ErrShape, f.Validate())
	}
	if m < 1 || m > quantcfg.MaxDim {
		return Layout{}, fmt.Errorf("%w: out_features (M) = %d: must be in [1, %d]", ErrShape, m, quantcfg.MaxDim)
	}
	if k < 1 || k > fi.MaxK {
		return Layout{}, fmt.Errorf("%w: in_features (K) = %d: format %s takes K in [1, %d]", ErrShape, k, f, fi.MaxK)
	}
	l := Layout{Format: f, M: m, K: k, Mp: roundUp(m, RowBlock)}
	switch f {
	case quantcfg.I2S:
		l.Kp = roundUp(k, 128)
		l.RowBlockBytes = 8 * l.Kp
	case quantcfg.TL1:
		l.Kp = roundUp(k, 4)
		l.RowBlockBytes = 8 * l.Kp
	case quantcfg.TL2:
		l.K3 = k / TL2Block * TL2Block
		l.Kp1 = roundUp(k-l.K3, 4)
		l.Kp = l.K3 + l.Kp1
		l.RowBlockBytes = 320*l.TL2Blocks() + 8*l.Kp1
		l.panel = tl2PanelRows(l.TL2Blocks(), l.RowBlocks())
	case quantcfg.Int2:
		l.Kp = roundUp(k, 32)
		l.RowBlockBytes = 8 * l.Kp
	case quantcfg.Int1:
		l.Kp = roundUp(k, 32)
		l.RowBlockBytes = 4 * l.Kp
		l.panel = int1PanelRows(l.RowBlocks())
	case quantcfg.Int8:
		l.Kp = roundUp(k, 32)
		l.RowBlockBytes = 32 * l.Kp
	case quantcfg.BF16:
		l.Kp = k
		l.RowBlockBytes = 64 * k
	case quantcfg.F32:
		l.Kp = k
		l.RowBlockBytes = 128 * k
	}
	return l, nil
}

// RowBlocks is the number of row blocks, Mp/32.
func (l Layout) RowBlocks() int { return l.Mp / RowBlock }

// Bytes is the size of the packed blob.
func (l Layout) Bytes() int { return l.RowBlocks() * l.RowBlockBytes }

// RowBlockData returns row block rb's stream: the blob's own bytes for every format but
// the interleaved ones (tl1, tl2, int1), whose stream is gathered from its pieces into scratch
// (grown if short).
func (l Layout) RowBlockData(blob []byte, rb int, scratch []byte) []byte {
	if !l.interleaved() {
		return blob[rb*l.RowBlockBytes : (rb+1)*l.RowBlockBytes]
	}
	if cap(scratch) < l.RowBlockBytes {
		scratch = make([]byte, l.RowBlockBytes)
	}
	s := scratch[:l.RowBlockBytes]
	l.pieces(rb, func(b, o, n int) { copy(s[o:o+n], blob[b:b+n]) })
	return s
}

// SetRowBlockData stores row block rb's stream (RowBlockBytes bytes) in the blob; for every
// format but tl1, tl2 and int1 a stream that RowBlockData returned is already in place.
func (l Layout) SetRowBlockData(blob []byte, rb int, stream []byte) {
	if !l.interleaved() {
		copy(blob[rb*l.RowBlockBytes:(rb+1)*l.RowBlockBytes], stream) // a no-op when in place
		return
	}
	l.pieces(rb, func(b, o, n int) { copy(blob[b:b+n], stream[o:o+n]) })
}

// pieces calls fn(blob offset, stream offset, bytes) for each piece of row block rb of an
// interleaved blob: one per chunk of a chunk-major one (tl2: the last also holds the tl1
// tail), one per block and then the tail of a panel-major one.
func (l Layout) pieces(rb int, fn func(b, o, n int)) {
	if l.Format == quantcfg.Int1 {
		off, stride := l.BlockAt(rb, 0)
		for b := range l.Kp / 32 {
			fn(off+b*stride, int1BlockBytes*b, int1BlockBytes)
		}
		return
	}
	if l.Paneled() {
		nb := l.TL2Blocks()
		off, stride := l.BlockAt(rb, 0)
		for b := range nb {
			fn(off+b*stride, 320*b, 320)
		}
		if l.Kp1 > 0 {
			fn(l.TailAt(rb), 320*nb, 8*l.Kp1)
		}
		return
	}
	sb := l.steps().bytes
	for c := 0; c < l.Chunks(); c++ {
		s0, _ := l.ChunkSpan(c)
		off, n := l.Piece(rb, c)
		fn(off, sb*s0, n)
	}
}

// Chunked reports whether the blob is chunk-major (tl1, and tl2 but where it is
// panel-major): it stores K chunk by chunk, each chunk holding every row block's piece of
// it side by side, so that a kernel sweeping one chunk over a range of row blocks reads one
// contiguous stream.
func (l Layout) Chunked() bool {
	return l.Format == quantcfg.TL1 || l.Format == quantcfg.TL2 && !l.Paneled()
}

// Paneled reports whether the blob is panel-major (tl2 of K >= 1008 and M > 2016): panels
// of up to PanelRows row blocks one after another, each storing its row blocks' tl2 blocks
// block by block (the row blocks' 320 bytes of block b side by side), then their tl1 tails
// side by side. (An int1 blob is panel-major too, always, and has kernels of its own: Paneled
// is tl2's.)
func (l Layout) Paneled() bool { return l.Format == quantcfg.TL2 && l.panel > 0 }

// PanelRows is the most row blocks of a panel of a panel-major blob (tl2: TL2Panel, or half
// its row blocks where it has two panels; int1: int1PanelRows), 0 for any other.
func (l Layout) PanelRows() int { return l.panel }

// interleaved reports whether the row blocks' streams are interleaved in the blob (tl1, tl2,
// int1), so that RowBlockData gathers one.
func (l Layout) interleaved() bool {
	return l.Format == quantcfg.TL1 || l.Format == quantcfg.TL2 || l.Format == quantcfg.Int1
}

// blockBytes is the bytes of one row block's block in a panel-major blob: a tl2 block (320)
// or an int1 block (int1BlockBytes).
func (l Layout) blockBytes() int {
	if l.Format == quantcfg.Int1 {
		return int1BlockBytes
	}
	return 320
}

// TL2Blocks is the tl2 blocks of a row block's stream (K3/TL2Block; 0 but for tl2).
func (l Layout) TL2Blocks() int { return l.K3 / TL2Block }

// panelMajor reports whether the blob is panel-major: tl2's Paneled shapes, and every int1
// blob.
func (l Layout) panelMajor() bool { return l.Paneled() || l.Format == quantcfg.Int1 }

// panelBlocks is a row block's blocks in a panel-major blob: tl2's TL2Blocks (its tl1 tail
// apart), int1's Kp/32.
func (l Layout) panelBlocks() int {
	if l.Format == quantcfg.Int1 {
		return l.Kp / 32
	}
	return l.TL2Blocks()
}

// Panels is the panels of a panel-major blob: PanelRows row blocks each, the last possibly
// fewer (0 for any other blob).
func (l Layout) Panels() int {
	if g := l.PanelRows(); g > 0 {
		return (l.RowBlocks() + g - 1) / g
	}
	return 0
}

// Panel returns panel p's first row block and its row blocks (PanelRows but in a short
// last panel) of a panel-major blob.
func (l Layout) Panel(p int) (rb0, g int) {
	rb0 = p * l.panel
	return rb0, min(l.panel, l.RowBlocks()-rb0)
}

// BlockAt returns the blob offset of row block rb's block b (tl2 or int1) in a panel-major
// blob and the bytes between its consecutive blocks (blockBytes per row block of its panel;
// the panel's row blocks' blocks lie blockBytes apart).
func (l Layout) BlockAt(rb, b int) (off, stride int) {
	rb0, g := l.Panel(rb / l.panel)
	bb := l.blockBytes()
	return rb0*l.RowBlockBytes + bb*(b*g+rb-rb0), bb * g
}

// TailAt returns the blob offset of row block rb's tl1 tail (8*Kp1 bytes) in a panel-major
// blob: after its panel's blocks, the panel's row blocks' tails side by side.
func (l Layout) TailAt(rb int) int {
	rb0, g := l.Panel(rb / l.panel)
	return rb0*l.RowBlockBytes + 320*l.TL2Blocks()*g + 8*l.Kp1*(rb-rb0)
}

// chunkSteps describes the K steps a chunk-major blob's chunks are made of (tl2: blocks of
// 48 inputs in 320 bytes, K3/48 of them, at most TL2Chunk per chunk; tl1: units of 4
// inputs in 32 bytes, Kp/4 of them, at most TL1Chunk per chunk).
type chunkSteps struct {
	n      int // steps in K
	bytes  int // bytes of one step in one row block
	inputs int // inputs per step
	most   int // steps per chunk at most
}

func (l Layout) steps() chunkSteps {
	if l.Format == quantcfg.TL2 {
		most := TL2Chunk
		if l.tl2Chunk > 0 {
			most = l.tl2Chunk
		}
		return chunkSteps{l.TL2Blocks(), 320, TL2Block, most}
	}
	return chunkSteps{l.Kp / 4, 32, 4, TL1Chunk}
}

// ChunkK0 returns the first input of chunk c.
func (l Layout) ChunkK0(c int) int {
	s0, _ := l.ChunkSpan(c)
	return l.steps().inputs * s0
}

// Chunks is the number of chunks of a chunk-major blob: ceil(steps/most), at least one (a
// tl2 K below 48 is one chunk of the tl1 tail alone).
func (l Layout) Chunks() int {
	st := l.steps()
	return max(1, (st.n+st.most-1)/st.most)
}

// ChunkSpan returns the first K step (tl2 block, tl1 unit) and the number of steps of chunk
// c: the steps are spread evenly, chunk c starting at step c*steps/chunks (so no chunk is a
// short straggler).
func (l Layout) ChunkSpan(c int) (s0, sc int) {
	ns, nc := l.steps().n, l.Chunks()
	s0 = c * ns / nc
	return s0, (c+1)*ns/nc - s0
}

// Piece returns the blob offset of row block rb's piece of chunk c of a chunk-major blob
// (Chunked) and the piece's size,
// which is also the bytes between consecutive row blocks' pieces: 320 bytes per tl2 block or
// 32 per tl1 unit of the chunk, and for a tl2 blob's last chunk the 8*Kp1 bytes of the tl1
// tail after them.
func (l Layout) Piece(rb, c int) (off, size int) {
	s0, sc := l.ChunkSpan(c)
	sb := l.steps().bytes
	size = sb * sc
	if l.Format == quantcfg.TL2 && c == l.Chunks()-1 {
		size += 8 * l.Kp1
	}
	return l.RowBlocks()*sb*s0 + rb*size, size
}

func roundUp(x, m int) int { return (x + m - 1) / m * m }
