//go:build !noasm

package kernels

import (
	"math/rand/v2"
	"os"
	"sort"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"bitgo/quantcfg"
)

type variant struct {
	name string
	fns  map[int]func(*byte)
}

func sweep(t *testing.T, f quantcfg.Format, m, k int, isa ISA, vs []variant, ns []int) {
	rng := rand.New(rand.NewPCG(1, 1))
	tl := newTestLayer(t, rng, quantcfg.LayerSpec{Format: f, Out: m, In: k})
	nmat := 160 << 20 / len(tl.Data)
	ls := []*Layer{}
	arena := hugeAlloc(t, nmat*len(tl.Data))
	for i := 0; i < nmat; i++ {
		c := *tl.Layer
		c.Data = arena[i*len(tl.Data) : (i+1)*len(tl.Data)]
		copy(c.Data, tl.Data)
		c.Prepared = nil
		ls = append(ls, &c)
	}
	small := newTestLayer(t, rng, quantcfg.LayerSpec{Format: f, Out: 256, In: 2048})
	big := hugeAlloc(t, 1<<30)
	for i := range big {
		big[i] = byte(i)
	}
	ratios := map[string][]float64{}
	best := map[string]float64{}
	cache := map[string]float64{}
	var bwBest float64
	base := asmOps(isa, f)
	for round := 0; round < 6; round++ {
		for _, v := range vs {
			for _, n := range ns {
				o := *base
				if v.fns != nil {
					o.gemv[n] = v.fns[n]
				}
				kern := &simdKernel{isa: isa, format: f, ops: &o}
				x := randActs(rng, n, k)
				var a Acts
				tl.Quantize(x, n, &a)
				kern.Prepare(tl.Layer, &a)
				out := make([]float32, n*m)
				t0 := time.Now()
				ReadBytes(big[(round%4)<<28 : (round%4)<<28+160<<20])
				bw := float64(160<<20) / time.Since(t0).Seconds()
				bwBest = max(bwBest, bw)
				t0 = time.Now()
				for _, l := range ls {
					kern.Run(l, &a, 0, l.Layout.RowBlocks(), out)
				}
				gb := float64(len(ls)*len(tl.Data)) / time.Since(t0).Seconds()
				key := v.name + " n=" + string(rune('0'+n))
				ratios[key] = append(ratios[key], gb/bw)
				best[key] = max(best[key], gb)
				// cache-resident
				xs := randActs(rng, n, 2048)
				var as Acts
				small.Quantize(xs, n, &as)
				kern.Prepare(small.Layer, &as)
				outs := make([]float32, n*256)
				t0 = time.Now()
				for i := 0; i < 200; i++ {
					kern.Run(small.Layer, &as, 0, 8, outs)
				}
				cache[key] = max(cache[key], float64(200*len(small.Data))/time.Since(t0).Seconds())
			}
		}
	}
	for _, v := range vs {
		for _, n := range ns {
			key := v.name + " n=" + string(rune('0'+n))
			r := ratios[key]
			sort.Float64s(r)
			t.Logf("%-12s median ratio %.2f  best %.1f GB/s (best bw %.1f)  cache %.1f GB/s", key, r[len(r)/2], best[key]/1e9, bwBest/1e9, cache[key]/1e9)
		}
	}
}

func TestSweep(t *testing.T) {
	f, err := quantcfg.ParseFormat(os.Getenv("BITGO_SWEEP_FORMAT"))
	if err != nil {
		t.Skip("set BITGO_SWEEP_FORMAT to measure one format's kernels")
	}
	m, k := 4096, 14336
	if os.Getenv("BITGO_SWEEP_SHAPE") == "wide" {
		m, k = 14336, 4096
	}
	sweep(t, f, m, k, ISAAVX512, []variant{{"cur", nil}}, []int{1, 2, 3, 4})
}

func hugeAlloc(t testing.TB, n int) []byte {
	b, err := unix.Mmap(-1, 0, n+2<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	off := (2<<20 - int(uintptr(unsafe.Pointer(&b[0]))%(2<<20))) % (2 << 20)
	b = b[off : off+n]
	if err := unix.Madvise(b, unix.MADV_HUGEPAGE); err != nil {
		t.Fatal(err)
	}
	return b
}
