package sched

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func benchPool(b *testing.B, threads int) *Pool {
	b.Helper()
	cfg := Default()
	cfg.Threads = threads
	p, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}

// BenchmarkForkJoinEmpty is the cost of an empty parallel region on 2
// workers, back to back (the dedicated worker is spinning).
func BenchmarkForkJoinEmpty(b *testing.B) {
	p := benchPool(b, 2)
	fn := func(int) {}
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Run(fn); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(p.nudges.Load())/float64(b.N), "nudges/op")
}

// BenchmarkForkJoinAfterIdle is the latency of an empty parallel region
// when the worker has been idle longer than Spin and sleeps on its futex
// (the idle gap itself is not timed). The mean is dominated by rare
// multi-millisecond outliers on a shared VM, so it also reports the
// median and 90th percentile.
func BenchmarkForkJoinAfterIdle(b *testing.B) {
	p := benchPool(b, 2)
	fn := func(int) {}
	var d []time.Duration
	for b.Loop() {
		b.StopTimer()
		time.Sleep(3 * p.cfg.Spin)
		b.StartTimer()
		t0 := time.Now()
		p.Run(fn)
		d = append(d, time.Since(t0))
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(d[len(d)*9/10].Nanoseconds()), "p90-ns")
	b.ReportMetric(float64(p.nudges.Load())/float64(len(d)), "nudges/op")
}

var sink uint64

// BenchmarkSplitWork runs a cache-resident work of ~20 us per call split
// over 2 workers.
func BenchmarkSplitWork(b *testing.B) {
	buf := make([]uint64, 1<<16) // 512 KiB, L2-resident per half
	for i := range buf {
		buf[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	const blocks = 64
	per := len(buf) / blocks
	p := benchPool(b, 2)
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
		if err := p.Split("bench", blocks, fn); err != nil {
			b.Fatal(err)
		}
	}
	sink += acc[0] + acc[1]
	b.ReportMetric(p.Ratios("bench")[1], "ratio1")
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
