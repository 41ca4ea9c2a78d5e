package sched

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Class names a kernel class (an ISA and a weight format, for example
// "avx512vnni/i2s"). Split keeps one set of per-worker ratios per class,
// created (all 1) the first time the class is used.
type Class string

// slot is one worker's part of the shared call state. Each worker writes
// only its own slot; the padding keeps slots on separate cache lines.
type slot struct {
	dur     time.Duration // the worker's time in this split (see runShare)
	work    int           // blocks it did in this split
	pval    any           // recovered panic value
	stack   []byte        // stack at the panic
	paniced bool
	_       [64]byte
}

// Pool is a set of workers that run parallel regions. Create it with New,
// release it with Close. All methods are safe for concurrent use; calls to
// Run and Split are served one at a time, in the order the internal mutex
// grants them.
type Pool struct {
	cfg     Config
	n       int   // workers, worker 0 included
	cores   []int // core per worker, -1 when not pinned
	pinErr  error
	workers sync.WaitGroup

	// mu serialises calls: it guards closed, the task fields, the ratios
	// and the scratch slices below.
	mu      sync.Mutex
	closed  bool
	ratios  map[Class][]float64
	bounds  []int
	work    []int
	times   []float64
	runFn   func(worker int)
	splitFn func(worker, lo, hi int)
	quit    bool
	forkAt  time.Time // when the current call was forked
	// workerCPUs holds the cores of pinned dedicated workers; nudges counts
	// the calls in which the caller was found on one of them and moved.
	workerCPUs unix.CPUSet
	anyPinned  bool
	nudges     atomic.Int64
	pr         []float64 // the ratios the current split uses
	steal      bool      // the current split steals
	ranges     []paddedRange

	// Fork/join words, each on its own cache line.
	_        [64]byte
	gen      atomic.Uint32 // futex word: bumped to start a call
	_        [60]byte
	sleepers atomic.Int32 // workers sleeping (or about to) on gen
	_        [60]byte
	pending  atomic.Uint32 // futex word: dedicated workers still running
	_        [60]byte
	waiting  atomic.Uint32 // 1 while the caller sleeps (or is about to) on pending
	_        [60]byte

	slots []slot
}

// New starts a pool. It returns an error (wrapping ErrConfig or
// ErrAffinity) for an invalid configuration; a worker that cannot be
// pinned is not an error: it runs unpinned and PinErr reports it.
func New(cfg Config) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	allowed, err := allowedCPUs()
	if err != nil {
		return nil, err
	}
	procs := runtime.GOMAXPROCS(0)
	n := cfg.Threads
	if n == 0 {
		n = min(len(allowed), procs)
	}
	if n > procs {
		return nil, fmt.Errorf("%w: Threads = %d but GOMAXPROCS = %d: every worker needs a P to run Go code, and workers short of one wait for milliseconds; raise GOMAXPROCS or lower Threads",
			ErrConfig, n, procs)
	}
	if cfg.Pin && n > len(allowed) {
		return nil, fmt.Errorf("%w: Threads = %d with Pin, but the affinity mask allows %d cores %v",
			ErrConfig, n, len(allowed), allowed)
	}
	p := &Pool{
		cfg:    cfg,
		n:      n,
		ratios: make(map[Class][]float64),
		bounds: make([]int, n+1),
		work:   make([]int, n),
		times:  make([]float64, n),
		cores:  make([]int, n),
		slots:  make([]slot, n),
		ranges: make([]paddedRange, n),
	}
	for i := range p.cores {
		p.cores[i] = -1
	}
	type started struct {
		worker int
		err    error
	}
	ready := make(chan started, n)
	for i := 1; i < n; i++ {
		core := -1
		if cfg.Pin {
			core = allowed[i]
		}
		p.workers.Add(1)
		go offMainThread(func() {
			err := lockAndPin(i, core)
			ready <- started{i, err}
			p.loop(i)
		})
	}
	var pinErrs []error
	for i := 1; i < n; i++ {
		s := <-ready
		if s.err != nil {
			pinErrs = append(pinErrs, s.err)
		} else if cfg.Pin {
			p.cores[s.worker] = allowed[s.worker]
			p.workerCPUs.Set(allowed[s.worker])
			p.anyPinned = true
		}
	}
	sort.Slice(pinErrs, func(a, b int) bool { return pinErrs[a].Error() < pinErrs[b].Error() })
	p.pinErr = errors.Join(pinErrs...)
	return p, nil
}

// offMainThread runs fn (which must begin with runtime.LockOSThread) on a
// goroutine locked to a thread other than the process's main thread.
// The main thread's affinity mask is the process's mask that Cores and
// New read, and a goroutine that exits while locked to the main thread
// leaves that thread wedged with whatever mask it had; so no worker may
// ever live there. If this goroutine finds itself on the main thread, it
// keeps it locked while a new goroutine (which then cannot run there)
// starts fn and locks its own thread, then lets the main thread go. On
// any other thread it stays locked into fn (whose lock nests): unlocking
// first would let the scheduler move the goroutine, main thread included,
// before fn locks again (a worker was once found on the main thread so).
func offMainThread(fn func()) {
	runtime.LockOSThread()
	if unix.Gettid() != unix.Getpid() {
		fn() // locks again (nested), for good
		return
	}
	locked := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		close(locked)
		fn()
	}()
	<-locked
	runtime.UnlockOSThread()
}

// lockAndPin locks the calling goroutine to its thread for good (the
// thread exits with the goroutine, so its mask never leaks back into the
// runtime) and, when core >= 0, pins the thread to that core.
func lockAndPin(worker, core int) error {
	runtime.LockOSThread()
	if core < 0 {
		return nil
	}
	var set unix.CPUSet
	set.Set(core)
	if err := setAffinity(0, &set); err != nil {
		return fmt.Errorf("%w %d to core %d (it runs unpinned): %w", ErrPin, worker, core, os.NewSyscallError("sched_setaffinity", err))
	}
	return nil
}

// Threads returns the number of workers, worker 0 (the caller) included.
func (p *Pool) Threads() int { return p.n }

// WorkerCores returns, per worker, the core it is pinned to, or -1 for a
// worker that is not pinned. Worker 0 is the calling goroutine and is never
// pinned; its entry is -1.
func (p *Pool) WorkerCores() []int { return slices.Clone(p.cores) }

// PinErr returns why some workers could not be pinned (nil when every
// dedicated worker was pinned or Config.Pin was false). The pool works
// either way; unpinned workers only lose the guarantee of one core each.
func (p *Pool) PinErr() error { return p.pinErr }

// loop is a dedicated worker: wait for a call, do its share, report.
func (p *Pool) loop(i int) {
	defer p.workers.Done()
	last := uint32(0)
	for {
		last = p.waitCall(last)
		if p.quit {
			return // without UnlockOSThread: the (pinned) thread exits too
		}
		p.runShare(i)
		if p.pending.Add(^uint32(0)) == 0 && p.waiting.Load() != 0 {
			futexWake(&p.pending, 1)
		}
	}
}

// spinTight is how long a waiter polls back to back before it starts yielding.
const spinTight = 5 * time.Microsecond

// spinUntil polls done back to back for spinTight, then with sched_yield until
// spin has passed (both counted from its first look at the clock, 64 polls
// in, and checked every 64 polls; a spin shorter than spinTight never yields);
// it reports whether done became true (else the caller sleeps).
func spinUntil(spin time.Duration, done func() bool) bool {
	var start time.Time
	yielding := false
	for i := 0; ; i++ {
		if done() {
			return true
		}
		if yielding {
			osYield()
		}
		if i&63 != 63 {
			continue
		}
		now := time.Now()
		if start.IsZero() {
			start = now
			continue
		}
		el := now.Sub(start)
		if el > spin {
			return false
		}
		yielding = el > spinTight
	}
}

// waitCall returns once gen differs from last: it polls, then polls with
// sched_yield for Spin, then sleeps on the futex.
func (p *Pool) waitCall(last uint32) uint32 {
	if spinUntil(p.cfg.Spin, func() bool { return p.gen.Load() != last }) {
		return p.gen.Load()
	}
	for {
		p.sleepers.Add(1)
		if g := p.gen.Load(); g != last {
			p.sleepers.Add(-1)
			return g
		}
		futexWait(&p.gen, last)
		p.sleepers.Add(-1)
		if g := p.gen.Load(); g != last {
			return g
		}
	}
}

// waitJoin returns once every dedicated worker has finished the call.
func (p *Pool) waitJoin() {
	if spinUntil(p.cfg.Spin, func() bool { return p.pending.Load() == 0 }) {
		return
	}
	for {
		p.waiting.Store(1)
		v := p.pending.Load()
		if v == 0 {
			p.waiting.Store(0)
			return
		}
		futexWait(&p.pending, v)
		p.waiting.Store(0)
	}
}

// runShare runs worker i's share of the current call and records its
// time, its work and any panic in its slot.
func (p *Pool) runShare(i int) {
	s := &p.slots[i]
	s.dur, s.work, s.paniced = 0, 0, false
	defer func() {
		if r := recover(); r != nil {
			s.paniced, s.pval, s.stack = true, r, debug.Stack()
		}
	}()
	switch {
	case p.splitFn == nil:
		p.runFn(i)
	case p.steal:
		p.splitStealing(i, s)
	default:
		lo, hi := p.bounds[i], p.bounds[i+1]
		if lo >= hi {
			return
		}
		t0 := time.Now()
		p.splitFn(i, lo, hi)
		s.dur, s.work = time.Since(t0), hi-lo
	}
}

// splitStealing runs worker i's part of a stealing split: it takes chunks
// from the front of its own range (an eighth of what is left, at least one
// block), then takes pieces from the back of the range of the worker with
// the most blocks left (its share of them by the two workers' ratios),
// until no block is left anywhere. Its time runs from the fork to the
// end of its last piece, so that the speeds work/time of one call add up
// to the call's throughput (see updateRatios).
func (p *Pool) splitStealing(i int, s *slot) {
	own := &p.ranges[i].v
	for {
		v := own.Load()
		f, b := unpackRange(v)
		if f >= b {
			break
		}
		c := (b - f + 7) / 8
		if own.CompareAndSwap(v, packRange(f+c, b)) {
			p.splitFn(i, f, f+c)
			s.work += c
			s.dur = time.Since(p.forkAt)
		}
	}
	for {
		victim, most := -1, 0
		for j := range p.ranges {
			if f, b := unpackRange(p.ranges[j].v.Load()); b-f > most {
				victim, most = j, b-f
			}
		}
		if victim < 0 {
			return
		}
		r := &p.ranges[victim].v
		v := r.Load()
		f, b := unpackRange(v)
		if f >= b {
			continue
		}
		mine, theirs := p.pr[i], p.pr[victim]
		take := int(math.Ceil(float64(b-f) * mine / (mine + theirs)))
		take = min(max(take, 1), b-f)
		if r.CompareAndSwap(v, packRange(f, b-take)) {
			p.splitFn(i, b-take, b)
			s.work += take
			s.dur = time.Since(p.forkAt)
		}
	}
}

// A worker's remaining range [front, back) of a stealing split, packed
// in one word so that the owner (front) and thieves (back) can claim
// blocks with one compare-and-swap.
type paddedRange struct {
	v atomic.Uint64
	_ [56]byte
}

func packRange(front, back int) uint64 { return uint64(front)<<32 | uint64(back) }

func unpackRange(v uint64) (front, back int) { return int(v >> 32), int(v & 0xffffffff) }

// maxBlocks bounds Split's block count (ranges pack into 32 bits).
const maxBlocks = 1<<31 - 1

// Run calls fn(w) once for every worker w in [0, Threads()) in parallel and
// returns when all have returned. Worker 0 runs on the calling goroutine.
// It returns ErrClosed after Close, and a *PanicError (wrapping ErrPanic)
// when fn panicked in some worker; the pool stays usable either way.
// fn must not call Run or Split on the same pool (that deadlocks).
func (p *Pool) Run(fn func(worker int)) error {
	if fn == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.runFn, p.splitFn = fn, nil
	err := p.call()
	p.runFn = nil
	return err
}

// Split partitions the row blocks [0, blocks) among the workers in
// proportion to the class's ratios (equal shares with Config.Static) and
// calls fn(w, lo, hi) for every worker w whose range [lo, hi) is not
// empty, in parallel. Afterwards it updates the class's ratios from the
// workers' measured times (see the package documentation). Errors are as
// for Run, plus ErrBlocks for blocks < 0. blocks == 0 does nothing.
func (p *Pool) Split(class Class, blocks int, fn func(worker, lo, hi int)) error {
	return p.split(class, blocks, fn, p.cfg.Steal)
}

// SplitOnce is Split in which each worker runs at most one range, its whole
// share, even when the pool steals: for work whose fn has a cost of its own
// per call, which stealing's smaller pieces would pay again and again (the
// lookup-table kernels build tables of the whole input per call).
func (p *Pool) SplitOnce(class Class, blocks int, fn func(worker, lo, hi int)) error {
	return p.split(class, blocks, fn, false)
}

// split is Split with stealing chosen by the caller (HeteroBench compares
// both on one pool).
func (p *Pool) split(class Class, blocks int, fn func(worker, lo, hi int), steal bool) error {
	if blocks < 0 || blocks > maxBlocks {
		return fmt.Errorf("%w: Split(%q) with %d blocks, want 0 to %d", ErrBlocks, class, blocks, maxBlocks)
	}
	if fn == nil || blocks == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	pr := p.classRatios(class)
	p.bounds = Partition(p.bounds, blocks, pr)
	if p.bounds[1] == blocks {
		// Everything fell to worker 0 (the caller): no fork needed.
		return p.inline(fn, blocks)
	}
	p.splitFn, p.runFn, p.pr = fn, nil, pr
	p.steal = steal && !p.cfg.Static
	if p.steal {
		for i := range p.ranges {
			p.ranges[i].v.Store(packRange(p.bounds[i], p.bounds[i+1]))
		}
	}
	err := p.call()
	p.splitFn, p.pr = nil, nil
	if err != nil || p.cfg.Static {
		return err
	}
	for i := range p.n {
		p.work[i] = p.slots[i].work
		p.times[i] = p.slots[i].dur.Seconds()
	}
	updateRatios(pr, p.work, p.times, p.cfg.Alpha)
	return nil
}

// inline runs a whole split on the caller when no other worker has work.
func (p *Pool) inline(fn func(worker, lo, hi int), blocks int) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Worker: 0, Value: r, Stack: debug.Stack()}
		}
	}()
	fn(0, 0, blocks)
	return nil
}

// call forks the current task to the dedicated workers, runs worker 0's
// share on the caller, joins, and collects panics.
// p.mu is held.
func (p *Pool) call() error {
	if p.anyPinned {
		p.nudgeCaller()
	}
	p.forkAt = time.Now()
	if p.n > 1 {
		p.pending.Store(uint32(p.n - 1))
		p.gen.Add(1)
		if p.sleepers.Load() > 0 {
			futexWake(&p.gen, math.MaxInt32)
		}
	}
	p.runShare(0)
	if p.n > 1 {
		p.waitJoin()
	}
	for i := range p.n {
		if s := &p.slots[i]; s.paniced {
			err := &PanicError{Worker: i, Value: s.pval, Stack: s.stack}
			for j := i; j < p.n; j++ {
				p.slots[j].paniced, p.slots[j].pval, p.slots[j].stack = false, nil, nil
			}
			return err
		}
	}
	return nil
}

// nudgeCaller moves the calling thread off the cores of the pinned
// workers when it finds itself on one of them (one RDPID, 3 ns, in the
// usual case). Sharing a core with a worker halves both; the kernel's load
// balancer would separate them only after milliseconds (measured: two
// threads stayed together on one core for whole 10-call runs while the
// other core idled). The move narrows the thread's mask to the remaining
// cores, which migrates it at once, and then restores its mask, so the
// thread is left as it was except for where it runs. A caller whose own
// mask holds only worker cores (for example a thread its owner pinned) is
// left alone.
func (p *Pool) nudgeCaller() {
	c := currentCPU()
	if c < 0 || !p.workerCPUs.IsSet(c) {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var saved unix.CPUSet
	if unix.SchedGetaffinity(0, &saved) != nil {
		return
	}
	free := saved
	for i := range free {
		free[i] &^= p.workerCPUs[i]
	}
	if free.Count() == 0 || unix.SchedSetaffinity(0, &free) != nil {
		return
	}
	_ = unix.SchedSetaffinity(0, &saved) // cannot fail: the mask it had
	p.nudges.Add(1)
}

// classRatios returns the live ratio slice of class, creating it. p.mu is
// held.
func (p *Pool) classRatios(class Class) []float64 {
	pr, ok := p.ratios[class]
	if !ok {
		pr = make([]float64, p.n)
		for i := range pr {
			pr[i] = 1
		}
		p.ratios[class] = pr
	}
	if p.cfg.Static {
		for i := range pr {
			pr[i] = 1
		}
	}
	return pr
}

// Ratios returns a copy of the class's per-worker ratios (index = worker).
// A class not used yet has all ratios 1. Ratios are relative speeds: the
// dynamic update keeps their mean over the workers that take part at its
// previous value, so starting from 1 a ratio of 1.4 means "40% faster than
// the average worker".
func (p *Pool) Ratios(class Class) []float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.classRatios(class))
}

// Classes returns the classes Split or SetRatios has seen, sorted.
func (p *Pool) Classes() []Class {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := make([]Class, 0, len(p.ratios))
	for c := range p.ratios {
		cs = append(cs, c)
	}
	slices.Sort(cs)
	return cs
}

// SetRatios replaces the class's ratios (for example with values saved
// from an earlier run). r must have Threads() entries, each a positive
// finite number; otherwise it returns an error wrapping ErrRatios. With
// Config.Static the ratios stay 1 (SetRatios only validates).
func (p *Pool) SetRatios(class Class, r []float64) error {
	if len(r) != p.n {
		return fmt.Errorf("%w: %d ratios for class %q, the pool has %d workers", ErrRatios, len(r), class, p.n)
	}
	for i, v := range r {
		if !(v > 0) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: ratio %d of class %q is %v, want a positive finite number", ErrRatios, i, class, v)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg.Static {
		p.classRatios(class) // registers the class, all 1
		return nil
	}
	p.ratios[class] = slices.Clone(r)
	return nil
}

// Close stops the workers and waits for their threads to exit. Calls to
// Run or Split that are waiting for the pool when Close runs, and all later
// calls, return ErrClosed. Close is idempotent; it returns nil.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.quit = true
	p.gen.Add(1)
	futexWake(&p.gen, math.MaxInt32)
	p.workers.Wait()
	return nil
}

// setAffinity is unix.SchedSetaffinity; tests replace it to simulate an
// environment that refuses pinning.
var setAffinity = unix.SchedSetaffinity
