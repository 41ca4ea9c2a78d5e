package kernels_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"bitgo/kernels"
	"bitgo/kernels/kbench"
	"bitgo/quantcfg"
)

// Benchmarks: BenchmarkGEMV/<format>/<MxK>/n<N>/<impl>/t<threads>, b.SetBytes(weight bytes
// per call), over distinct weight matrices totalling kbench.SetBytes (DRAM), unless
// BITGO_BENCH_CACHE=1 (one matrix, cache-resident where it fits). Compare with benchstat at
// -count=6. BITGO_BENCH_SHAPES=2560x2560,4096x14336 narrows the shapes, BITGO_BENCH_NS=2,8
// sets the token counts.

var benchFormats = []quantcfg.Format{quantcfg.I2S, quantcfg.TL1, quantcfg.TL2, quantcfg.Int2, quantcfg.Int1, quantcfg.Int8, quantcfg.BF16, quantcfg.F32}

func benchShapes(b *testing.B) []kbench.Shape {
	v := os.Getenv("BITGO_BENCH_SHAPES")
	if v == "" {
		return kbench.Shapes
	}
	var out []kbench.Shape
	for _, s := range strings.Split(v, ",") {
		sh, err := kbench.ParseShape(s)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, sh)
	}
	return out
}

// impls are the ISA paths a benchmark forces, best first, with the switches that select them.
var impls = []struct {
	name  string
	isa   kernels.ISA
	force func() func()
}{
	{"avx512vnni", kernels.ISAAVX512, func() func() { return func() {} }},
	{"avxvnni", kernels.ISAAVXVNNI, func() func() { return kernels.DisableAVX512() }},
	{"avx2", kernels.ISAAVX2, func() func() {
		r1, r2 := kernels.DisableAVX512(), kernels.DisableAVXVNNI()
		return func() { r2(); r1() }
	}},
}

// benchNs are the token counts of BenchmarkGEMV: 1 and 4, or BITGO_BENCH_NS=2,8.
func benchNs(b *testing.B) []int {
	v := os.Getenv("BITGO_BENCH_NS")
	if v == "" {
		return []int{1, 4}
	}
	var out []int
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("BITGO_BENCH_NS: %q is not a token count", s)
		}
		out = append(out, n)
	}
	return out
}

func BenchmarkGEMV(b *testing.B) {
	minBytes := kbench.SetBytes
	if os.Getenv("BITGO_BENCH_CACHE") == "1" {
		minBytes = 0
	}
	for _, f := range benchFormats {
		b.Run(string(f), func(b *testing.B) {
			for _, sh := range benchShapes(b) {
				b.Run(sh.String(), func(b *testing.B) {
					set, err := kbench.NewSet(f, sh, minBytes, 1)
					if err != nil {
						b.Fatal(err)
					}
					defer set.Free()
					for _, n := range benchNs(b) {
						for _, im := range impls {
							for _, threads := range []int{1, 2} {
								b.Run(fmt.Sprintf("n%d/%s/t%d", n, im.name, threads), func(b *testing.B) {
									if !kernels.ISAAvailable(im.isa) {
										b.Skipf("%s does not run here", im.name)
									}
									restore := im.force()
									defer restore()
									benchCalls(b, set, n, threads)
								})
							}
						}
					}
				})
			}
		})
	}
}

func benchCalls(b *testing.B, set *kbench.Set, n, threads int) {
	p := kbench.NewPool(threads)
	defer p.Close()
	r, err := kbench.NewRunner(p, set, n, 2)
	if err != nil {
		b.Fatal(err)
	}
	r.Warm() // the set is shared by the ISA paths: whichever runs first would time the setup
	b.SetBytes(int64(set.Layers[0].Layout.Bytes()))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		r.Call(i)
	}
}

// BenchmarkGEMM is the prefill GEMM (4096x4096, 512 tokens) per format; ops/s counts a
// multiply and an add per weight and token. Compare with BenchmarkInt8Peak.
func BenchmarkGEMM(b *testing.B) {
	for _, f := range []quantcfg.Format{quantcfg.I2S, quantcfg.Int2, quantcfg.TL2, quantcfg.BF16} {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/4096x4096/n512/t%d", f, threads), func(b *testing.B) {
				set, err := kbench.NewSet(f, kbench.Shape{M: 4096, K: 4096}, 0, 1)
				if err != nil {
					b.Fatal(err)
				}
				defer set.Free()
				p := kbench.NewPool(threads)
				defer p.Close()
				r, err := kbench.NewRunner(p, set, 512, 2)
				if err != nil {
					b.Fatal(err)
				}
				r.Call(0)
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					r.Call(i)
				}
				b.ReportMetric(2*4096*4096*512*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gops/s")
			})
		}
	}
}

// BenchmarkInt8Peak is the int8 peak of the pool (kernels.Int8PeakPath: 24 independent zmm
// vpdpbusd, or 8 ymm vpmaddubsw summed by vpaddw).
func BenchmarkInt8Peak(b *testing.B) {
	if _, ok := kernels.Int8PeakPath(); !ok {
		b.Skip("no AVX-512 VNNI or AVX2")
	}
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("t%d", threads), func(b *testing.B) {
			p := kbench.NewPool(threads)
			defer p.Close()
			b.ReportMetric(kbench.Int8Peak(p, 300*time.Millisecond)/1e9, "Gops/s")
		})
	}
}

// BenchmarkReadBandwidth reads a kbench.ReadBytes buffer (DRAM: 1 GiB, or 4x a larger L3)
// and a 16 MiB one (L3) with each read loop.
func BenchmarkReadBandwidth(b *testing.B) {
	for _, size := range []int{kbench.ReadBytes, 16 << 20} {
		m, err := kbench.Alloc(size)
		if err != nil {
			b.Fatal(err)
		}
		for _, threads := range []int{1, 2} {
			for _, l := range kernels.ReadLoops() {
				b.Run(fmt.Sprintf("%dMiB/t%d/%s", size>>20, threads, l.Name), func(b *testing.B) {
					p := kbench.NewPool(threads)
					defer p.Close()
					b.SetBytes(int64(size))
					for b.Loop() {
						p.Run(func(w int) {
							lo, hi := kbench.Split(size/4096, threads, w)
							l.Read(m.B[lo*4096 : hi*4096])
						})
					}
				})
			}
		}
		m.Free()
	}
}
