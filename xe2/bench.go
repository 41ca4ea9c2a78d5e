package xe2

import (
	"fmt"
	"math/rand/v2"
	"sort"

	"bitgo/quantcfg"
)

// BenchOptions say what Bench measures.
type BenchOptions struct {
	Shapes [][2]int // {M, K}
	Tokens []int
	Act    quantcfg.ActMode
	Scale  quantcfg.ScaleGran
	Iters  int
	// WorkingSet as in TuneOptions: the rotating weight sets' total size.
	WorkingSet int64
}

// BenchResult is one shape and token count.
type BenchResult struct {
	M, K, N int
	Tile    string  `json:"tile"`
	Micros  float64 `json:"us"`
	GBps    float64 `json:"gbps"`
	TOPS    float64 `json:"tops"`
	// Roofline is the attainable TOPS for this arithmetic intensity:
	// min(peak int8, intensity x measured read bandwidth); Pct is TOPS / Roofline.
	Roofline float64 `json:"roofline_tops"`
	Pct      float64 `json:"pct_roofline"`
}

// ReadBandwidth measures the device's read bandwidth in GB/s on a buffer of size bytes
// (median of iters reads).
func (d *Device) ReadBandwidth(size, iters int) (float64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k, err := d.kernel("probe.cl", "xe2_read_bw", "")
	if err != nil {
		return 0, err
	}
	size = size &^ 15
	src, err := clCreateBuffer(d.ctx, clMemReadOnly, size, nil)
	if err != nil {
		return 0, err
	}
	defer clReleaseMem(src)
	if err := clFill(d.queue, src, []byte{1, 2, 3, 4}, 0, size); err != nil {
		return 0, err
	}
	items := max(64, min(1<<16, 64*max(1, d.Info.ComputeUnits)*8))
	items = roundUp(items, 64)
	out, err := clCreateBuffer(d.ctx, clMemReadWrite, 4*items, nil)
	if err != nil {
		return 0, err
	}
	defer clReleaseMem(out)
	if err := setArgs(k, src, out, int32(size/16)); err != nil {
		return 0, err
	}
	var times []float64
	for i := 0; i < iters+1; i++ {
		ev, err := clEnqueue(d.queue, k, []int{items}, []int{64}, true)
		if err != nil {
			return 0, err
		}
		s, e, err := clEventTimes(ev)
		clReleaseEvent(ev)
		if err != nil {
			return 0, err
		}
		if i > 0 {
			times = append(times, float64(e-s))
		}
	}
	sort.Float64s(times)
	return float64(size) / times[len(times)/2], nil
}

// defaultRun fills what Bench and Tune share when left zero: 20 timed calls, per-token
// activations, per-row scales.
func defaultRun(iters *int, act *quantcfg.ActMode, scale *quantcfg.ScaleGran) {
	if *iters <= 0 {
		*iters = 20
	}
	if act.IsZero() {
		*act = quantcfg.PerToken
	}
	if scale.IsZero() {
		*scale = quantcfg.PerRowScale
	}
}

// Bench times every shape and token count with the tiles Forward would choose (the tune
// table's winners when loaded, else the heuristic), on rotating weight sets larger than
// the device cache, and relates them to the device's roofline. bw is the read bandwidth
// in GB/s (ReadBandwidth).
func Bench(d *Device, o BenchOptions, bw float64) ([]BenchResult, error) {
	defaultRun(&o.Iters, &o.Act, &o.Scale)
	peak := d.Info.PeakInt8TOPS()
	rng := rand.New(rand.NewPCG(5, 6))
	var out []BenchResult
	for _, sh := range o.Shapes {
		spec := quantcfg.LayerSpec{Name: fmt.Sprintf("bench-%dx%d", sh[0], sh[1]), Format: quantcfg.Int2,
			Out: sh[0], In: sh[1], Act: o.Act, Scale: o.Scale}
		if err := spec.WithDefaults().Validate(); err != nil {
			return out, fmt.Errorf("bench: %w", err)
		}
		layers, err := rotatingLayers(d, spec, rng, o.WorkingSet)
		if err != nil {
			return out, err
		}
		for _, n := range o.Tokens {
			x := f32bytes(RandomActs(rng, n, spec.In))
			y := make([]byte, 4*n*spec.Out)
			d.mu.Lock()
			tile := layers[0].l.chooseTile(n)
			d.mu.Unlock()
			var times []float64
			for i := 0; i < o.Iters+1; i++ {
				ns, err := layers[i%len(layers)].l.ForwardTile(tile, quantcfg.DTypeF32, x, n, y, true)
				if err != nil {
					freeAll(layers)
					return out, err
				}
				if i > 0 {
					times = append(times, float64(ns))
				}
			}
			sort.Float64s(times)
			ns := times[len(times)/2]
			bytes := float64(layers[0].l.WeightBytes())
			ops := 2 * float64(spec.Out) * float64(spec.In) * float64(n)
			r := BenchResult{M: spec.Out, K: spec.In, N: n, Tile: tile.String(), Micros: ns / 1e3,
				GBps: bytes / ns, TOPS: ops / ns / 1e3}
			if bw > 0 {
				r.Roofline = ops / bytes * bw / 1e3
				if peak > 0 {
					r.Roofline = min(r.Roofline, peak)
				}
				r.Pct = 100 * r.TOPS / r.Roofline
			}
			out = append(out, r)
		}
		freeAll(layers)
	}
	return out, nil
}
