package kbench

import (
	"runtime"
	"slices"
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

// TestAgainstReads: each round is paired with the reads just before and after it, rounds
// with an unclean trial or read are left out (all are used when none is left), and the
// rounds are taken in their order, not sorted.
func TestAgainstReads(t *testing.T) {
	const g = 1e9
	// 1000 bytes per call; rounds at 1000, 500, 250 ns: 1, 2 and 4 GB/s.
	ns := []float64{1000, 500, 250}
	reads := []readTrial{{1 * g, true}, {3 * g, true}, {5 * g, true}, {3 * g, true}}
	// round 0: 1 / 2 = 50%, round 1: 2 / 4 = 50%, round 2: 4 / 4 = 100%; reads 2, 4, 4.
	for _, c := range []struct {
		name     string
		clean    []bool
		reads    []readTrial
		bps, pct float64
	}{
		{"all clean", []bool{true, true, true}, reads, 4 * g, 50},
		{"round 2 unclean", []bool{true, true, false}, reads, 4 * g, 50},
		{"round 0 only", []bool{true, false, false}, reads, 2 * g, 50},
		{"read 2 unclean", []bool{true, true, true}, []readTrial{{1 * g, true}, {3 * g, true}, {5 * g, false}, {3 * g, true}}, 2 * g, 50},
		{"none clean: all rounds", []bool{false, false, false}, reads, 4 * g, 50},
		{"rounds 1 and 2", []bool{false, true, true}, reads, 4 * g, 100},
	} {
		before := append([]float64(nil), ns...)
		bps, pct := againstReads(ns, c.clean, c.reads, 1000)
		if bps != c.bps || pct != c.pct {
			t.Errorf("%s: read %g B/s, %g%%; want %g, %g", c.name, bps, pct, c.bps, c.pct)
		}
		if !slices.Equal(ns, before) {
			t.Fatalf("%s: the rounds were reordered: %v", c.name, ns)
		}
	}
}

// TestRoundRatio: rounds are paired by index, those unclean on either side left out (all used
// when none is clean on both).
func TestRoundRatio(t *testing.T) {
	a := Timing{Rounds: []float64{10, 40, 90, 12}, Cleans: []bool{true, true, false, true}}
	b := Timing{Rounds: []float64{5, 10, 30, 4}, Cleans: []bool{true, true, true, false}}
	// clean in both: rounds 0 and 1, ratios 2 and 4 (the upper median).
	if got := RoundRatio(a, b); got != 4 {
		t.Errorf("RoundRatio = %v, want 4", got)
	}
	b.Cleans = []bool{false, false, true, false}
	// none clean in both: all four rounds, ratios 2, 4, 3, 3.
	if got := RoundRatio(a, b); got != 3 {
		t.Errorf("RoundRatio with no clean pair = %v, want 3", got)
	}
}
