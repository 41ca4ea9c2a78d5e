package engine

import (
	"context"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"bitgo/kernels"
	"bitgo/quantcfg"
	"bitgo/sched"
)

// gemvWorkload is a stream of real 4096x14336 GEMVs (the kernel dispatch picks on this
// CPU) rotating over enough distinct layers that the weights come from DRAM.
type gemvWorkload struct {
	layers []*kernels.Layer
	kern   kernels.Kernel
	acts   kernels.Acts
	out    []float32
}

func newGEMVWorkload(t testing.TB, f quantcfg.Format, m, k, sets int) *gemvWorkload {
	rng := rand.New(rand.NewPCG(1, 2))
	w := &gemvWorkload{out: make([]float32, m)}
	for i := 0; i < sets; i++ {
		s := randLayer(rng, "", f, m, k, false)
		blob, err := kernels.PackNew(f, m, k, *s.Weights)
		if err != nil {
			t.Fatal(err)
		}
		l, err := kernels.NewLayer(s.LayerSpec, blob, s.Scales, nil)
		if err != nil {
			t.Fatal(err)
		}
		w.layers = append(w.layers, l)
	}
	x := make([]float32, k)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	var err error
	if w.kern, err = kernels.Select(w.layers[0], 1); err != nil {
		t.Fatal(err)
	}
	if err := w.layers[0].Quantize(x, 1, &w.acts); err != nil {
		t.Fatal(err)
	}
	// Every set has the same shape and activations, so one Prepare serves all calls.
	w.kern.Prepare(w.layers[0], &w.acts)
	return w
}

func (w *gemvWorkload) Blocks() int  { return w.layers[0].Layout.RowBlocks() }
func (w *gemvWorkload) Bytes() int64 { return int64(w.layers[0].Layout.Bytes()) }
func (w *gemvWorkload) Do(call, _, lo, hi int) {
	w.kern.Run(w.layers[call%len(w.layers)], &w.acts, lo, hi, w.out)
}

// TestHeteroGEMV is issue 3's heterogeneous-core measurement with the real kernels: a
// stream of 4096x14336 GEMVs (i2s by default) on the pinned pool while a second process
// keeps one core about half busy (pinned there), dynamic partitioner vs static split.
//
//	BITGO_ENGINE_HETERO=1 go test -run TestHeteroGEMV -v ./engine
//
// Optional: BITGO_ENGINE_HETERO_FORMAT (i2s), _BUSY and _IDLE (the load's duty cycle,
// 1ms/1ms).
func TestHeteroGEMV(t *testing.T) {
	if os.Getenv("BITGO_ENGINE_HETERO") != "1" {
		t.Skip("set BITGO_ENGINE_HETERO=1 to run (starts a competing process, ~1 min)")
	}
	f := quantcfg.I2S
	if v := os.Getenv("BITGO_ENGINE_HETERO_FORMAT"); v != "" {
		var err error
		if f, err = quantcfg.ParseFormat(v); err != nil {
			t.Fatal(err)
		}
	}
	var cfg sched.HeteroConfig
	for env, dst := range map[string]*time.Duration{"BITGO_ENGINE_HETERO_BUSY": &cfg.Busy, "BITGO_ENGINE_HETERO_IDLE": &cfg.Idle} {
		if v := os.Getenv(env); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatal(err)
			}
			*dst = d
		}
	}
	w := newGEMVWorkload(t, f, 4096, 14336, 8)
	pool, err := sched.New(sched.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if pool.Threads() < 2 {
		t.Skip("needs two cores")
	}
	cfg.Class = sched.Class("hetero/" + w.kern.Name())
	res, err := sched.HeteroBench(context.Background(), pool, w, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s 4096x14336 GEMV, kernel %s, %.1f MiB per call, %d weight sets:\n%v", f, w.kern.Name(), float64(w.Bytes())/(1<<20), len(w.layers), res)
}
