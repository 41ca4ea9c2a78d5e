package xe2

import (
	"math"
	"math/rand/v2"

	"bitgo/kernels"
	"bitgo/quantcfg"
)

// RandomLayer returns random codes, scales and bias for spec (defaults filled in): what
// the known-answer check, the tuner and the tests run on. Scales vary over several
// binades so that the epilogue's rounding is exercised.
func RandomLayer(rng *rand.Rand, spec quantcfg.LayerSpec) (codes []int8, scales, bias []float32) {
	spec = spec.WithDefaults()
	codes = kernels.RandomWeights(rng, quantcfg.Int2, spec.Out, spec.In, 1).Q
	scales = make([]float32, spec.NumScales())
	for i := range scales {
		scales[i] = float32(math.Ldexp(0.5+rng.Float64(), -rng.IntN(12)))
	}
	if spec.Bias {
		bias = make([]float32, spec.Out)
		for i := range bias {
			bias[i] = float32(rng.NormFloat64())
		}
	}
	return codes, scales, bias
}

// RandomActs returns n tokens of k activations: mostly normal values of varied
// magnitude per token, with exact ties for the quantizer and some zeros.
func RandomActs(rng *rand.Rand, n, k int) []float32 {
	x := make([]float32, n*k)
	for t := 0; t < n; t++ {
		mag := math.Ldexp(1, rng.IntN(16)-8)
		for i := 0; i < k; i++ {
			v := float32(rng.NormFloat64() * mag)
			switch rng.IntN(16) {
			case 0:
				v = 0
			case 1:
				v = float32(rng.IntN(9)-4) + 0.5 // quantizes to a tie when xs is 1
			}
			x[t*k+i] = v
		}
	}
	return x
}
