package sched

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestHeteroBench runs the heterogeneous-core benchmark when
// BITGO_SCHED_HETERO=1 (a few seconds; it starts a competing process):
//
//	BITGO_SCHED_HETERO=1 go test -run TestHeteroBench -v ./sched/
//
// Optional: BITGO_SCHED_HETERO_BUSY, _IDLE, _SLICE (durations of the load),
// _ALPHA (the pool's filter weight), _TRACE=1 (print every call's ratios).
func TestHeteroBench(t *testing.T) {
	if os.Getenv("BITGO_SCHED_HETERO") != "1" {
		t.Skip("set BITGO_SCHED_HETERO=1 to run")
	}
	pc := Default()
	if v := os.Getenv("BITGO_SCHED_HETERO_ALPHA"); v != "" {
		if _, err := fmt.Sscan(v, &pc.Alpha); err != nil {
			t.Fatal(err)
		}
	}
	p := newTestPool(t, pc)
	w, err := NewGEMVLike(4096, 14336, 32, 4)
	if err != nil {
		t.Fatal(err)
	}
	var cfg HeteroConfig
	if v := os.Getenv("BITGO_SCHED_HETERO_BUSY"); v != "" {
		if cfg.Busy, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	if v := os.Getenv("BITGO_SCHED_HETERO_IDLE"); v != "" {
		if cfg.Idle, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	if v := os.Getenv("BITGO_SCHED_HETERO_SLICE"); v != "" {
		if cfg.Slice, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	res, err := HeteroBench(context.Background(), p, w, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
	if os.Getenv("BITGO_SCHED_HETERO_TRACE") == "1" {
		for _, c := range []struct {
			name string
			conv Convergence
		}{{"start/dynamic", res.StartDynamic}, {"start/steal", res.StartSteal}, {"stop/dynamic", res.StopDynamic}, {"stop/steal", res.StopSteal}} {
			for k, r := range c.conv.Trace {
				t.Logf("%s %2d %v", c.name, k+1, fmtRatios(r))
			}
		}
	}
}

func TestConvergence(t *testing.T) {
	// A step response settling at 1 (worker 1; worker 0 mirrors it at
	// 2-v), one dip after first getting close, and one late outlier.
	var tr [][]float64
	vals := []float64{1.2, 1.1, 1.02, 0.9, 1.01, 0.99, 1, 1, 1, 1, 1, 1.2, 1, 1, 1, 1, 1, 1}
	for _, v := range vals {
		tr = append(tr, []float64{2 - v, v})
	}
	c := convergence(tr, 0.05)
	if c.Settled[1] != 1 || c.Settled[0] != 1 {
		t.Fatalf("settled %v, want [1 1]", c.Settled)
	}
	// First within: call 3 (1.02); 5 in a row: from call 5 (after the
	// 0.9 dip); for good: after the 1.2 outlier, from call 13.
	if c.First != 3 || c.Window != 5 || c.ForGood != 13 {
		t.Fatalf("First %d Window %d ForGood %d, want 3 5 13", c.First, c.Window, c.ForGood)
	}
	if c.Spread != 0 {
		t.Fatalf("spread %v, want 0 (median deviation)", c.Spread)
	}
	if c := convergence(nil, 0.05); c.First != -1 || c.ForGood != -1 {
		t.Fatalf("empty trace: %+v", c)
	}
}

func TestLoadSpec(t *testing.T) {
	s := loadSpec{core: 1, busy: time.Millisecond, idle: 2 * time.Millisecond, ppid: 42, maxLife: time.Minute, slice: 100 * time.Microsecond}
	got, err := parseLoadSpec(s.String())
	if err != nil || got != s {
		t.Fatalf("round trip of %q: %+v, %v", s, got, err)
	}
	for _, bad := range []string{"", "core=1", "core=x busy=1ms idle=1ms ppid=1 maxlife=1s", "core=1 busy=1ms idle=1ms ppid=1 maxlife=1s bogus=2", "core"} {
		if _, err := parseLoadSpec(bad); err == nil {
			t.Errorf("parseLoadSpec(%q) accepted", bad)
		}
	}
}

func TestHeteroBenchRefusesUnpinnedPool(t *testing.T) {
	p := newTestPool(t, unpinned(1))
	w, err := NewGEMVLike(64, 64, 32, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := HeteroBench(context.Background(), p, w, HeteroConfig{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("HeteroBench on a 1-worker pool: %v, want ErrConfig", err)
	}
	if _, err := NewGEMVLike(65, 64, 32, 1); !errors.Is(err, ErrConfig) {
		t.Fatalf("NewGEMVLike(65 rows, bm 32): %v, want ErrConfig", err)
	}
}
