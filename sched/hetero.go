package sched

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"
)

// Workload is the parallel call HeteroBench repeats. The engine can plug
// in its real GEMV here (one call = one layer's GEMV, split by row
// blocks); NewGEMVLike is a memory-bound stand-in.
type Workload interface {
	// Blocks is the number of row blocks in one call.
	Blocks() int
	// Bytes is the number of weight bytes one call reads (0 if unknown).
	Bytes() int64
	// Do processes row blocks [lo, hi) of call number call on worker w.
	// Calls may rotate over several weight sets (call selects one).
	Do(call, worker, lo, hi int)
}

// GEMVLike reads 2-bit weights like a GEMV of rows x cols does (cols/4 bytes
// per row, bm rows per block, each block one contiguous stream) and does a
// little integer arithmetic per 8 bytes, with no activation vector. It
// rotates over copies weight sets so that a working set larger than the
// last-level cache makes calls come from DRAM.
type GEMVLike struct {
	rows, cols, bm int
	blockWords     int        // uint64 words per row block
	sets           [][]uint64 // copies of the weights
	acc            []paddedSum
}

type paddedSum struct {
	v uint64
	_ [56]byte
}

// NewGEMVLike allocates copies weight sets of rows x cols 2-bit weights in
// blocks of bm rows. rows must be a multiple of bm and cols of 32.
func NewGEMVLike(rows, cols, bm, copies int) (*GEMVLike, error) {
	if rows <= 0 || cols <= 0 || bm <= 0 || copies <= 0 || rows%bm != 0 || cols%32 != 0 {
		return nil, fmt.Errorf("%w: GEMVLike(rows=%d, cols=%d, bm=%d, copies=%d): want positive sizes, rows a multiple of bm, cols of 32",
			ErrConfig, rows, cols, bm, copies)
	}
	g := &GEMVLike{rows: rows, cols: cols, bm: bm, blockWords: bm * cols / 32, acc: make([]paddedSum, MaxThreads)}
	words := rows * cols / 32
	x := uint64(0x9e3779b97f4a7c15)
	for range copies {
		w := make([]uint64, words)
		for i := range w {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			w[i] = x
		}
		g.sets = append(g.sets, w)
	}
	return g, nil
}

// Blocks returns rows/bm.
func (g *GEMVLike) Blocks() int { return g.rows / g.bm }

// Bytes returns rows*cols/4.
func (g *GEMVLike) Bytes() int64 { return int64(g.rows) * int64(g.cols) / 4 }

// Do reads the row blocks [lo, hi) of weight set call%copies.
func (g *GEMVLike) Do(call, worker, lo, hi int) {
	w := g.sets[call%len(g.sets)][lo*g.blockWords : hi*g.blockWords]
	// One AND and one add per 8 bytes: light enough that the loop waits
	// on memory, not on arithmetic.
	const m = 0x5555555555555555
	var s0, s1, s2, s3 uint64
	for i := 0; i+4 <= len(w); i += 4 {
		s0 += w[i] & m
		s1 += w[i+1] & m
		s2 += w[i+2] & m
		s3 += w[i+3] & m
	}
	g.acc[worker%len(g.acc)].v += s0 + s1 + s2 + s3
}

// HeteroConfig configures HeteroBench. Zero fields take the defaults
// noted.
type HeteroConfig struct {
	Class    Class         // ratio class used for the dynamic calls; "heterobench"
	LoadCore int           // core the competing process is pinned to; 0 means the last worker's core (use -1 for core 0)
	Busy     time.Duration // load busy time per cycle; 1 ms
	Idle     time.Duration // load sleep time per cycle; 1 ms
	Slice    time.Duration // time slice the load requests (Linux 6.12+); 0 = the kernel's default
	Warmup   int           // dynamic calls without load before anything is measured; 50
	Rounds   int           // rounds per comparison, each one dynamic and one static batch, alternating which goes first; 10
	Batch    int           // calls per batch; 20
	Phase    int           // calls traced after the load starts and after it stops; 60
	Tol      float64       // convergence tolerance, relative; 0.05
}

func (c HeteroConfig) withDefaults() HeteroConfig {
	if c.Class == "" {
		c.Class = "heterobench"
	}
	if c.Busy == 0 {
		c.Busy = time.Millisecond
	}
	if c.Idle == 0 {
		c.Idle = time.Millisecond
	}
	if c.Warmup == 0 {
		c.Warmup = 50
	}
	if c.Rounds == 0 {
		c.Rounds = 10
	}
	if c.Batch == 0 {
		c.Batch = 20
	}
	if c.Phase == 0 {
		c.Phase = 60
	}
	if c.Tol == 0 {
		c.Tol = 0.05
	}
	return c
}

// Comparison is the throughput of the three ways to split a call, in one
// condition (with or without the competing load).
type Comparison struct {
	// Median time per call of each way: the static equal split, the
	// dynamic ratios alone (Luo et al.), the dynamic ratios with stealing,
	// and for reference the caller alone (no parallelism: what one core
	// reaches when the other is lost entirely).
	Static, Dynamic, Steal, Alone time.Duration
	// Speedups over the static split: the median over rounds of (static
	// batch time / other batch time); each round runs one batch of each,
	// back to back, in rotating order.
	DynamicSpeedup, StealSpeedup float64
}

// Convergence describes how the ratios of one split mode settle after the
// load starts or stops.
type Convergence struct {
	// Settled is the per-worker median of the ratios over the second half
	// of the phase.
	Settled []float64
	// Calls until every worker's ratio is within Tol of Settled: First
	// for the first time, Window for 5 calls in a row, ForGood for the
	// rest of the phase. -1: never.
	First, Window, ForGood int
	// Spread is the per-call noise of the settled ratios: the largest,
	// over workers, median absolute deviation from Settled in the second
	// half, relative to Settled. When it exceeds Tol, ForGood (and maybe
	// Window) cannot be met however fast the filter is.
	Spread float64
	// Trace holds the ratios after each call of the phase.
	Trace [][]float64
}

// HeteroResult is what HeteroBench measured.
type HeteroResult struct {
	LoadCore     int
	LoadCPUShare float64 // CPU time / wall time of the load process
	// ForeignCPU is how many cores' worth of CPU other processes used
	// during the benchmark, StolenCPU how many the hypervisor took: the
	// figures mean little unless both are near 0 (-1: unknown).
	ForeignCPU, StolenCPU float64
	NoLoad                Comparison // sanity check: speedups should be about 1
	Loaded                Comparison // the figure of merit
	// Convergence after the load starts and after it stops, for the
	// dynamic split without and with stealing (their calls interleave; each
	// keeps its own ratios).
	StartDynamic, StartSteal, StopDynamic, StopSteal Convergence
}

func (r HeteroResult) String() string {
	conv := func(c Convergence) string {
		return fmt.Sprintf("settles at %s (noise %.1f%%), within 5%% after %d calls, 5 in a row after %d, for good after %d",
			fmtRatios(c.Settled), 100*c.Spread, c.First, c.Window, c.ForGood)
	}
	return fmt.Sprintf("load on core %d (%.0f%% CPU); other processes used %.2f cores, steal %.2f\n"+
		"  loaded:   static %.3f ms/call, dynamic %.3f (%.2fx), dynamic+steal %.3f (%.2fx); one thread alone %.3f\n"+
		"  unloaded: static %.3f ms/call, dynamic %.3f (%.2fx), dynamic+steal %.3f (%.2fx); one thread alone %.3f\n"+
		"  dynamic       load start: %s\n"+
		"                load stop:  %s\n"+
		"  dynamic+steal load start: %s\n"+
		"                load stop:  %s",
		r.LoadCore, 100*r.LoadCPUShare, r.ForeignCPU, r.StolenCPU,
		ms(r.Loaded.Static), ms(r.Loaded.Dynamic), r.Loaded.DynamicSpeedup, ms(r.Loaded.Steal), r.Loaded.StealSpeedup, ms(r.Loaded.Alone),
		ms(r.NoLoad.Static), ms(r.NoLoad.Dynamic), r.NoLoad.DynamicSpeedup, ms(r.NoLoad.Steal), r.NoLoad.StealSpeedup, ms(r.NoLoad.Alone),
		conv(r.StartDynamic), conv(r.StopDynamic), conv(r.StartSteal), conv(r.StopSteal))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func fmtRatios(r []float64) string {
	s := "["
	for i, v := range r {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%.3f", v)
	}
	return s + "]"
}

// HeteroBench measures the dynamic partitioner against the static equal
// split when one core is shared with another process: it starts a
// competing process pinned to cfg.LoadCore that is busy cfg.Busy and idle
// cfg.Idle in a loop, and runs the workload through the pool three ways:
// static (p.Run over an equal Partition), dynamic (Split's ratios without
// stealing, class cfg.Class+"/dynamic") and dynamic with stealing (class
// cfg.Class+"/steal"). It always kills the load before it returns, on
// every path.
//
// The pool must have at least two pinned workers and must not be Static.
// Other callers of the pool during the benchmark disturb it.
func HeteroBench(ctx context.Context, p *Pool, w Workload, cfg HeteroConfig) (res HeteroResult, err error) {
	cfg = cfg.withDefaults()
	cores := p.WorkerCores()
	if p.Threads() < 2 || p.cfg.Static || cores[len(cores)-1] < 0 {
		return res, fmt.Errorf("%w: HeteroBench needs a dynamic pool with at least 2 workers, pinned (Threads=%d Static=%v cores=%v pin error: %v)",
			ErrConfig, p.Threads(), p.cfg.Static, cores, p.PinErr())
	}
	switch {
	case cfg.LoadCore == 0:
		cfg.LoadCore = cores[len(cores)-1]
	case cfg.LoadCore == -1:
		cfg.LoadCore = 0
	}
	res.LoadCore = cfg.LoadCore
	blocks := w.Blocks()
	ones := make([]float64, p.Threads())
	for i := range ones {
		ones[i] = 1
	}
	dynClass, stealClass := cfg.Class+"/dynamic", cfg.Class+"/steal"
	for _, c := range []Class{dynClass, stealClass} {
		if err := p.SetRatios(c, ones); err != nil {
			return res, err
		}
	}
	equal := Partition(nil, blocks, ones)

	call := 0
	static := func() error {
		c := call
		call++
		return p.Run(func(worker int) {
			if lo, hi := equal[worker], equal[worker+1]; lo < hi {
				w.Do(c, worker, lo, hi)
			}
		})
	}
	dynamic := func(class Class, steal bool) func() error {
		return func() error {
			c := call
			call++
			return p.split(class, blocks, func(worker, lo, hi int) { w.Do(c, worker, lo, hi) }, steal)
		}
	}
	alone := func() error {
		c := call
		call++
		w.Do(c, 0, 0, blocks)
		return nil
	}
	modes := []func() error{static, dynamic(dynClass, false), dynamic(stealClass, true), alone}
	batch := func(f func() error) (time.Duration, error) {
		t0 := time.Now()
		for range cfg.Batch {
			if err := f(); err != nil {
				return 0, err
			}
		}
		return time.Since(t0), ctx.Err()
	}
	compare := func() (Comparison, error) {
		var times [4][]time.Duration
		var dynUp, stealUp []float64
		for r := range cfg.Rounds {
			var d [4]time.Duration
			for k := range 4 {
				m := (r + k) % 4
				var err error
				if d[m], err = batch(modes[m]); err != nil {
					return Comparison{}, err
				}
				times[m] = append(times[m], d[m])
			}
			dynUp = append(dynUp, d[0].Seconds()/d[1].Seconds())
			stealUp = append(stealUp, d[0].Seconds()/d[2].Seconds())
		}
		n := time.Duration(cfg.Batch)
		return Comparison{
			Static: medianDur(times[0]) / n, Dynamic: medianDur(times[1]) / n, Steal: medianDur(times[2]) / n,
			Alone:          medianDur(times[3]) / n,
			DynamicSpeedup: median(dynUp), StealSpeedup: median(stealUp),
		}, nil
	}
	trace := func() (dyn, steal Convergence, err error) {
		for range cfg.Phase {
			if err := modes[1](); err != nil {
				return dyn, steal, err
			}
			dyn.Trace = append(dyn.Trace, p.Ratios(dynClass))
			if err := modes[2](); err != nil {
				return dyn, steal, err
			}
			steal.Trace = append(steal.Trace, p.Ratios(stealClass))
		}
		return convergence(dyn.Trace, cfg.Tol), convergence(steal.Trace, cfg.Tol), ctx.Err()
	}

	begin := takeCPUSnapshot()
	defer func() { res.ForeignCPU, res.StolenCPU = foreignCPU(begin, takeCPUSnapshot()) }()
	for range cfg.Warmup {
		for _, m := range modes[:3] {
			if err := m(); err != nil {
				return res, err
			}
		}
	}
	if res.NoLoad, err = compare(); err != nil {
		return res, err
	}

	// The load's Pdeathsig is tied to the thread that starts it: keep this
	// goroutine on that thread until the load is gone.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	maxLife := 10*time.Minute + time.Duration(cfg.Rounds*cfg.Batch*6+cfg.Phase*4)*time.Second/10
	load, err := startLoad(cfg.LoadCore, cfg.Busy, cfg.Idle, cfg.Slice, maxLife)
	if err != nil {
		return res, err
	}
	defer load.stop()
	if res.StartDynamic, res.StartSteal, err = trace(); err != nil {
		return res, err
	}
	if res.Loaded, err = compare(); err != nil {
		return res, err
	}
	load.stop()
	res.LoadCPUShare = load.share
	if res.StopDynamic, res.StopSteal, err = trace(); err != nil {
		return res, err
	}
	return res, nil
}

// convergence summarises a ratio trace (see Convergence).
func convergence(tr [][]float64, tol float64) Convergence {
	c := Convergence{Trace: tr, First: -1, Window: -1, ForGood: -1}
	if len(tr) == 0 {
		return c
	}
	n := len(tr[0])
	c.Settled = make([]float64, n)
	for i := range n {
		var col []float64
		for _, r := range tr[len(tr)/2:] {
			col = append(col, r[i])
		}
		c.Settled[i] = median(col)
		for k := range col {
			col[k] = math.Abs(col[k]-c.Settled[i]) / c.Settled[i]
		}
		c.Spread = max(c.Spread, median(col))
	}
	in := make([]bool, len(tr))
	for k, r := range tr {
		in[k] = true
		for i := range n {
			if math.Abs(r[i]-c.Settled[i]) > tol*c.Settled[i] {
				in[k] = false
			}
		}
	}
	for k := range in {
		if in[k] {
			c.First = k + 1
			break
		}
	}
	for k := 0; k+5 <= len(in); k++ {
		if !slices.Contains(in[k:k+5], false) {
			c.Window = k + 1
			break
		}
	}
	for k := len(in) - 1; k >= 0 && in[k]; k-- {
		c.ForGood = k + 1
	}
	return c
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianDur(v []time.Duration) time.Duration {
	f := make([]float64, len(v))
	for i, d := range v {
		f[i] = float64(d)
	}
	return time.Duration(median(f))
}
