package kernels

import (
	"math/rand/v2"
	"testing"

	"bitgo/quantcfg"
)

// BenchmarkPack measures packing speed (bytes of int8 logical input per second).
func BenchmarkPack(b *testing.B) {
	const m, k = 2560, 6912
	rng := rand.New(rand.NewPCG(1, 1))
	for _, f := range []quantcfg.Format{quantcfg.I2S, quantcfg.TL1, quantcfg.TL2, quantcfg.Int2, quantcfg.Int1, quantcfg.Int8} {
		w := randWeights(rng, f, m, k)
		l, _ := NewLayout(f, m, k)
		dst := make([]byte, l.Bytes())
		b.Run(string(f), func(b *testing.B) {
			b.SetBytes(m * k)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if err := Pack(f, m, k, w, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	wf := make([]float32, m*k)
	for i := range wf {
		wf[i] = float32(rng.NormFloat64())
	}
	b.Run("ternarize", func(b *testing.B) {
		b.SetBytes(m * k * 4)
		for i := 0; i < b.N; i++ {
			if _, _, err := Ternarize(wf); err != nil {
				b.Fatal(err)
			}
		}
	})
}
