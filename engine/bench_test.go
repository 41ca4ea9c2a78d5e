package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"bitgo/kernels"
	"bitgo/quantcfg"
	"bitgo/sched"
)

// BenchmarkForward times whole calls through the engine on the daemon's pool (its default
// configuration, as bitd serve runs it): bf16 in and out (what the Python client sends)
// against float32, decode (one token) and prefill (512), on BitNet-2B's shapes, one layer
// each (cache-resident weights). The difference is the engine's work around the kernels:
// the conversions and the activations' quantization.
func BenchmarkForward(b *testing.B) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, threads := range []int{1, 2} {
		sc := sched.Default() // the daemon's pool: workers spin 1 ms between calls before they sleep
		sc.Threads = threads
		pool, err := sched.New(sc)
		if err != nil {
			b.Fatal(err)
		}
		e, err := New(Config{Runner: sched.Runner{Pool: pool}})
		if err != nil {
			b.Fatal(err)
		}
		for _, sh := range []struct{ m, k int }{{2560, 2560}, {6912, 2560}, {2560, 6912}} {
			s := randLayer(rng, fmt.Sprintf("%dx%d", sh.m, sh.k), quantcfg.I2S, sh.m, sh.k, false)
			id, err := e.Register(s)
			if err != nil {
				b.Fatal(err)
			}
			for _, n := range []int{1, 512} {
				xf, of := make([]float32, n*sh.k), make([]float32, n*sh.m)
				for i := range xf {
					xf[i] = float32(rng.NormFloat64())
				}
				xb, ob := make([]byte, 2*n*sh.k), make([]byte, 2*n*sh.m)
				for i, v := range xf {
					h := kernels.BF16(v)
					xb[2*i], xb[2*i+1] = byte(h), byte(h>>8)
				}
				name := fmt.Sprintf("i2s/%dx%d/n%d/t%d", sh.m, sh.k, n, threads)
				b.Run(name+"/bf16", func(b *testing.B) {
					for b.Loop() {
						if err := e.Forward(id, xb, quantcfg.DTypeBF16, n, ob); err != nil {
							b.Fatal(err)
						}
					}
				})
				b.Run(name+"/f32", func(b *testing.B) {
					for b.Loop() {
						if err := e.ForwardF32(id, xf, n, of); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
		if err := e.Close(); err != nil {
			b.Fatal(err)
		}
		pool.Close()
	}
}
