package kernels

import (
	"math/rand/v2"

	"bitgo/quantcfg"
)

// RandomWeights are uniformly random logical weights of format f, m x k, for tests,
// benchmarks and self-checks: ternary formats -1/0/1, int2 codes 0..3, int1 ±1, int8
// -128..127; float formats normal values times scale, rounded to bfloat16 for bf16 (so that
// the packed layer holds them exactly).
func RandomWeights(rng *rand.Rand, f quantcfg.Format, m, k int, scale float64) Weights {
	if f.IsFloat() {
		w := make([]float32, m*k)
		for i := range w {
			w[i] = float32(rng.NormFloat64() * scale)
			if f == quantcfg.BF16 {
				w[i] = RoundBF16(w[i])
			}
		}
		return Weights{F: w}
	}
	q := make([]int8, m*k)
	for i := range q {
		switch {
		case f.IsTernary():
			q[i] = int8(rng.IntN(3) - 1)
		case f == quantcfg.Int2:
			q[i] = int8(rng.IntN(4))
		case f == quantcfg.Int1:
			q[i] = int8(2*rng.IntN(2) - 1)
		default:
			q[i] = int8(rng.IntN(256) - 128)
		}
	}
	return Weights{Q: q}
}
