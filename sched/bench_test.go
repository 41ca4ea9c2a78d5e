package sched

import (
	"fmt"
	"testing"
)

func benchPool(b *testing.B, threads int, mode callerMode) *Pool {
	b.Helper()
	cfg := Default()
	cfg.Threads = threads
	p, err := newPool(cfg, mode)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}

var modeNames = map[callerMode]string{callerWorks: "callerWorks", callerPinned: "callerPinned", callerWaits: "callerWaits"}

// BenchmarkForkJoinEmpty is the cost of an empty parallel region on 2
// workers (the pool's default: the caller is worker 0).
func BenchmarkForkJoinEmpty(b *testing.B) {
	p := benchPool(b, 2, callerWorks)
	fn := func(int) {}
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Run(fn); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkForkJoinModes compares who runs worker 0's share: the caller
// (default), the caller pinned for the call, or a dedicated worker while
// the caller waits.
func BenchmarkForkJoinModes(b *testing.B) {
	for _, m := range []callerMode{callerWorks, callerPinned, callerWaits} {
		b.Run(modeNames[m], func(b *testing.B) {
			p := benchPool(b, 2, m)
			fn := func(int) {}
			for b.Loop() {
				p.Run(fn)
			}
		})
	}
}

var sink uint64

// BenchmarkSplitWork runs a cache-resident work of ~20 us per call split
// over 2 workers, in each caller mode.
func BenchmarkSplitWork(b *testing.B) {
	buf := make([]uint64, 1<<16) // 512 KiB, L2-resident per half
	for i := range buf {
		buf[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	const blocks = 64
	per := len(buf) / blocks
	for _, m := range []callerMode{callerWorks, callerPinned, callerWaits} {
		b.Run(modeNames[m], func(b *testing.B) {
			p := benchPool(b, 2, m)
			var acc [2]uint64
			fn := func(w, lo, hi int) {
				s := uint64(0)
				for _, v := range buf[lo*per : hi*per] {
					s += v ^ (v >> 7)
				}
				acc[w] += s
			}
			b.SetBytes(int64(len(buf) * 8))
			for b.Loop() {
				p.Split("bench", blocks, fn)
			}
			sink += acc[0] + acc[1]
			b.ReportMetric(p.Ratios("bench")[1], "ratio1")
		})
	}
}

func ExamplePool_Split() {
	p, err := New(Default())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	rows := make([]int, 4096)
	const bm = 32 // rows per block
	err = p.Split("example/i2s", len(rows)/bm, func(worker, lo, hi int) {
		for r := lo * bm; r < hi*bm; r++ {
			rows[r] = r
		}
	})
	fmt.Println(err, rows[4095])
	// Output: <nil> 4095
}
