package xe2

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"bitgo/quantcfg"
)

// BenchmarkForward: int2 layers of BitNet b1.58 2B4T's shapes, rotating over copies
// larger than the device cache, with the tiles Forward picks (tune table or heuristic).
// MB/s is weight bytes read. The portable emulation's timings mean nothing, so it is
// skipped there unless BITD_XE2_BENCH_EMULATED=1.
func BenchmarkForward(b *testing.B) {
	d := testDevice(b, "")
	if !d.Info.native && os.Getenv("BITD_XE2_BENCH_EMULATED") != "1" {
		b.Skip("emulated device: timings mean nothing (BITD_XE2_BENCH_EMULATED=1 runs it anyway)")
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for _, sh := range [][2]int{{2560, 2560}, {6912, 2560}, {2560, 6912}} {
		spec := quantcfg.LayerSpec{Name: "bench", Format: quantcfg.Int2, Out: sh[0], In: sh[1]}
		layers, err := rotatingLayers(d, spec, rng, 0)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{1, 8, 64} {
			x := f32bytes(RandomActs(rng, n, spec.In))
			y := make([]byte, 4*n*spec.Out)
			b.Run(fmt.Sprintf("int2/%dx%d/n%d/%s", sh[0], sh[1], n, d.Info.Path), func(b *testing.B) {
				b.SetBytes(int64(layers[0].l.WeightBytes()))
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if err := layers[i%len(layers)].l.Forward(quantcfg.DTypeF32, x, n, y); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		freeAll(layers)
	}
}
