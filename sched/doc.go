// Package sched runs parallel regions on a pool of pinned worker threads
// and splits row-blocked work between them in proportion to how fast each
// core has recently been.
//
// It owns: the worker threads (locked to OS threads, pinned to cores), a
// fork/join that costs under a microsecond back to back, the per-class
// performance ratios of the dynamic partitioner, the core list with P/E
// types (Cores, for `bitd info`), and HeteroBench, the harness that
// measures the partitioner against a static split on a core shared with
// another process. It does not own what the work is (kernels, engine),
// how many threads bitd wants (cmd/bitd's config) or metrics (bitd
// exports Ratios and WorkerCores). Linux only (futex, sched_setaffinity).
//
// # Workers
//
// A pool of Threads workers is the calling goroutine (worker 0) plus
// Threads-1 dedicated goroutines, each locked to its OS thread for its
// whole life and, with Config.Pin, pinned to one core of the process's
// affinity mask: worker i to the i-th allowed core, so a taskset or cgroup
// cpuset restriction is respected and core IDs need not be 0..N-1. The
// first allowed core is left for the caller. A worker whose pinning fails
// (a container may refuse sched_setaffinity) runs unpinned; PinErr says
// why. Worker threads are never the process's main thread (whose mask is
// the one Cores reads) and exit with their goroutine on Close, so a pinned
// mask never leaks back into the Go runtime.
//
// Why the caller is worker 0 (measured on the 2-core development VM at
// commit addf224, which had all three variants; empty region, back to
// back): the caller working as worker 0 costs 0.7 us per fork/join; the
// caller pinning its own thread to core 0 for each call costs 6 us (two
// sched_setaffinity calls and a migration); a caller that only waits for
// two dedicated workers costs 1.25 ms with GOMAXPROCS=2, because three
// threads then need two Ps and the spinning ones hold them, and 2.9 us
// with GOMAXPROCS=3. It also saves a wake-up, and the caller may be any
// goroutine, locked or not. The price: worker 0 runs wherever the caller's
// thread runs. When the caller is found on a pinned worker's core (one
// RDPID, 3 ns), its thread is moved off it (see nudgeCaller), because the
// kernel took many milliseconds to separate two threads sharing a core.
// A move costs about 50 us on this VM (two sched_setaffinity calls and a
// migration); it happens mostly on the first call after the caller slept
// (the kernel likes to wake it on the idle core of a sleeping worker):
// 0 to 40% of calls after 3 ms idle, almost never back to back.
//
// Each worker holds a Go P while it runs or spins, so Threads may not
// exceed GOMAXPROCS (New refuses it; Threads=0 means min(allowed cores,
// GOMAXPROCS)). Other goroutines get a P when workers sleep.
//
// # Fork and join
//
// The caller publishes a call by bumping a 32-bit generation word;
// dedicated workers wait for it to change: they poll it back to back for
// 5 us, then poll with sched_yield until Config.Spin (1 ms by default) has
// passed, then sleep in FUTEX_WAIT_PRIVATE on it; the caller issues
// FUTEX_WAKE_PRIVATE only when a sleeper has registered. The join is the
// same on a counter of workers still running, which the caller polls, then
// sleeps on. So an idle pool uses no CPU after Spin (measured: 1.2 ms of
// CPU in the 200 ms after a burst), a call to a spinning pool costs about
// 0.18 us (BenchmarkForkJoinEmpty, 2 workers), and one that has to wake
// sleeping workers a median of 20-50 us (BenchmarkForkJoinAfterIdle: the
// futex wake-up, plus the occasional nudge). The tight polling is what
// makes the second figure: yielding after 64 polls, as the pool first did,
// cost 0.60-0.86 us an empty call and took BenchmarkSplitWork (about 11 us
// of L2-resident work on two workers) from 11.3-11.7 to 17.6-21.7 us (four
// interleaved runs), a poll that caught the call inside sched_yield paying
// for the system call. 5 us catches calls that follow each other closely
// (20 us did no better) and leaves a core to other threads soon after.
//
// # Splitting work
//
// Split(class, blocks, fn) divides the row blocks [0, blocks) between the
// workers in proportion to the class's ratios pr (Partition: contiguous
// ranges, cumulative round-half-up boundaries, every block exactly once, a
// worker may get none). A Class names a kernel class (ISA and format); its
// ratios start at 1 for every worker.
//
// After each split the ratios are updated from the call's measurements,
// following Luo et al., "A dynamic parallel method for performance
// optimization on hybrid CPUs": with worker i's blocks done n_i and time
// t_i, over the workers that did work (set A, S = sum of their pr),
//
//	pr_i' = S * (n_i/t_i) / sum_{j in A}(n_j/t_j)
//	pr_i  = Alpha*pr_i + (1-Alpha)*pr_i'          (Alpha = 0.3)
//
// which is the paper's pr_i' = pr_i / sum_j(t_i*pr_j/t_j) when n is exactly
// proportional to pr and S = 1; using blocks actually done removes the
// rounding of block granularity, and S keeps the ratios' mean at 1, so a
// ratio reads as "speed relative to the average worker". Guards: workers
// without work keep their ratio; no update when fewer than two workers had
// work or the slowest took under 2 us (timer noise); pr_i' is clamped to
// [pr_i/4, 4*pr_i] (one call in which a thread lost its core for a whole
// time slice cannot zero its share); ratios are floored at 1/32 of the
// mean, so a core that looked slow still gets blocks and can recover.
// With Config.Static the split is equal and ratios never change.
//
// Stealing (Config.Steal, on by default): ratios predict a core's average
// speed, but a core shared with another process loses it in bursts of a
// scheduler time slice (0.3-4 ms here), which at 0.3 ms per call no
// ratio can foresee. So each worker takes its own range from the front in
// chunks (an eighth of what is left), and a worker that runs out takes a
// piece from the back of the range with the most blocks left (its share
// of it by the two workers' ratios). Every block is still done exactly
// once, but fn may be called several times per worker per split (never
// concurrently for one worker). With stealing, t_i runs from the fork to
// the end of the worker's last piece, so n_i/t_i is its share of the
// call's throughput, wake-up delays included; without stealing, t_i is the
// time of the worker's own range, as in the paper.
//
// Measured with HeteroBench (4096 x 14336 2-bit GEMV-like calls, 0.31-0.39
// ms each on two cores, 0.58 ms on one; quiet machine): with a 1 ms busy /
// 1 ms idle load on core 1, static 0.58-0.73 ms per call, dynamic ratios
// alone 1.00-1.05x, dynamic with stealing 1.14-1.28x (median 1.26x of 5
// runs). The load there takes core 1 for whole 1 ms bursts, longer than a
// call, so which calls it hits is unpredictable; when it preempts a worker
// in the middle of its piece the call waits for the burst to end, which
// neither ratios nor stealing can avoid. With a fine-grained load (100 us
// busy / 100 us idle, 100 us time slice) the core is uniformly slower and
// the ratios find it: dynamic 1.36-1.66x, with stealing 1.39-1.57x, ratios
// within 5% of their settled value 1-3 calls after the load starts and
// 1-8 after it stops (their per-call noise under load, 6-9%, exceeds 5%,
// so "within 5% for good" is not reached).
//
// # Concurrency
//
// Run, Split, Ratios, SetRatios, Classes and Close are safe for concurrent
// use. Calls are served one at a time by a mutex (a parallel region
// already uses every worker, so queueing them costs nothing that running
// them together would save). fn must not call Run or Split on the same
// pool: that deadlocks. A panic in fn is recovered in the worker; the call
// waits for the other workers and returns a *PanicError (ErrPanic), and
// the pool stays usable. After Close, Run and Split return ErrClosed.
// Runner adapts the pool to engine.Runner (no error results: errors are
// re-raised as panics in the caller).
//
// # Core types
//
// Cores lists the allowed cores; on Intel hybrid CPUs (CPUID leaf 7 EDX
// bit 15) it runs CPUID leaf 0x1A on each core to tell P-cores (0x40) from
// E-cores (0x20). Other CPUs report every core as P.
//
// # HeteroBench
//
// HeteroBench starts a second process pinned to one worker's core that is
// busy and idle in turn (1 ms / 1 ms by default) and compares, on a
// pluggable Workload (NewGEMVLike: a memory-bound pass over 2-bit weights
// of a 4096 x 14336 layer, rotated over copies larger than the last-level
// cache), the static equal split, the dynamic ratios alone and the dynamic
// ratios with stealing, and how many calls the ratios take to settle after
// the load starts and stops. The load process is this same executable run
// again with the environment variable BITGO_SCHED_CPULOAD set: this
// package's init function sees it, runs the load and exits before main,
// so any binary that imports sched (bitd, test binaries) can start it. It
// is killed when the benchmark ends, dies with its parent (Pdeathsig and a
// parent-PID check) and has a maximum life.
package sched
