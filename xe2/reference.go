package xe2

import (
	"fmt"
	"math"

	"bitgo/quantcfg"
)

// The Go reference of the arithmetic every xe2 kernel reproduces bit for bit: package
// kernels' doc.go ("The arithmetic"), applied to logical int2 codes. The tuner validates
// candidates against it; the tests also check it against kernels.Reference.

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

const actEps = float32(1e-5)

func actScale(amax float32) float32 { return float32(127) / max(amax, actEps) }

func quantAct(x, xs float32) int8 {
	p := x * xs
	r := math.RoundToEven(float64(p))
	return int8(max(-128, min(127, r)))
}

func absMax(x []float32) float32 {
	var m float32
	for _, v := range x {
		m = max(m, float32(math.Abs(float64(v))))
	}
	return m
}

// Reference computes y = layer(x) for n tokens of x ([n][K] float32) on the CPU, the
// definition the kernels are checked against. spec is an int2 (or ternary) layer; codes
// are its logical int2 codes ([M][K], 0..3). The result is [n][M] float32 (callers round
// to bf16 for bf16 outputs).
func Reference(spec quantcfg.LayerSpec, codes []int8, scales, bias []float32, x []float32, n int) ([]float32, error) {
	spec = spec.WithDefaults()
	if err := checkLayer(spec, codes, scales, bias); err != nil {
		return nil, err
	}
	m, k := spec.Out, spec.In
	if n < 1 || len(x) != n*k {
		return nil, fmt.Errorf("%w: layer %s: %d activation values for %d tokens, want %d", ErrShape, spec.Name, len(x), n, n*k)
	}
	if err := checkFiniteAct(x, k); err != nil {
		return nil, fmt.Errorf("layer %s: %w", spec.Name, err)
	}
	cb := codebookOf(spec)
	// Activation quantization.
	xq := make([]int8, n*k)
	var xs []float32
	ga := spec.Act.Group
	nga := 1
	switch spec.Act.Kind {
	case quantcfg.ActPerTensor:
		xs = []float32{actScale(absMax(x))}
		for i, v := range x {
			xq[i] = quantAct(v, xs[0])
		}
	case quantcfg.ActPerGroup:
		nga = ceilDiv(k, ga)
		xs = make([]float32, n*nga)
		for t := 0; t < n; t++ {
			for g := 0; g < nga; g++ {
				k0, k1 := t*k+g*ga, t*k+min((g+1)*ga, k)
				s := actScale(absMax(x[k0:k1]))
				xs[t*nga+g] = s
				for i := k0; i < k1; i++ {
					xq[i] = quantAct(x[i], s)
				}
			}
		}
	default: // per-token
		xs = make([]float32, n)
		for t := 0; t < n; t++ {
			row := x[t*k : (t+1)*k]
			xs[t] = actScale(absMax(row))
			for i, v := range row {
				xq[t*k+i] = quantAct(v, xs[t])
			}
		}
	}
	xsAt := func(t, k0 int) float32 {
		switch spec.Act.Kind {
		case quantcfg.ActPerTensor:
			return xs[0]
		case quantcfg.ActPerGroup:
			return xs[t*nga+k0/ga]
		}
		return xs[t]
	}
	wsAt := func(row, k0 int) float32 {
		switch spec.Scale.Kind {
		case quantcfg.ScaleRow:
			return scales[row]
		case quantcfg.ScaleGroup:
			g := spec.Scale.Group
			return scales[row*ceilDiv(k, g)+k0/g]
		}
		return scales[0]
	}
	sl := segLen(spec)
	if sl == 0 {
		sl = k
	}
	out := make([]float32, n*m)
	for row := 0; row < m; row++ {
		w := codes[row*k : (row+1)*k]
		for t := 0; t < n; t++ {
			q := xq[t*k : (t+1)*k]
			var y float32
			for k0 := 0; k0 < k; k0 += sl {
				var acc int32
				for i := k0; i < min(k0+sl, k); i++ {
					acc += int32(cb[w[i]]) * int32(q[i])
				}
				p := float32(float32(acc)*wsAt(row, k0)) / xsAt(t, k0)
				if k0 == 0 {
					y = p
				} else {
					y = y + p
				}
			}
			if bias != nil {
				y = y + bias[row]
			}
			out[t*m+row] = y
		}
	}
	return out, nil
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

// BF16 converts a float32 to bfloat16 bits, rounding to nearest even (NaN -> quiet NaN).
func BF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7FFFFFFF > 0x7F800000 {
		return uint16(b>>16) | 0x7FC0
	}
	b += 0x7FFF + (b>>16)&1
	return uint16(b >> 16)
}
