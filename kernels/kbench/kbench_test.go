package kbench

import (
	"runtime"
	"sync/atomic"
	"testing"

	"bitgo/kernels"
	"bitgo/quantcfg"
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

// TestRandomBlobValid: every format's random blob holds only valid codes, over shapes with
// and without padding, several tl2 chunks and a tl1 tail.
func TestRandomBlobValid(t *testing.T) {
	for _, f := range []quantcfg.Format{quantcfg.I2S, quantcfg.TL1, quantcfg.TL2, quantcfg.Int2,
		quantcfg.Int1, quantcfg.Int8, quantcfg.BF16, quantcfg.F32} {
		for _, sh := range []Shape{{70, 700}, {64, 48 * 25}, {33, 47}, {96, 4096}} {
			ly, err := kernels.NewLayout(f, sh.M, sh.K)
			if err != nil {
				t.Fatal(err)
			}
			blob := make([]byte, ly.Bytes())
			RandomBlob(f, ly, blob, 3)
			if err := kernels.CheckBlob(ly, blob); err != nil {
				t.Errorf("%s %s: %v", f, sh, err)
			}
		}
	}
}
