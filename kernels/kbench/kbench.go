// Package kbench measures the kernels of package kernels the way `bitd bench` and the
// kernels' `go test -bench` benchmarks report them: this machine's read bandwidth (the
// roofline), GEMV over distinct weight matrices whose total far exceeds the last-level
// cache (so DRAM is what is measured), a cache-resident variant, and the prefill GEMM
// against the int8 peak, and a plain read of a GEMV's weights in the same calls (what
// a call of that size can reach). Threads are a static row split over a few spinning
// goroutines, each locked to its OS thread and not pinned (the engine's scheduler is its
// own package); weights live in huge-page memory outside the Go heap, as the daemon keeps
// them.
package kbench

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/klauspost/cpuid/v2"
	"golang.org/x/sys/unix"

	"bitgo/kernels"
	"bitgo/quantcfg"
)

// Shape is a layer's output and input features.
type Shape struct{ M, K int }

func (s Shape) String() string { return fmt.Sprintf("%dx%d", s.M, s.K) }

// ParseShape reads "MxK".
func ParseShape(s string) (Shape, error) {
	a, b, ok := strings.Cut(strings.ToLower(strings.TrimSpace(s)), "x")
	m, err1 := strconv.Atoi(a)
	k, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || m < 1 || k < 1 || m > quantcfg.MaxDim || k > quantcfg.MaxDim {
		return Shape{}, fmt.Errorf("shape %q: want MxK with 1 <= M, K <= %d (for example 4096x14336)", s, quantcfg.MaxDim)
	}
	return Shape{m, k}, nil
}

// Shapes are the real-model shapes: BitNet b1.58 2B4T (2560 hidden, 6912 FFN), Falcon3-1B
// (2048 / 8192), a square 4096 and Llama-3-8B (4096 / 14336).
var Shapes = []Shape{{2560, 2560}, {6912, 2560}, {2560, 6912}, {2048, 8192}, {8192, 2048}, {4096, 4096}, {14336, 4096}, {4096, 14336}}

// Mem is page-aligned memory outside the Go heap, backed by transparent huge pages where
// the kernel allows (madvise).
type Mem struct {
	B   []byte
	raw []byte
}

// ErrMemory: an allocation is larger than the memory the system has available.
var ErrMemory = errors.New("not enough memory")

// MemAvailable is the kernel's estimate of the memory available to new allocations
// without swapping (MemAvailable in /proc/meminfo), and whether it could be read.
func MemAvailable() (int, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	for _, ln := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(ln, "MemAvailable:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// Alloc maps n bytes (2 MiB aligned, MADV_HUGEPAGE, every page touched). More than the
// system has available is refused (ErrMemory) before a page is touched: touching them
// would swap, or end the process by the kernel's OOM killer.
func Alloc(n int) (*Mem, error) {
	const huge = 2 << 20
	if avail, ok := MemAvailable(); ok && n > avail {
		return nil, fmt.Errorf("kbench: %d MiB wanted, %d MiB available (MemAvailable): %w", n>>20, avail>>20, ErrMemory)
	}
	raw, err := unix.Mmap(-1, 0, n+huge, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, fmt.Errorf("kbench: mapping %d bytes: %w", n, err)
	}
	off := (huge - int(uintptr(unsafe.Pointer(&raw[0]))%huge)) % huge
	b := raw[off : off+n]
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE) // best effort: 4 KiB pages still work
	for i := 0; i < n; i += 4096 {
		b[i] = 1
	}
	return &Mem{B: b, raw: raw}, nil
}

// Free unmaps the memory.
func (m *Mem) Free() {
	if m != nil && m.raw != nil {
		_ = unix.Munmap(m.raw)
		m.raw, m.B = nil, nil
	}
}

// Pool runs a function on N goroutines, each locked to an OS thread, that spin on an
// atomic counter between calls (and sleep after a while idle): a static split with little
// fork/join cost. Worker 0 is the caller.
//
// The words the caller and the workers hand each other (gen, done, sleepers) have a cache
// line each, and the caller touches the mutex only when a worker sleeps, so a call costs
// one transfer of gen's line to the workers and one of done's back.
type Pool struct {
	n      int
	fn     func(w int)
	want   int64 // done's value once the current call has finished (the caller's alone)
	mu     sync.Mutex
	cond   *sync.Cond
	quit   atomic.Bool
	closed sync.WaitGroup

	_        [64]byte
	gen      atomic.Uint64 // bumped to start a call
	_        [56]byte
	done     atomic.Int64 // calls' shares finished by the workers, cumulative
	_        [56]byte
	sleepers atomic.Int32 // workers asleep on cond (or about to be)
	_        [60]byte
}

// NewPool starts n-1 workers (n >= 1), each locked to its OS thread; the caller is worker
// 0. Threads are not pinned: on a shared machine the kernel's scheduler moves a worker off
// a CPU that another process holds, which pinning would forbid (the engine's scheduler,
// package sched, pins its workers and balances them instead).
func NewPool(n int) *Pool {
	p := &Pool{n: max(n, 1)}
	p.cond = sync.NewCond(&p.mu)
	for w := 1; w < p.n; w++ {
		p.closed.Add(1)
		go p.loop(w, p.gen.Load())
	}
	return p
}

// Threads is the number of workers, the caller included.
func (p *Pool) Threads() int { return p.n }

func (p *Pool) loop(w int, seen uint64) {
	defer p.closed.Done()
	runtime.LockOSThread()
	for {
		spins := 0
		for p.gen.Load() == seen && !p.quit.Load() {
			spins++
			if spins&(1<<16-1) == 0 {
				yield()
			}
			if spins > 1<<22 {
				// Run wakes sleepers only when it sees them counted, and it bumps gen before
				// it looks: so a worker counted too late for that sees the new gen below.
				p.sleepers.Add(1)
				p.mu.Lock()
				for p.gen.Load() == seen && !p.quit.Load() {
					p.cond.Wait()
				}
				p.mu.Unlock()
				p.sleepers.Add(-1)
			}
		}
		if p.quit.Load() {
			return
		}
		seen = p.gen.Load()
		p.fn(w)
		p.done.Add(1)
	}
}

// Run calls fn(w) for every worker w and returns when all have returned.
func (p *Pool) Run(fn func(w int)) {
	if p.n == 1 {
		fn(0)
		return
	}
	p.fn = fn
	p.want += int64(p.n - 1)
	p.gen.Add(1)
	if p.sleepers.Load() > 0 {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	}
	fn(0)
	for spins := 1; p.done.Load() != p.want; spins++ {
		if spins&(1<<12-1) == 0 {
			yield()
		}
	}
}

// yield gives the CPU to another thread (a spinning worker may share a CPU with the thread
// it waits for).
func yield() { _, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// Close stops the workers.
func (p *Pool) Close() {
	p.quit.Store(true)
	p.mu.Lock()
	p.cond.Broadcast()
	p.mu.Unlock()
	p.closed.Wait()
}

// Split returns worker w's share [lo, hi) of n items, split evenly.
func Split(n, workers, w int) (lo, hi int) { return n * w / workers, n * (w + 1) / workers }

// The sizes that keep a measurement in DRAM: a rotation of weight sets (NewSet's minBytes)
// of at least SetBytes, and a read buffer of at least ReadBytes, each a multiple of the L3
// the CPU reports where that is the larger. A VM's share of a shared L3 is often smaller
// than the L3 it reports (on a 2-vCPU Emerald Rapids guest reporting 260 MiB, reads of 64
// MiB ran at the L3's rate and of 192 MiB and more at DRAM's), never larger, so the
// reported size is the safe one; a CPU with a very large L3 (stacked cache) gets sets and
// buffers to match.
var (
	SetBytes  = max(512<<20, 2*cpuid.CPU.Cache.L3)
	ReadBytes = max(1<<30, 4*cpuid.CPU.Cache.L3)
)

// L3Bytes is the L3 the CPU reports (0 where it reports none).
var L3Bytes = max(0, cpuid.CPU.Cache.L3)

// L3ReadBytes is the size of the L3-resident read buffer (the cache-resident roofline).
const L3ReadBytes = 16 << 20

// FitsL3 tells whether n bytes can stay in the L3 (L3ReadBytes where the CPU reports no
// L3): a cache-resident measurement of more reads DRAM.
func FitsL3(n int) bool {
	if L3Bytes == 0 {
		return n <= L3ReadBytes
	}
	return n <= L3Bytes
}

// ReadBandwidth reads buf with the pool's workers (each its contiguous share) reps times
// with each of kernels.ReadLoops in turn, and returns the best rate in bytes per second
// (the least disturbed trial: on a shared machine other processes only ever slow it down)
// and the loop that read it.
func ReadBandwidth(p *Pool, buf []byte, reps int) (float64, kernels.ReadLoop) {
	var best float64
	loops := kernels.ReadLoops()
	won := loops[0]
	for r := 0; r < reps; r++ {
		for _, l := range loops {
			t0 := time.Now()
			readOnce(p, buf, l)
			if bps := float64(len(buf)) / time.Since(t0).Seconds(); bps > best {
				best, won = bps, l
			}
		}
	}
	return best, won
}

// readOnce reads buf once with the pool's workers, each its contiguous share of whole
// pages, with loop l.
func readOnce(p *Pool, buf []byte, l kernels.ReadLoop) {
	p.Run(func(w int) {
		lo, hi := Split(len(buf)/4096, p.Threads(), w)
		l.Read(buf[lo*4096 : hi*4096])
	})
}

// Trial measures one timed run's wall time and the CPU time the process got in it.
type Trial struct {
	t0  time.Time
	cpu time.Duration
}

// StartTrial starts a trial.
func StartTrial() Trial { return Trial{time.Now(), cpuTime()} }

// Elapsed is the wall time so far.
func (t Trial) Elapsed() time.Duration { return time.Since(t.t0) }

// Stop ends the trial: it is clean when the process used at least 90% of threads CPUs for
// its whole wall time (no other process took one of them for long).
func (t Trial) Stop(threads int) (wall time.Duration, clean bool) {
	wall = time.Since(t.t0)
	used := cpuTime() - t.cpu
	return wall, float64(used) >= 0.9*float64(threads)*float64(wall)
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Int8Peak measures the pool's int8 peak (operations per second, multiply and add counted
// separately) with every worker running the peak loop of kernels.Int8PeakPath; it returns
// the total over the pool, 0 where no path runs.
func Int8Peak(p *Pool, d time.Duration) float64 {
	if _, ok := kernels.Int8PeakPath(); !ok {
		return 0
	}
	return peakRate(p, d, func() float64 { return kernels.Int8PeakOps(1 << 18) })
}

// peakRate is the best rate (operations per second, over the pool) of rounds of run on every
// worker for d; run returns the operations it performed.
func peakRate(p *Pool, d time.Duration, run func() float64) float64 {
	var best float64
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		t0 := time.Now()
		var ops atomic.Int64
		p.Run(func(int) { ops.Add(int64(run())) })
		best = max(best, float64(ops.Load())/time.Since(t0).Seconds())
	}
	return best
}

// AMXPeak is Int8Peak for the AMX-INT8 peak loop (kernels.AMXPeakOps); 0 where AMX cannot
// run.
func AMXPeak(p *Pool, d time.Duration) float64 {
	if kernels.AMXReason() != "" {
		return 0
	}
	return peakRate(p, d, func() float64 { return kernels.AMXPeakOps(1 << 14) })
}

// RandomBlob fills blob (the layout of format f) with valid random codes: i2s codes 0..2,
// tl1 indices 0..8, tl2 blocks of random ternary weights, any byte for int2/int1/int8, and
// random finite values for bf16/f32. It is fast (no packing) so benchmarks can fill
// gigabytes.
func RandomBlob(f quantcfg.Format, ly kernels.Layout, blob []byte, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 77))
	var valid []byte
	switch f {
	case quantcfg.I2S:
		for v := 0; v < 256; v++ {
			if v&3 != 3 && v>>2&3 != 3 && v>>4&3 != 3 && v>>6 != 3 {
				valid = append(valid, byte(v))
			}
		}
	case quantcfg.TL1:
		for v := 0; v < 256; v++ {
			if v&15 <= 8 && v>>4 <= 8 {
				valid = append(valid, byte(v))
			}
		}
	}
	var pat [4096]byte
	switch f {
	case quantcfg.BF16:
		for i := 0; i < len(pat); i += 2 {
			h := kernels.BF16(float32(rng.NormFloat64()))
			pat[i], pat[i+1] = byte(h), byte(h>>8)
		}
	case quantcfg.F32:
		for i := 0; i < len(pat); i += 4 {
			u := math.Float32bits(float32(rng.NormFloat64()))
			pat[i], pat[i+1], pat[i+2], pat[i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		}
	default:
		for i := range pat {
			if valid != nil {
				pat[i] = valid[rng.IntN(len(valid))]
			} else {
				pat[i] = byte(rng.Uint32())
			}
		}
	}
	// fill with shifted copies of the pattern (distinct enough for a bandwidth test)
	for off := 0; off < len(blob); off += len(pat) {
		s := int(rng.Uint32()) % 64 * 64
		n := copy(blob[off:], pat[s:])
		if n < len(pat)-s && off+n < len(blob) {
			copy(blob[off+n:], pat[:s])
		}
	}
	if f == quantcfg.TL2 { // whole blocks packed from random ternary weights, then the tl1 tail
		const nb = 16
		w := kernels.RandomWeights(rng, quantcfg.TL2, kernels.RowBlock, nb*kernels.TL2Block, 1)
		blocks, err := kernels.PackNew(quantcfg.TL2, kernels.RowBlock, nb*kernels.TL2Block, w)
		if err != nil {
			panic(err) // a valid shape by construction
		}
		// every row block's stream: random whole blocks, then random tl1 tail units, stored
		// where the layout puts them
		stream, nb3 := make([]byte, ly.RowBlockBytes), ly.TL2Blocks()
		for rb := 0; rb < ly.RowBlocks(); rb++ {
			for b := 0; b < nb3; b++ {
				copy(stream[320*b:320*b+320], blocks[320*rng.IntN(nb):])
			}
			for i := 320 * nb3; i < len(stream); i++ {
				stream[i] = byte(rng.IntN(9) | rng.IntN(9)<<4)
			}
			ly.SetRowBlockData(blob, rb, stream)
		}
	}
}
