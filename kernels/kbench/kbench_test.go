package kbench

import (
	"runtime"
	"sync/atomic"
	"testing"
)

func TestPoolRuns(t *testing.T) {
	for _, n := range []int{1, 2, runtime.NumCPU()} {
		p := NewPool(n)
		var c atomic.Int64
		for i := 0; i < 1000; i++ {
			p.Run(func(w int) { c.Add(int64(w + 1)) })
		}
		p.Close()
		if want := int64(1000 * n * (n + 1) / 2); c.Load() != want {
			t.Fatalf("n=%d: %d, want %d", n, c.Load(), want)
		}
	}
}
