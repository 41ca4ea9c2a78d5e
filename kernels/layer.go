package kernels

import (
	"fmt"
	"math"
	"unsafe"

	"bitgo/quantcfg"
)

// Layer is a packed layer ready to run: spec (defaults filled in), layout, the blob, its
// scales and its bias. Data may live anywhere (Go heap, arena, read-only file mapping);
// kernels only read it.
type Layer struct {
	Spec   quantcfg.LayerSpec
	Layout Layout
	Data   []byte
	Scales []float32 // Spec.NumScales() values
	Bias   []float32 // nil, or Spec.Out values
	// SegLen is the accumulation segment length along K (a group size), or 0 for one
	// segment over all of K.
	SegLen int
	// Levels maps int2 codes to int8 levels (the codebook); for other formats unused.
	Levels [4]int8
	// prep is the SIMD kernels' per-layer data (a *layerPrep), built on first use and
	// read without a lock after that (simdPrep). A copy of a Layer shares it until the
	// copy's prep is set to nil.
	prep unsafe.Pointer
}

// NewLayer checks a packed layer and returns it. The blob's codes are not decoded here
// (that costs a full pass): callers that got the blob from an untrusted peer call
// CheckBlob first; pack files carry checksums instead.
func NewLayer(spec quantcfg.LayerSpec, data []byte, scales, bias []float32) (*Layer, error) {
	spec = spec.WithDefaults()
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	l, err := NewLayout(spec.Format, spec.Out, spec.In)
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", spec.Name, err)
	}
	if len(data) != l.Bytes() {
		return nil, fmt.Errorf("layer %s: %w: %s %dx%d blob has %d bytes, want %d", spec.Name, ErrShape, spec.Format, spec.Out, spec.In, len(data), l.Bytes())
	}
	if n := spec.NumScales(); len(scales) != n {
		return nil, fmt.Errorf("layer %s: %w: %d scales, want %d (scale %q, %dx%d)", spec.Name, ErrShape, len(scales), n, spec.Scale, spec.Out, spec.In)
	}
	for i, s := range scales {
		if math.IsNaN(float64(s)) || math.IsInf(float64(s), 0) {
			return nil, fmt.Errorf("layer %s: %w: scale %d is %v", spec.Name, ErrNonFinite, i, s)
		}
	}
	if spec.Bias != (bias != nil) || (bias != nil && len(bias) != spec.Out) {
		return nil, fmt.Errorf("layer %s: %w: bias has %d values, want %d (spec bias=%v)", spec.Name, ErrShape, len(bias), map[bool]int{true: spec.Out}[spec.Bias], spec.Bias)
	}
	for i, b := range bias {
		if math.IsNaN(float64(b)) || math.IsInf(float64(b), 0) {
			return nil, fmt.Errorf("layer %s: %w: bias %d is %v", spec.Name, ErrNonFinite, i, b)
		}
	}
	ly := &Layer{Spec: spec, Layout: l, Data: data, Scales: scales, Bias: bias, Levels: spec.Codebook}
	switch {
	case spec.Act.Kind == quantcfg.ActPerGroup && spec.Scale.Kind == quantcfg.ScaleGroup:
		ly.SegLen = min(spec.Act.Group, spec.Scale.Group)
	case spec.Act.Kind == quantcfg.ActPerGroup:
		ly.SegLen = spec.Act.Group
	case spec.Scale.Kind == quantcfg.ScaleGroup:
		ly.SegLen = spec.Scale.Group
	}
	return ly, nil
}

// Segments is the number of accumulation segments along K.
func (l *Layer) Segments() int {
	if l.SegLen == 0 {
		return 1
	}
	return (l.Layout.K + l.SegLen - 1) / l.SegLen
}

// SegBounds returns segment j's inputs [k0, k1).
func (l *Layer) SegBounds(j int) (k0, k1 int) {
	if l.SegLen == 0 {
		return 0, l.Layout.K
	}
	return j * l.SegLen, min((j+1)*l.SegLen, l.Layout.K)
}

// WSIndex returns the index into Scales of row m, segment j.
func (l *Layer) WSIndex(m, j int) int {
	switch l.Spec.Scale.Kind {
	case quantcfg.ScaleRow:
		return m
	case quantcfg.ScaleGroup:
		g := l.Spec.Scale.Group
		return m*((l.Layout.K+g-1)/g) + j*l.SegLen/g
	}
	return 0
}

// Epilogue turns one segment's integer sum into its float32 contribution:
// (float32(acc) * ws) / xs, with no fused multiply-add.
func Epilogue(acc int32, ws, xs float32) float32 {
	t := float32(float32(acc) * ws)
	return float32(t / xs)
}

// Quantize prepares activations for this layer (see QuantizeActs).
func (l *Layer) Quantize(x []float32, n int, a *Acts) error { return l.QuantizeSplit(x, n, a, nil) }

// QuantizeSplit is Quantize with the tokens split over split's workers (QuantizeActsSplit).
func (l *Layer) QuantizeSplit(x []float32, n int, a *Acts, split Splitter) error {
	if err := QuantizeActsSplit(l.Layout, l.Spec.Act, x, n, a, split); err != nil {
		return fmt.Errorf("layer %s: %w", l.Spec.Name, err)
	}
	return nil
}
