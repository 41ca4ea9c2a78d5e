package sched

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestHeteroBench runs the heterogeneous-core benchmark when
// BITGO_SCHED_HETERO=1 (it takes ~10 s and starts a competing process):
//
//	BITGO_SCHED_HETERO=1 go test -run TestHeteroBench -v ./sched/
func TestHeteroBench(t *testing.T) {
	if os.Getenv("BITGO_SCHED_HETERO") != "1" {
		t.Skip("set BITGO_SCHED_HETERO=1 to run")
	}
	p := newTestPool(t, Default())
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
