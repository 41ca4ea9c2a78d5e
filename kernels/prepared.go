package kernels

import (
	"sync"

	"bitgo/quantcfg"
)

// Per-layer data the SIMD kernels derive once from a layer's scales and bias, kept in
// Layer.Prepared under prepKey. Layer.Prepared may be read and written by concurrent
// callers of Prepare and Run, so every access goes through preparedMu.
var preparedMu sync.RWMutex

const prepKey = "simd"

// layerPrep: the weight scales laid out per row block and segment (so the epilogue loads
// 32 rows' scales with two vector loads), and the bias padded to Mp.
type layerPrep struct {
	ws          []float32 // [Mp/32][nseg][32] (row, group), or [32] (tensor)
	wsRB, wsSeg int       // floats between row blocks and between segments in ws
	bias        []float32 // Mp floats, nil without bias
}

func (l *Layer) simdPrep() *layerPrep {
	preparedMu.RLock()
	p, ok := l.Prepared[prepKey].(*layerPrep)
	preparedMu.RUnlock()
	if ok {
		return p
	}
	p = buildPrep(l)
	preparedMu.Lock()
	defer preparedMu.Unlock()
	if q, ok := l.Prepared[prepKey].(*layerPrep); ok {
		return q
	}
	if l.Prepared == nil {
		l.Prepared = map[string]any{}
	}
	l.Prepared[prepKey] = p
	return p
}

func buildPrep(l *Layer) *layerPrep {
	ly := l.Layout
	p := &layerPrep{}
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
