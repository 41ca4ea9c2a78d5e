package kernels

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	_ "unsafe" // (go:linkname)

	"bitgo/quantcfg"
)

// One-token GEMVs that have two kernels differing only in how they prefetch their weight
// stream (fmtOps.oneTuned, which leaves it to the hardware's prefetchers, and the format's
// own, which prefetches in software into L2 and L1) choose between the two as they run
// under an adaptive tuning (TuningAdapt): i2s below i2sLongK, tl2, bf16 and f32.
//
// Which of the two reads faster depends on what else uses the caches and the memory, and
// on a shared host that changes while a model serves. On the Zen 4 guest the tuning's
// kernels read 93-103% of the roofline where the host was quiet and the default's 67-84;
// with a neighbour busy in the shared L3 the order turned for some shapes (in two such
// runs of the bench, one-token i2s 14336x4096 at one thread 45-60% against the
// default's 57-71, tl2 42-59 against 52-53).
//
// The workers' pieces of such calls time themselves, one in adaptSample (and every
// probe), and keep a moving average of the time per KiB of weights for the kernel they
// ran, shared by the layers of one format and shape: a model's layers of a shape run
// alike, and a shape's calls come often enough for the averages to follow the host. The
// sites live as long as the process, one per format and shape. Every adaptProbe-th piece
// runs the other kernel (up to every adaptProbeMax-th while it does not win); a kernel is
// kept while the other's average is not adaptMargin below its own.
type oneSite struct {
	// by is the site's state by the workers of the calls (1, 2, 3, 4 or more): a piece's
	// time depends on how many others stream beside it, and a daemon's calls keep one
	// count where a benchmark changes it from trial to trial.
	by [adaptWorkers]adaptState
}

// adaptWorkers bounds the worker counts a site keeps apart.
const adaptWorkers = 4

// adaptState is a site's choice and timings for one worker count.
type adaptState struct {
	pieces atomic.Uint64
	// since counts the pieces since the last probe; every is the pieces between probes,
	// adaptProbe doubling up to adaptProbeMax while the probes do not win.
	since, every atomic.Uint32
	// won is the last probe's ns per KiB if it won (float64 bits; 0 if it did not): two
	// probes in a row that beat the kept kernel's average by adaptMargin switch the site,
	// the other kernel's average then theirs. An average that a slow spell of the host
	// left high would otherwise come down by at most a tenth a probe (adaptClip) once the
	// spell is over: the hardware-prefetch bf16 kernel of 4096x14336 at one thread (one
	// 117 MB piece a call, about ten calls a round) kept an average of 54.7 ns/KiB from
	// such a spell where it read at 35.9 in the same rounds under the zen4 tuning, and the
	// site ran the slower kernel through most of a 15-round bench: 0.74x the zen4 tuning's
	// speed. One fast probe (a piece whose weights the other worker's prefetches had
	// already brought in) still switches nothing. Such a site of few, long pieces still
	// waits for its next probe, up to adaptProbeMax pieces: a probe at least every 200 ms
	// as well cost the bf16 trials of two runs of the bench 2.5-2.7% (medians of
	// six shapes and thread counts, against 1.00 in the runs before), as the time between
	// a site's calls (the other trials, a model's other layers) set it off at most calls.
	won atomic.Uint64
	// hw is the kernel the site's pieces run: 1 oneTuned, 0 the format's own; -1 before
	// its first piece, which takes the tuning's choice.
	hw atomic.Int32
	// rate is the moving averages of ns per KiB, by kernel as hw (float64 bits; 0 before
	// a kernel's first piece).
	rate     [2]atomic.Uint64
	switches atomic.Uint64
}

const (
	// adaptProbe: a site runs the kernel it does not keep every adaptProbe-th piece after
	// a probe that won (took adaptMargin less time a KiB than the kept kernel's average),
	// twice as far apart after each that did not, up to every adaptProbeMax-th. With two
	// workers a probe's piece holds up the whole call, and the two kernels' pieces can run
	// within 10% of each other where their calls do not (tl2 2560x2560 at two threads:
	// pieces 70 and 71 ns/KiB, calls 0.92x): probes that backed off only when they lost by
	// 10% kept coming every 16th piece there (BitNet 2B's tl2 decode through the engine,
	// unpaired runs: 3-8% below zen4's; with this rule, three runs in turn alike, medians
	// 68.7 and 68.8 tokens/s). A kernel that turns faster is taken within a few hundred
	// pieces.
	adaptProbe, adaptProbeMax = 16, 128
	// adaptMargin: the other kernel's average must be this fraction below the kept one's
	// for the site to switch to it.
	adaptMargin = 0.03
	// adaptClip bounds a sample to at most average*adaptClip before it is averaged: a
	// piece whose thread lost its core for a while (3x its time) moved the kept kernel's
	// average past the other's, and a far slower kernel then ran until its own samples
	// moved it back (tl2 4096x14336 at one thread, with a neighbour streaming the L3: 0.74x
	// the zen4 kernels' time); a real change takes a few samples more (but see
	// adaptState.won).
	adaptClip = 1.25
	// adaptSample: every adaptSample-th piece of the kept kernel is timed. Two clock reads
	// take about 50 ns here (runtime.nanotime; time.Now and time.Since 80-110), 2% of a
	// piece of adaptMinBytes from DRAM.
	adaptSample = 4
)

// adaptMinBytes is the least weights a piece must read to count: smaller pieces (the
// stealing scheduler's last ones, small layers) run the kept kernel untimed, as their
// clock reads would cost more and their time tells of the fork and the caches more than
// of the stream (a variable for tests).
var adaptMinBytes = 64 << 10

type siteKey struct {
	f    quantcfg.Format
	m, k int
}

var oneSites sync.Map // siteKey -> *oneSite

// oneSiteFor returns the site of l's format and shape, nil for a format with no kernel
// pair.
func oneSiteFor(l *Layer) *oneSite {
	switch f := l.Spec.Format; {
	case f == quantcfg.I2S && l.Layout.Kp < i2sLongK, f == quantcfg.TL2, f.IsFloat():
	default:
		return nil
	}
	key := siteKey{l.Spec.Format, l.Layout.M, l.Layout.K}
	if s, ok := oneSites.Load(key); ok {
		return s.(*oneSite)
	}
	v, _ := oneSites.LoadOrStore(key, newOneSite())
	return v.(*oneSite)
}

func newOneSite() *oneSite {
	s := new(oneSite)
	for i := range s.by {
		s.by[i].hw.Store(-1)
		s.by[i].every.Store(adaptProbe)
	}
	return s
}

// at is the state for calls over workers workers (0: a Run without RunSplit, as one).
func (s *oneSite) at(workers int) *adaptState { return &s.by[min(max(workers, 1), adaptWorkers)-1] }

// oneRun is one piece's choice: its kernel, and the start of its timing (site nil: not
// timed).
type oneRun struct {
	site  *adaptState
	hw    int32
	probe bool
	bytes int
	t0    int64
}

// pick returns the kernel a piece of bytes of weights runs, hw (oneTuned) or own, and its
// oneRun; start is the tuning's choice (true: hw), which a site's first piece takes. A piece
// of less than adaptMinBytes runs the kept kernel and is neither timed nor counted; of the
// others, every adaptSample-th is timed, and the probes (every every-th).
func (s *adaptState) pick(hw, own func(*byte), start bool, bytes int) (func(*byte), oneRun) {
	cur := s.hw.Load()
	if cur < 0 {
		c := int32(0)
		if start {
			c = 1
		}
		s.hw.CompareAndSwap(-1, c)
		cur = s.hw.Load()
	}
	r := oneRun{hw: cur, bytes: bytes}
	if bytes >= adaptMinBytes {
		n := s.pieces.Add(1)
		if s.since.Add(1) >= s.every.Load() {
			s.since.Store(0)
			r.hw, r.probe = 1-cur, true
		}
		if r.probe || n%adaptSample == 0 {
			r.site, r.t0 = s, nanotime()
		}
	}
	if r.hw == 1 {
		return hw, r
	}
	return own, r
}

// done records a timed piece's time over its bytes of weights (oneSite.record).
func (r oneRun) done() {
	if r.site != nil {
		r.site.record(r.hw, r.probe, float64(nanotime()-r.t0)*1024/float64(r.bytes))
	}
}

//go:linkname nanotime runtime.nanotime
func nanotime() int64

// record adds a piece's ns per KiB on kernel hw (a probe's, or the kept kernel's) to
// its average (clipped to within adaptClip of it; two winning probes in a row replace it:
// won), sets how often the site probes, and switches the site's kernel where the other's
// average is adaptMargin below the kept one's.
func (s *adaptState) record(hw int32, probe bool, x float64) {
	a := 1.0 / 4
	if probe {
		a = 1.0 / 2
	}
	avg := x
	if old := math.Float64frombits(s.rate[hw].Load()); old != 0 {
		avg = old + a*(min(max(x, old/adaptClip), old*adaptClip)-old)
	}
	if probe {
		if kept := math.Float64frombits(s.rate[1-hw].Load()); kept > 0 && x < kept*(1-adaptMargin) {
			s.every.Store(adaptProbe)
			if prev := math.Float64frombits(s.won.Swap(math.Float64bits(x))); prev != 0 {
				avg = min(avg, (prev+x)/2) // the second win in a row
			}
		} else {
			s.every.Store(min(2*s.every.Load(), adaptProbeMax))
			s.won.Store(0)
		}
	}
	s.rate[hw].Store(math.Float64bits(avg))
	cur := s.hw.Load()
	if cur < 0 {
		return
	}
	kept, other := math.Float64frombits(s.rate[cur].Load()), math.Float64frombits(s.rate[1-cur].Load())
	if kept > 0 && other > 0 && other < kept*(1-adaptMargin) && s.hw.CompareAndSwap(cur, 1-cur) {
		s.switches.Add(1)
		s.won.Store(0) // (the probes now run the other kernel)
	}
}

// AdaptChoice is one site's state for one worker count: its format and shape, the kernel
// it keeps, its averages and how often it switched.
type AdaptChoice struct {
	Format string `json:"format"`
	M      int    `json:"m"`
	K      int    `json:"k"`
	// Threads is the workers of the calls (adaptWorkers: that many or more).
	Threads  int     `json:"threads"`
	Kernel   string  `json:"kernel"` // "hardware-prefetch" or "software-prefetch"
	HWNsKiB  float64 `json:"hw_ns_per_kib"`
	SWNsKiB  float64 `json:"sw_ns_per_kib"`
	Pieces   uint64  `json:"pieces"`
	Switches uint64  `json:"switches"`
}

// AdaptChoices lists the states that counted pieces, by format, shape and worker count.
func AdaptChoices() []AdaptChoice {
	var cs []AdaptChoice
	oneSites.Range(func(k, v any) bool {
		key := k.(siteKey)
		for i := range v.(*oneSite).by {
			s := &v.(*oneSite).by[i]
			if s.pieces.Load() == 0 {
				continue
			}
			c := AdaptChoice{Format: string(key.f), M: key.m, K: key.k, Threads: i + 1, Pieces: s.pieces.Load(), Switches: s.switches.Load(),
				HWNsKiB: math.Float64frombits(s.rate[1].Load()), SWNsKiB: math.Float64frombits(s.rate[0].Load()), Kernel: "software-prefetch"}
			if s.hw.Load() == 1 {
				c.Kernel = "hardware-prefetch"
			}
			cs = append(cs, c)
		}
		return true
	})
	slices.SortFunc(cs, func(a, b AdaptChoice) int {
		return cmp.Or(cmp.Compare(a.Format, b.Format), cmp.Compare(a.M, b.M), cmp.Compare(a.K, b.K), cmp.Compare(a.Threads, b.Threads))
	})
	return cs
}
