package kbench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"bitgo/kernels"
	"bitgo/quantcfg"
)

// Set is a rotation of distinct layers of one format and shape, together at least a given
// size (at most MaxSetLayers of them), carved from one Mem.
type Set struct {
	Format quantcfg.Format
	Shape  Shape
	Layers []*kernels.Layer
	mem    *Mem
	want   int // NewSet's minBytes
}

// MaxSetLayers bounds a rotation's layers. A tiny shape would otherwise take millions of
// them to reach SetBytes (a 3x3 tl2 blob is 32 bytes: 16.8 million layers, each with its
// Go structures, which took minutes and gigabytes before the first call); its set then
// stays below the size asked for (Short), and its calls partly find their weights in cache.
// Every blob of at least SetBytes/MaxSetLayers (32 KiB) still gets its full rotation: a
// 2560x2560 tl2 blob is 1.4 MB.
const MaxSetLayers = 1 << 14

// WorkingSet is the bytes of weights the rotation touches.
func (s *Set) WorkingSet() int { return len(s.Layers) * s.Layers[0].Layout.Bytes() }

// Short tells whether the rotation is smaller than NewSet was asked for: its shape's blob
// is below minBytes/MaxSetLayers.
func (s *Set) Short() bool { return s.WorkingSet() < s.want }

// Free releases the weights.
func (s *Set) Free() { s.mem.Free() }

// NewSet makes enough layers of format f and shape sh to total at least minBytes (at least
// one, at most MaxSetLayers), with random valid weights, default settings and random
// positive scales.
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
	count := min(MaxSetLayers, max(1, (minBytes+per-1)/per))
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
	s := &Set{Format: f, Shape: sh, mem: mem, want: minBytes}
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
	// With a read buffer (Interleaved): the read rate around each trial, bytes per second
	// (median over the rounds counted), and the GEMV's rate as a share of it, in percent:
	// the median over the rounds of the trial's rate over the mean of the read rates just
	// before and just after it, so a drift in the memory's speed reaches the GEMV and its
	// roofline alike. Which rounds count: againstReads.
	ReadBps float64
	RoofPct float64
	// RoofRounds: how many rounds ReadBps and RoofPct were taken over.
	RoofRounds int
	// ComputeScale, with a read buffer and its probe (Reads.Probe): the median over the
	// rounds of the mean of the probe's scales just before and just after the trial, of the
	// rounds where both gave one (0 without a probe, or where none did).
	ComputeScale float64
	// Rounds is the time per call of each round in order, and Cleans whether the process had
	// its CPUs throughout it (the median is over those rounds; Interleaved: round i of every
	// runner is one round).
	Rounds []float64
	Cleans []bool
}

// counted returns the rounds 0..n-1 a paired figure is taken over: those for which the
// first of the predicates that holds for any round holds, or all rounds when none does.
func counted(n int, preds ...func(i int) bool) []int {
	for _, p := range preds {
		var rds []int
		for i := range n {
			if p(i) {
				rds = append(rds, i)
			}
		}
		if len(rds) > 0 {
			return rds
		}
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	return all
}

// RoundRatio is a's time over b's, runners of one Interleaved measurement paired round by
// round: the median over the rounds clean in both (over all rounds when none is).
func RoundRatio(a, b Timing) float64 {
	n := min(len(a.Rounds), len(b.Rounds))
	if n == 0 {
		return 0
	}
	var rs []float64
	for _, i := range counted(n, func(i int) bool { return a.Cleans[i] && b.Cleans[i] }) {
		rs = append(rs, a.Rounds[i]/b.Rounds[i])
	}
	return Median(rs)
}

// Runner runs GEMVs (or GEMMs) of a Set on a Pool: activations quantized once per call
// site, then per layer the kernel's Prepare and a static split of its work (kernels.RunSplit).
type Runner struct {
	Pool *Pool
	Set  *Set
	N    int
	// Tuning, when Tuned, is the kernels' tuning every call of this runner switches to
	// (kernels.SwitchTuning), so runners of several tunings can be measured in the same
	// rounds (`bitd bench --tuning`). The caller restores the tuning afterwards.
	Tuning kernels.Tuning
	Tuned  bool
	k      kernels.Kernel
	acts   kernels.Acts
	out    []float32
	// The split in flight (units, fn) and the functions that run it, made once: a closure
	// made per call would cost an allocation, and the worker a read of memory the caller
	// has only just written.
	units    int
	fn       func(w, lo, hi int)
	share    func(w int)
	splitter kernels.Splitter
}

// NewRunner selects the kernel for n tokens and quantizes random activations.
func NewRunner(p *Pool, s *Set, n int, seed uint64) (*Runner, error) {
	k, err := kernels.Select(s.Layers[0], n)
	if err != nil {
		return nil, err
	}
	return newRunner(p, s, n, seed, k)
}

// NewReadRunner returns a runner whose calls read each layer's blob and compute nothing
// (kernel "read") with loop: the same rotation, calls and split over the pool as a GEMV's,
// each worker reading a contiguous share of the blob in proportion to its row blocks. Its rate
// is the most a GEMV call of that size can reach on this machine: what a call loses beyond
// it is the kernel's, not the memory's. (What the calls lose against one long read is not
// their streams' start: each worker prefetching 4, 16 or 64 KiB of its share of the next
// layer as its call ended read 0.98-1.005x as fast; i2s blobs of 2560x2560, 3840x2560 and
// 2560x6912, one and two threads, nine rounds in turn.)
func NewReadRunner(p *Pool, s *Set, seed uint64, loop kernels.ReadLoop) (*Runner, error) {
	return newRunner(p, s, 1, seed, readKernel{loop})
}

func newRunner(p *Pool, s *Set, n int, seed uint64, k kernels.Kernel) (*Runner, error) {
	l := s.Layers[0]
	rng := rand.New(rand.NewPCG(seed, 5))
	x := make([]float32, n*l.Layout.K)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	r := &Runner{Pool: p, Set: s, N: n, k: k, out: make([]float32, n*l.Layout.M)}
	r.share = func(w int) {
		if lo, hi := Split(r.units, r.Pool.Threads(), w); lo < hi {
			r.fn(w, lo, hi)
		}
	}
	r.splitter = r.split
	if err := l.Quantize(x, n, &r.acts); err != nil {
		return nil, err
	}
	return r, nil
}

// Impl is the kernel's name, with "+amx" where it runs the set's layers at N tokens on AMX
// tiles (kernels.OnAMX).
func (r *Runner) Impl() string {
	if kernels.OnAMX(r.k, r.Set.Layers[0], r.N) {
		return r.k.Name() + "+amx"
	}
	return r.k.Name()
}

// Call runs layer i once (Prepare, then the row blocks split over the pool).
func (r *Runner) Call(i int) {
	if r.Tuned {
		kernels.SwitchTuning(r.Tuning)
	}
	l := r.Set.Layers[i%len(r.Set.Layers)]
	r.k.Prepare(l, &r.acts)
	kernels.RunSplit(r.k, l, &r.acts, r.out, r.Pool.Threads(), r.splitter)
}

// split is the pool as a kernels.Splitter: a static split, one range per worker. Within a
// two-thread call on the 2-vCPU Emerald Rapids guest the workers' times differ call by call
// (worker 0's over worker 1's: 0.75-0.88 at the tenth percentile, 1.03-1.27 at the
// ninetieth, by format and shape), but the engine's scheduler (package sched) did no better
// over the same rotations: its static split, its ratios and its stealing took 0.88-1.08x of
// this one's time, with no order (medians of 12 interleaved rounds: i2s, int2 and int1 on
// the 8B shapes and 2560x2560; tl2, whose tables a stolen piece would build again, 1.2-1.8x
// made to steal, which RunSplit does not let it), so the figures hold for what bitd runs.
func (r *Runner) split(_ string, units int, _ bool, fn func(w, lo, hi int)) {
	r.units, r.fn = units, fn
	r.Pool.Run(r.share)
	r.fn = nil
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
// and returns the median time per call over the clean rounds (see Cleans) and the best.
func (r *Runner) Measure(rounds int, minTime time.Duration) Timing {
	return Interleaved([]*Runner{r}, nil, rounds, minTime)[0]
}

// Reads is the roofline's reading for Interleaved: a buffer (DRAM-sized, or cache-resident
// for cache-resident runners) and the read loop (the fastest of ReadBandwidth's).
type Reads struct {
	Buf  []byte
	Loop kernels.ReadLoop
	// Probe, if not nil, runs beside every read (for a sixteenth of a trial's time): each
	// Timing then carries the sharing of the cores around its trials (ComputeScale). A
	// *CoreProbe, or anything else that returns such a scale (0: none).
	Probe interface{ Scale(time.Duration) float64 }
}

// Interleaved measures several runners round by round, one round of each in turn (each at
// least minTime over its whole rotation), so that the machine's drift during the run
// reaches all of them alike and their ratios hold; it returns each runner's Timing. With
// reads (read != nil) it also reads read.Buf with the first runner's pool before every
// trial and after the last, and each Timing carries its rate against the reads just around
// its trials (ReadBps, RoofPct): a round of a dozen runners takes most of a second, longer
// than this VM's memory keeps one speed, so reads only around whole rounds paired some
// trials with another speed.
func Interleaved(rs []*Runner, read *Reads, rounds int, minTime time.Duration) []Timing {
	for _, r := range rs {
		r.Warm()
	}
	all, cleans := make([][]float64, len(rs)), make([][]bool, len(rs))
	var rdr reader
	var reads []readTrial // reads[rd*len(rs)+j] just before runner j's trial of round rd
	var scales []float64  // the probe's beside each read
	readNow := func() {
		reads = append(reads, rdr.time(rs[0].Pool, read, minTime/readShare))
		if read.Probe != nil {
			scales = append(scales, read.Probe.Scale(minTime/probeShare))
		}
	}
	for range rounds {
		for j, r := range rs {
			if read != nil {
				readNow()
			}
			ns, ok := r.trial(minTime)
			all[j] = append(all[j], ns)
			cleans[j] = append(cleans[j], ok)
		}
	}
	if read != nil {
		readNow()
	}
	// A read under half the best of the measurement was disturbed: this VM's DRAM rate
	// drifts by up to about 1.7x, and once the reads around an i2s GEMV's counted rounds ran
	// at 4.7 GB/s against the run's 37, which put it at 656% of its roofline.
	var floor float64
	for _, rd := range reads {
		floor = max(floor, rd.bps/2)
	}
	out := make([]Timing, len(rs))
	for j, r := range rs {
		out[j] = r.timing(all[j], cleans[j])
		if read != nil {
			before, after := around(reads, len(rs), j)
			out[j].ReadBps, out[j].RoofPct, out[j].RoofRounds = againstReads(all[j], cleans[j], before, after, floor, float64(out[j].BytesOp))
			if len(scales) > 0 {
				out[j].ComputeScale = ScaleAround(scales, len(rs), j)
			}
		}
	}
	return out
}

// around returns the reads just before and just after runner j's trial of each round, of
// reads taken before every trial of runners runners per round and after the last.
func around(reads []readTrial, runners, j int) (before, after []readTrial) {
	for i := j; i+1 < len(reads); i += runners {
		before, after = append(before, reads[i]), append(after, reads[i+1])
	}
	return before, after
}

// ScaleAround is runner j's ComputeScale: the median over its rounds of the mean of the
// probe's scales just before and after its trial (rounds with a 0 left out; 0 when none is
// left), of scales taken beside reads before every trial of runners runners per round and
// after the last (one runner: a probe before each trial and one after the last).
func ScaleAround(scales []float64, runners, j int) float64 {
	var m []float64
	for i := j; i+1 < len(scales); i += runners {
		if scales[i] > 0 && scales[i+1] > 0 {
			m = append(m, (scales[i]+scales[i+1])/2)
		}
	}
	if len(m) == 0 {
		return 0
	}
	return Median(m)
}

// readShare is a trial's time over the time of each read around it.
const readShare = 4

// probeShare is a trial's time over the time of each core probe beside a read (Reads.Probe).
const probeShare = 16

// readWindow is the most of the read buffer one read pass takes: a DRAM buffer's windows
// are read in turn, so a short read is still one from DRAM (a window comes round again
// only after the rest of a ReadBytes buffer, at least three quarters of it).
const readWindow = 256 << 20

// readTrial is one timed read of a buffer: bytes per second, and whether the process had
// its CPUs throughout.
type readTrial struct {
	bps   float64
	clean bool
}

// reader reads a buffer's windows in turn (see readWindow); one reader reads one buffer.
type reader struct {
	off int
	win int // bytes per window; 0: readWindow
}

// time reads windows of rs.Buf with the pool's workers (each its contiguous share) until
// minTime has passed.
func (rd *reader) time(p *Pool, rs *Reads, minTime time.Duration) readTrial {
	buf := rs.Buf
	win := rd.win
	if win == 0 {
		win = readWindow
	}
	win = min(len(buf), win)
	bytes := 0
	tr := StartTrial()
	for {
		readOnce(p, buf[rd.off:rd.off+win], rs.Loop)
		if rd.off += win; rd.off+win > len(buf) {
			rd.off = 0
		}
		bytes += win
		if tr.Elapsed() >= minTime {
			break
		}
	}
	wall, ok := tr.Stop(p.Threads())
	return readTrial{float64(bytes) / wall.Seconds(), ok}
}

// againstReads pairs a runner's rounds (ns per call of bytes each) with the reads just
// before and after each (before[rd], after[rd]): the median read rate and the median share
// of it, in percent, and the number of rounds they were taken over: the rounds whose trial
// (clean[rd]) and both reads were clean and whose reads were at least floor bytes per second;
// when there are none, those whose reads were at least floor; when there are none, all.
func againstReads(ns []float64, clean []bool, before, after []readTrial, floor, bytes float64) (readBps, pct float64, rounds int) {
	sane := func(rd int) bool { return before[rd].bps >= floor && after[rd].bps >= floor }
	var bps, pcts []float64
	for _, rd := range counted(len(ns), func(rd int) bool { return clean[rd] && before[rd].clean && after[rd].clean && sane(rd) }, sane) {
		rb := (before[rd].bps + after[rd].bps) / 2
		bps = append(bps, rb)
		pcts = append(pcts, 100*bytes/ns[rd]*1e9/rb)
	}
	return Median(bps), Median(pcts), len(pcts)
}

// Median is the median of v (the upper one of an even count); v is left as it is.
func Median(v []float64) float64 {
	w := slices.Clone(v)
	sort.Float64s(w)
	return w[len(w)/2]
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
func (r *Runner) timing(all []float64, cleans []bool) Timing {
	best := slices.Min(all)
	var clean []float64
	for i, ok := range cleans {
		if ok {
			clean = append(clean, all[i])
		}
	}
	if len(clean) == 0 {
		clean = []float64{best} // every round was disturbed: the best is the least disturbed
	}
	med := Median(clean)
	by := r.Set.Layers[0].Layout.Bytes()
	return Timing{Impl: r.Impl(), NsPerOp: med, BestNs: best, BytesOp: by, GBps: float64(by) / med, Rounds: all, Cleans: cleans}
}

// readKernel reads the blob and computes nothing but its checksum (see NewReadRunner).
// A share's checksum (kernels.ReadBytes's, folded to 32 bits) goes to the first output of
// its first row block: the checksums XOR, so the outputs of a call hold the blob's.
type readKernel struct{ loop kernels.ReadLoop }

func (readKernel) Name() string                                    { return "read" }
func (readKernel) CanImplement(*kernels.Layer, int) (bool, string) { return true, "" }
func (readKernel) Prepare(*kernels.Layer, *kernels.Acts)           {}
func (k readKernel) Run(l *kernels.Layer, _ *kernels.Acts, rb0, rb1 int, out []float32) {
	if rb0 >= rb1 {
		return
	}
	lo, hi := blobShare(len(l.Data), l.Layout.RowBlocks(), rb0, rb1)
	out[rb0*kernels.RowBlock] = math.Float32frombits(fold32(k.loop.Read(l.Data[lo:hi])))
}

func fold32(c uint64) uint32 { return uint32(c ^ c>>32) }

// blobShare is the bytes [lo, hi) of a blob of n bytes that row blocks [rb0, rb1) of rbs
// read: their share of it, both ends rounded down to 256 bytes (kernels.ReadBytes's unit;
// the blob's last bytes below a multiple of 256 are left out), so that any split of the row
// blocks reads every one of the other bytes once.
func blobShare(n, rbs, rb0, rb1 int) (lo, hi int) {
	return (n * rb0 / rbs) &^ 255, (n * rb1 / rbs) &^ 255
}
