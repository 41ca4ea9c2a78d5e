package kernels

import (
	"math/rand/v2"
	"testing"
	"time"

	"bitgo/quantcfg"
)

func TestGemmSpeed(t *testing.T) {
	if testing.Short() {
		t.Skip()
	}
	rng := rand.New(rand.NewPCG(1, 1))
	// peak
	best := 0.0
	for r := 0; r < 5; r++ {
		t0 := time.Now()
		ops := VNNIPeakOps(1 << 22)
		best = max(best, ops/time.Since(t0).Seconds())
	}
	t.Logf("VNNI peak 1 core: %.0f Gops", best/1e9)
	for _, f := range []quantcfg.Format{quantcfg.I2S, quantcfg.Int2, quantcfg.TL2, quantcfg.BF16} {
		tl := newTestLayer(t, rng, quantcfg.LayerSpec{Format: f, Out: 4096, In: 4096})
		n := 512
		k, _ := Select(tl.Layer, n)
		x := randActs(rng, n, 4096)
		out := make([]float32, n*4096)
		var a Acts
		tl.Quantize(x, n, &a)
		k.Prepare(tl.Layer, &a)
		bt := time.Hour
		for r := 0; r < 3; r++ {
			t0 := time.Now()
			k.Run(tl.Layer, &a, 0, 128, out)
			bt = min(bt, time.Since(t0))
		}
		ops := 2.0 * 4096 * 4096 * float64(n)
		t.Logf("%s %s GEMM 4096x4096 n=%d: %v  %.0f Gops (%.0f%% of peak)", k.Name(), f, n, bt, ops/bt.Seconds()/1e9, 100*ops/bt.Seconds()/best)
	}
}
