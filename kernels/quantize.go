package kernels

import (
	"fmt"
	"math"

	"bitgo/quantcfg"
)

// Weight quantization recipes, float32 weights -> logical weights + scales, used by
// `bitd pack`, tests and demos. Every division and rounding is float32, round half to even.

// Ternarize is BitNet b1.58's absmean recipe over the whole tensor: s = mean|W| (summed in
// float64, rounded to float32, floored at 1e-5), W_t = clamp(roundHalfEven(W/s), -1, 1).
// It returns the ternary weights and s (the per-tensor scale).
func Ternarize(w []float32) ([]int8, float32, error) {
	var sum float64
	for _, v := range w {
		sum += math.Abs(float64(v))
	}
	if math.IsNaN(sum) || math.IsInf(sum, 0) {
		return nil, 0, checkFinite("weight", w)
	}
	s := max(float32(sum/float64(max(len(w), 1))), actEps)
	q := make([]int8, len(w))
	for i, v := range w {
		// clamp(roundHalfEven(t), -1, 1) for t = v/s: ±0.5 round to 0 (even)
		t := v / s
		var r int8
		if t > 0.5 {
			r = 1
		} else if t < -0.5 {
			r = -1
		}
		q[i] = r
	}
	return q, s, nil
}

// TernarizeRows is Ternarize applied to each row separately (per-row scales).
func TernarizeRows(w []float32, m, k int) ([]int8, []float32, error) {
	if len(w) != m*k {
		return nil, nil, fmt.Errorf("%w: %d weights, want %dx%d", ErrShape, len(w), m, k)
	}
	q := make([]int8, 0, m*k)
	scales := make([]float32, m)
	for r := 0; r < m; r++ {
		qr, s, err := Ternarize(w[r*k : (r+1)*k])
		if err != nil {
			return nil, nil, fmt.Errorf("row %d: %w", r, err)
		}
		q, scales[r] = append(q, qr...), s
	}
	return q, scales, nil
}

// QuantizeWeights quantizes float weights [m][k] for an int2, int1 or int8 layer with the
// given scale granularity (tensor, row or group:G), one scale per unit:
//
//	int8: s = max|W|/127, q = clamp(roundHalfEven(W/s), -128, 127)
//	int2: s = max|W|/max|level|, q = the code whose level is nearest W/s (ties: lower code)
//	int1: s = mean|W|, q = +1 for W >= 0, else -1
//
// Scales are floored at 1e-5 like the activation scales. Ternary formats use Ternarize.
func QuantizeWeights(f quantcfg.Format, w []float32, m, k int, g quantcfg.ScaleGran, cb quantcfg.Codebook) ([]int8, []float32, error) {
	if len(w) != m*k {
		return nil, nil, fmt.Errorf("%w: %d weights, want %dx%d", ErrShape, len(w), m, k)
	}
	if err := checkFinite("weight", w); err != nil {
		return nil, nil, err
	}
	var unit int // inputs per scale within a row; 0 = the whole tensor
	switch g.Kind {
	case quantcfg.ScaleTensor:
	case quantcfg.ScaleRow:
		unit = k
	case quantcfg.ScaleGroup:
		unit = g.Group
	default:
		return nil, nil, fmt.Errorf("%w: scale %q cannot quantize %s weights", ErrShape, g, f)
	}
	q := make([]int8, m*k)
	scales := make([]float32, g.Count(m, k))
	var maxLevel float32
	for _, c := range cb {
		maxLevel = max(maxLevel, float32(math.Abs(float64(c))))
	}
	one := func(vals []float32, dst []int8) float32 {
		var s float32
		switch f {
		case quantcfg.Int8:
			s = max(absMax(vals)/127, actEps)
			for i, v := range vals {
				dst[i] = int8(max(-128, min(127, math.RoundToEven(float64(v/s)))))
			}
		case quantcfg.Int2:
			s = max(absMax(vals)/maxLevel, actEps)
			for i, v := range vals {
				t, best := v/s, 0
				for c := 1; c < 4; c++ {
					if abs32(t-float32(cb[c])) < abs32(t-float32(cb[best])) {
						best = c
					}
				}
				dst[i] = int8(best)
			}
		case quantcfg.Int1:
			var sum float64
			for _, v := range vals {
				sum += math.Abs(float64(v))
			}
			s = max(float32(sum/float64(len(vals))), actEps)
			for i, v := range vals {
				dst[i] = 1
				if v < 0 {
					dst[i] = -1
				}
			}
		}
		return s
	}
	if f != quantcfg.Int8 && f != quantcfg.Int2 && f != quantcfg.Int1 {
		return nil, nil, fmt.Errorf("%w: QuantizeWeights takes int2, int1 or int8, not %s (ternary formats: Ternarize)", ErrShape, f)
	}
	if unit == 0 {
		scales[0] = one(w, q)
		return q, scales, nil
	}
	i := 0
	for r := 0; r < m; r++ {
		for k0 := 0; k0 < k; k0 += unit {
			k1 := min(k0+unit, k)
			scales[i] = one(w[r*k+k0:r*k+k1], q[r*k+k0:r*k+k1])
			i++
		}
	}
	return q, scales, nil
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

func checkFinite(what string, v []float32) error {
	if i := firstNonFinite(v); i >= 0 {
		return fmt.Errorf("%w: %s %d is %v", ErrNonFinite, what, i, v[i])
	}
	return nil
}
