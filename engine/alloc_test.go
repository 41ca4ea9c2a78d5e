package engine

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"bitgo/kernels"
	"bitgo/quantcfg"
	"bitgo/sched"
)

// partsRunner is the daemon's runner (sched.Runner) counting the calls split in parts.
type partsRunner struct {
	sched.Runner
	parts *atomic.Int64
}

func (r partsRunner) count(class string) {
	if strings.HasSuffix(class, "/parts") {
		r.parts.Add(1)
	}
}

func (r partsRunner) Split(class string, blocks int, fn func(worker, lo, hi int)) {
	r.count(class)
	r.Runner.Split(class, blocks, fn)
}

func (r partsRunner) SplitOnce(class string, blocks int, fn func(worker, lo, hi int)) {
	r.count(class)
	r.Runner.SplitOnce(class, blocks, fn)
}

// refRuns reports whether format f's layers run on the reference kernel here (a build
// without assembly, or BITD_PUREGO=1), which takes every call by rows, never in parts.
func refRuns(f quantcfg.Format) bool {
	for _, c := range kernels.Dispatch(1) {
		if c.Format == f {
			return c.Kernel == kernels.Ref().Name()
		}
	}
	return false
}

// TestForwardAllocatesNothing: a decode call through the engine on the daemon's pool, at one
// and two threads, allocates nothing once its layer has run once (every GEMV of every token
// goes through here), the lookup-table calls run in parts included (tl2 2016x8192,
// chunk-major: 63 row blocks, one short of two panels), and those of a two-panel blob
// (2560x2560) by whole panels.
func TestForwardAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's bookkeeping allocates")
	}
	rng := rand.New(rand.NewPCG(3, 3))
	for _, threads := range []int{1, 2} {
		pool, err := sched.New(sched.Config{Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		var parts atomic.Int64
		e, err := New(Config{Runner: partsRunner{sched.Runner{Pool: pool}, &parts}})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			f    quantcfg.Format
			m, k int
		}{{quantcfg.I2S, 640, 2560}, {quantcfg.Int1, 640, 2560}, {quantcfg.TL1, 640, 2560}, {quantcfg.TL2, 2016, 8192}, {quantcfg.TL2, 2560, 2560}, {quantcfg.BF16, 256, 512}} {
			s := randLayer(rng, fmt.Sprintf("%s-%dx%d", c.f, c.m, c.k), c.f, c.m, c.k, true)
			id, err := e.Register(s)
			if err != nil {
				t.Fatal(err)
			}
			x, out := make([]byte, 2*c.k), make([]byte, 2*c.m)
			for i := range x {
				x[i] = byte(rng.Uint32() & 0x3f) // bf16 of modest size, sign bit clear
			}
			call := func() {
				if err := e.Forward(id, x, quantcfg.DTypeBF16, 1, out); err != nil {
					t.Fatal(err)
				}
			}
			call()
			before := parts.Load()
			if a := testing.AllocsPerRun(20, call); a != 0 {
				t.Errorf("%s %dx%d, %d thread(s): %.1f allocations per call", c.f, c.m, c.k, threads, a)
			}
			if c.f == quantcfg.TL2 && c.m == 2016 && threads == 2 && parts.Load() == before && !refRuns(c.f) {
				t.Errorf("%s %dx%d, 2 threads: no call ran in parts (the test no longer covers them)", c.f, c.m, c.k)
			}
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if err := pool.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
