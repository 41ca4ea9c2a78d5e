package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"bitgo/quantcfg"
)

func BenchmarkPrepare(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, f := range []quantcfg.Format{quantcfg.I2S, quantcfg.TL1, quantcfg.TL2, quantcfg.Int2, quantcfg.Int1, quantcfg.Int8, quantcfg.BF16} {
		for _, n := range []int{1, 8, 512} {
			k := 14336
			if n == 512 {
				k = 4096
			}
			spec := quantcfg.LayerSpec{Format: f, Out: 64, In: k}
			tl := newTestLayer(b, rng, spec)
			x := randActs(rng, n, k)
			kern, _ := Select(tl.Layer, n)
			b.Run(fmt.Sprintf("%s/K%d/n%d/%s", f, k, n, kern.Name()), func(b *testing.B) {
				var a Acts
				if err := tl.Quantize(x, n, &a); err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					kern.Prepare(tl.Layer, &a)
				}
			})
			b.Run(fmt.Sprintf("%s/K%d/n%d/quantize", f, k, n), func(b *testing.B) {
				var a Acts
				for b.Loop() {
					_ = tl.Quantize(x, n, &a)
				}
			})
		}
	}
}

// BenchmarkLayerPrep is the per-layer data's lookup (simdPrep), which every Prepare and
// every Run of every worker makes, from all CPUs at once.
func BenchmarkLayerPrep(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	tl := newTestLayer(b, rng, quantcfg.LayerSpec{Format: quantcfg.TL2, Out: 64, In: 2560})
	tl.simdPrep()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if tl.simdPrep() == nil {
				b.Error("no layer data")
			}
		}
	})
}
