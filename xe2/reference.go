package xe2

import (
	"fmt"
	"math"

	"bitgo/kernels"
	"bitgo/quantcfg"
)

// The Go reference every xe2 kernel reproduces bit for bit is package kernels' reference
// GEMM (kernels/doc.go, "The arithmetic"). The tuner validates candidates against it; the
// tests also check it against an independent transcription of doc.go (docReference).

// segLen is the accumulation segment length along K, or 0 for one segment over all of K.
func segLen(spec quantcfg.LayerSpec) int {
	switch {
	case spec.Act.Kind == quantcfg.ActPerGroup && spec.Scale.Kind == quantcfg.ScaleGroup:
		return min(spec.Act.Group, spec.Scale.Group)
	case spec.Act.Kind == quantcfg.ActPerGroup:
		return spec.Act.Group
	case spec.Scale.Kind == quantcfg.ScaleGroup:
		return spec.Scale.Group
	}
	return 0
}

// Reference computes y = layer(x) for n tokens of x ([n][K] float32) with package
// kernels' reference GEMM, the definition of every result: spec is an int2 (or ternary)
// layer, codes its logical int2 codes ([M][K], 0..3; ternary layers pass TernaryCodes).
// The result is [n][M] float32 (bf16 outputs are its round-to-nearest-even).
func Reference(spec quantcfg.LayerSpec, codes []int8, scales, bias []float32, x []float32, n int) ([]float32, error) {
	spec = spec.WithDefaults()
	if err := checkLayer(spec, codes, scales, bias); err != nil {
		return nil, err
	}
	if n < 1 || len(x) != n*spec.In {
		return nil, fmt.Errorf("%w: layer %s: %d activation values for %d tokens, want %d", ErrShape, spec.Name, len(x), n, n*spec.In)
	}
	if err := checkFiniteAct(x, spec.In); err != nil {
		return nil, fmt.Errorf("layer %s: %w", spec.Name, err)
	}
	// Ternary layers are int2 layers with the default code book (codes = w + 2).
	ispec := spec
	ispec.Format, ispec.Codebook = quantcfg.Int2, codebookOf(spec)
	blob, err := kernels.PackNew(quantcfg.Int2, spec.Out, spec.In, kernels.Weights{Q: codes})
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", spec.Name, err)
	}
	l, err := kernels.NewLayer(ispec, blob, scales, bias)
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", spec.Name, err)
	}
	return kernels.Reference(l, x, n)
}

func codebookOf(spec quantcfg.LayerSpec) quantcfg.Codebook {
	if spec.Format == quantcfg.Int2 {
		return spec.Codebook
	}
	return quantcfg.DefaultCodebook
}

// checkLayer validates a layer's spec (defaults filled in), codes, scales and bias.
func checkLayer(spec quantcfg.LayerSpec, codes []int8, scales, bias []float32) error {
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	switch spec.Format {
	case quantcfg.Int2, quantcfg.I2S, quantcfg.TL1, quantcfg.TL2:
	default:
		return fmt.Errorf("%w: layer %s: format %s (xe2 serves int2, and ternary i2s/tl1/tl2 as int2)", ErrUnsupported, spec.Name, spec.Format)
	}
	m, k := spec.Out, spec.In
	if len(codes) != m*k {
		return fmt.Errorf("%w: layer %s: %d weight codes, want M=%d x K=%d = %d", ErrShape, spec.Name, len(codes), m, k, m*k)
	}
	for i, c := range codes {
		if c < 0 || c > 3 {
			return fmt.Errorf("%w: layer %s: weight code at row %d, input %d is %d: int2 codes are 0..3", ErrInvalid, spec.Name, i/k, i%k, c)
		}
	}
	if want := spec.NumScales(); len(scales) != want {
		return fmt.Errorf("%w: layer %s: %d scales, want %d (scale %q, %dx%d)", ErrShape, spec.Name, len(scales), want, spec.Scale, m, k)
	}
	for i, s := range scales {
		if math.IsNaN(float64(s)) || math.IsInf(float64(s), 0) {
			return fmt.Errorf("%w: layer %s: scale %d is %v", ErrNonFinite, spec.Name, i, s)
		}
	}
	if spec.Bias != (bias != nil) || (bias != nil && len(bias) != m) {
		return fmt.Errorf("%w: layer %s: bias has %d values, want %d (spec bias=%v)", ErrShape, spec.Name, len(bias), map[bool]int{true: m}[spec.Bias], spec.Bias)
	}
	for i, b := range bias {
		if math.IsNaN(float64(b)) || math.IsInf(float64(b), 0) {
			return fmt.Errorf("%w: layer %s: bias %d is %v", ErrNonFinite, spec.Name, i, b)
		}
	}
	return nil
}

func checkFiniteAct(x []float32, k int) error {
	for i, v := range x {
		if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("%w: activation of token %d, input %d is %v", ErrNonFinite, i/k, i%k, v)
		}
	}
	return nil
}
