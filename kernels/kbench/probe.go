package kbench

import (
	"time"

	"bitgo/kernels"
	"bitgo/quantcfg"
)

// CoreProbe measures how a pool's threads share the CPU's execution units while a
// measurement runs: the rate of a compute-bound GEMV (i2s, one token, probeShape: 256 KiB
// of weights, cache-resident) on all of the pool's threads over its rate on one. With
// every thread on a core of its own it approaches the thread count; threads that share a
// core (SMT siblings) get little more than one.
//
// On the 2-vCPU Zen 4 guest the two-thread DRAM read rate jumps between two levels every
// few seconds, and the probe mostly tells them apart: in 45 samples of 300 ms it read
// 1.4-1.8 beside all 36 reads of 30-36 GB/s (the two vCPUs on cores of their own) and
// 1.1-1.3 beside eight of the nine of 49-59 GB/s (one core's vector units shared, most
// likely its two SMT threads); some fast reads came with cores of their own too. With the
// cores shared, the formats bound by their vector work (int1, tl1, tl2, and several
// tokens) have about one core's compute for twice one core's bandwidth, and fall short of
// the roofline while the memory-bound ones (i2s, int2, int8, bf16) reach it.
type CoreProbe struct {
	set      *Set
	all, one *Runner
	solo     *Pool
}

// probeShape is the probe's GEMV: 512x2048 i2s, 256 KiB, in L2 (half of it per thread at
// two).
var probeShape = Shape{M: 512, K: 2048}

// NewCoreProbe returns a probe of p's threads, or nil for a pool of one thread (nothing to
// compare).
func NewCoreProbe(p *Pool) (*CoreProbe, error) {
	if p.Threads() < 2 {
		return nil, nil
	}
	set, err := NewSet(quantcfg.I2S, probeShape, 1, 7)
	if err != nil {
		return nil, err
	}
	c := &CoreProbe{set: set, solo: NewPool(1)}
	if c.all, err = NewRunner(p, set, 1, 7); err == nil {
		c.one, err = NewRunner(c.solo, set, 1, 7)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	defer withoutAdapt()()
	c.all.Warm()
	c.one.Warm()
	return c, nil
}

// Scale runs the GEMV on all threads for d/2, then on one for d/2, and returns the first
// rate over the second; 0 when either run lost one of its CPUs to another process for a
// while (a busy machine says nothing about how the threads share the cores: under another
// process, two threads once ran at 0.09x one's rate), or c is nil. It runs under the current
// tuning without kernels.TuningAdapt (so that its calls leave the adaptive choices alone),
// and restores the tuning.
func (c *CoreProbe) Scale(d time.Duration) float64 {
	if c == nil {
		return 0
	}
	defer withoutAdapt()()
	all, ok := c.rate(c.all, d/2)
	one, ok1 := c.rate(c.one, d/2)
	if !ok || !ok1 {
		return 0
	}
	return all / one
}

// withoutAdapt switches to the current tuning without kernels.TuningAdapt and returns the
// function that switches back.
func withoutAdapt() (restore func()) {
	cur, _ := kernels.CurrentTuning()
	kernels.SwitchTuning(cur &^ kernels.TuningAdapt)
	return func() { kernels.SwitchTuning(cur) }
}

// rate is r's calls per second over d, and whether the process had r's CPUs throughout.
func (c *CoreProbe) rate(r *Runner, d time.Duration) (float64, bool) {
	tr, n := StartTrial(), 0
	for tr.Elapsed() < d {
		for range 8 {
			r.Call(n)
			n++
		}
	}
	wall, ok := tr.Stop(r.Pool.Threads())
	return float64(n) / wall.Seconds(), ok
}

// Close releases the probe's weights and its one-thread pool (not the pool it probes); a
// nil probe has nothing to release.
func (c *CoreProbe) Close() {
	if c == nil {
		return
	}
	c.solo.Close()
	c.set.Free()
}
