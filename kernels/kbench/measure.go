package kbench

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"bitgo/kernels"
	"bitgo/quantcfg"
)

// Set is a rotation of distinct layers of one format and shape, together at least a given
// size, carved from one Mem.
type Set struct {
	Format quantcfg.Format
	Shape  Shape
	Layers []*kernels.Layer
	mem    *Mem
}

// WorkingSet is the bytes of weights the rotation touches.
func (s *Set) WorkingSet() int { return len(s.Layers) * s.Layers[0].Layout.Bytes() }

// Free releases the weights.
func (s *Set) Free() { s.mem.Free() }

// NewSet makes enough layers of format f and shape sh to total at least minBytes (at least
// one), with random valid weights, default settings and random positive scales.
func NewSet(f quantcfg.Format, sh Shape, minBytes int, seed uint64) (*Set, error) {
	spec := quantcfg.LayerSpec{Name: fmt.Sprintf("bench_%s_%s", f, sh), Format: f, Out: sh.M, In: sh.K}.WithDefaults()
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	ly, err := kernels.NewLayout(f, sh.M, sh.K)
	if err != nil {
		return nil, err
	}
	per := ly.Bytes()
	count := max(1, (minBytes+per-1)/per)
	mem, err := Alloc(count * per)
	if err != nil {
		return nil, err
	}
	first := mem.B[:per]
	RandomBlob(f, ly, first, seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	scales := make([]float32, spec.NumScales())
	for i := range scales {
		scales[i] = float32(0.01 + rng.Float64())
	}
	s := &Set{Format: f, Shape: sh, mem: mem}
	for i := 0; i < count; i++ {
		blob := mem.B[i*per : (i+1)*per]
		if i > 0 {
			copy(blob, first)
		}
		l, err := kernels.NewLayer(spec, blob, scales, nil)
		if err != nil {
			mem.Free()
			return nil, err
		}
		s.Layers = append(s.Layers, l)
	}
	return s, nil
}

// Timing is one measured configuration.
type Timing struct {
	Impl    string
	NsPerOp float64 // median over the clean trials
	BestNs  float64
	BytesOp int     // weight bytes per call
	GBps    float64 // weight bytes per second at the median
	Trials  int
	Clean   int // trials in which the process had its CPUs (the median is over these)
}

// Runner runs GEMVs (or GEMMs) of a Set on a Pool: activations quantized once per call
// site, then per layer the kernel's Prepare and a static split of the row blocks.
type Runner struct {
	Pool *Pool
	Set  *Set
	N    int
	k    kernels.Kernel
	acts kernels.Acts
	out  []float32
}

// NewRunner selects the kernel for n tokens and quantizes random activations.
func NewRunner(p *Pool, s *Set, n int, seed uint64) (*Runner, error) {
	l := s.Layers[0]
	k, err := kernels.Select(l, n)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 5))
	x := make([]float32, n*l.Layout.K)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	r := &Runner{Pool: p, Set: s, N: n, k: k, out: make([]float32, n*l.Layout.M)}
	if err := l.Quantize(x, n, &r.acts); err != nil {
		return nil, err
	}
	return r, nil
}

// Impl is the kernel's name.
func (r *Runner) Impl() string { return r.k.Name() }

// Call runs layer i once (Prepare, then the row blocks split over the pool).
func (r *Runner) Call(i int) {
	l := r.Set.Layers[i%len(r.Set.Layers)]
	r.k.Prepare(l, &r.acts)
	nrb := l.Layout.RowBlocks()
	r.Pool.Run(func(w int) {
		lo, hi := Split(nrb, r.Pool.Threads(), w)
		r.k.Run(l, &r.acts, lo, hi, r.out)
	})
}

// Warm calls every layer of the rotation once: the first call on a layer grows the scratch
// and builds the layer's per-layer data (scales per row block, padded bias), which a timing
// must not include.
func (r *Runner) Warm() {
	for i := range r.Set.Layers {
		r.Call(i)
	}
}

// Measure times rounds of calls over the whole rotation (each round at least minTime)
// and returns the median time per call over the clean rounds (see Clean) and the best.
func (r *Runner) Measure(rounds int, minTime time.Duration) Timing {
	return Interleaved([]*Runner{r}, rounds, minTime)[0]
}

// Interleaved measures several runners round by round, one round of each in turn (each at
// least minTime over its whole rotation), so that the machine's drift during the run
// reaches all of them alike and their ratios hold; it returns each runner's Timing.
func Interleaved(rs []*Runner, rounds int, minTime time.Duration) []Timing {
	for _, r := range rs {
		r.Warm()
	}
	all, clean := make([][]float64, len(rs)), make([][]float64, len(rs))
	for rd := 0; rd < rounds; rd++ {
		for j, r := range rs {
			ns, ok := r.trial(minTime)
			all[j] = append(all[j], ns)
			if ok {
				clean[j] = append(clean[j], ns)
			}
		}
	}
	out := make([]Timing, len(rs))
	for j, r := range rs {
		out[j] = r.timing(all[j], clean[j])
	}
	return out
}

// trial times calls over the whole rotation, repeated until minTime has passed: the time per
// call, and whether the process had its CPUs throughout.
func (r *Runner) trial(minTime time.Duration) (float64, bool) {
	n, calls := 0, len(r.Set.Layers)
	tr := StartTrial()
	for {
		for i := 0; i < calls; i++ {
			r.Call(n + i)
		}
		n += calls
		if tr.Elapsed() >= minTime {
			break
		}
	}
	wall, ok := tr.Stop(r.Pool.Threads())
	return float64(wall.Nanoseconds()) / float64(n), ok
}

// timing is the Timing of a runner's rounds: the median of the clean ones (the least
// disturbed round when none was clean), and the best of all.
func (r *Runner) timing(all, clean []float64) Timing {
	sort.Float64s(all)
	best := all[0]
	if len(clean) == 0 {
		clean = all[:1] // every round was disturbed: the best is the least disturbed
	}
	sort.Float64s(clean)
	med := clean[len(clean)/2]
	by := r.Set.Layers[0].Layout.Bytes()
	return Timing{Impl: r.Impl(), NsPerOp: med, BestNs: best, BytesOp: by, GBps: float64(by) / med, Trials: len(all), Clean: len(clean)}
}
