package kernels

import (
	"fmt"

	"bitgo/quantcfg"
)

// RowBlock is the number of output rows stored together: the unit of thread partitioning.
const RowBlock = 32

// TL2Block is the number of inputs (16 triples) in one tl2 block.
const TL2Block = 48

// Layout gives the padded geometry and byte sizes of a layer's packed blob.
type Layout struct {
	Format quantcfg.Format
	M, K   int // logical rows (outputs) and columns (inputs)
	Mp, Kp int // padded; for tl2 Kp = K3 + Kp1
	// tl2 only: inputs [0, K3) are tl2 blocks, [K3, K) the tl1 tail, padded to Kp1.
	K3, Kp1 int
	// RowBlockBytes is the size of one row block's contiguous stream.
	RowBlockBytes int
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
		l.RowBlockBytes = 320*(l.K3/TL2Block) + 8*l.Kp1
	case quantcfg.Int2:
		l.Kp = roundUp(k, 32)
		l.RowBlockBytes = 8 * l.Kp
	case quantcfg.Int1:
		l.Kp = roundUp(k, 32)
		l.RowBlockBytes = 4 * l.Kp
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

// RowBlockData returns row block rb's stream within blob.
func (l Layout) RowBlockData(blob []byte, rb int) []byte {
	return blob[rb*l.RowBlockBytes : (rb+1)*l.RowBlockBytes]
}

func roundUp(x, m int) int { return (x + m - 1) / m * m }
