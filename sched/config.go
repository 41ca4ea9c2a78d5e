package sched

import (
	"fmt"
	"math"
	"time"
)

// MaxThreads bounds Config.Threads.
const MaxThreads = 1024

// MaxSpin bounds Config.Spin: spinning longer than this is burning a core,
// not saving a wake-up.
const MaxSpin = 100 * time.Millisecond

// Config configures a Pool. Build it with Default and change fields; New
// validates it.
type Config struct {
	// Threads is the number of workers, the calling goroutine included.
	// 0 means one per core in the process's affinity mask, at most
	// GOMAXPROCS. It may not exceed GOMAXPROCS (each worker holds a P while
	// it runs or spins) and, with Pin, the number of allowed cores.
	Threads int
	// Pin pins each dedicated worker thread to its own core (in affinity
	// mask order, see Cores). A worker that cannot be pinned runs
	// unpinned; Pool.PinErr says why.
	Pin bool
	// Spin is how long an idle worker (and a caller waiting for the join)
	// polls before it sleeps on a futex: back to back for the first 5 us
	// (at most Spin), then with sched_yield. Longer spins make calls that
	// follow each other closely cheaper; after Spin of idleness workers use
	// no CPU.
	Spin time.Duration
	// Alpha is the weight of the old ratio in the filter
	// pr = Alpha*pr + (1-Alpha)*pr'. In [0, 1]; 1 freezes the ratios.
	Alpha float64
	// Static makes Split use an equal split and never update ratios (the
	// baseline the dynamic partitioner is compared with).
	Static bool
	// Steal lets a worker that has finished its range take blocks from
	// the back of a slower worker's range (see Split). It absorbs what
	// the ratios cannot predict: a core taken by another process for part
	// of one call. Ignored with Static.
	Steal bool
}

// Default returns the configuration bitd uses: all allowed cores, pinned,
// 1 ms spin, Alpha 0.3, dynamic split with stealing.
func Default() Config {
	return Config{Threads: 0, Pin: true, Spin: time.Millisecond, Alpha: 0.3, Steal: true}
}

// Validate reports the first field that is out of range, wrapped in
// ErrConfig.
func (c Config) Validate() error {
	if c.Threads < 0 || c.Threads > MaxThreads {
		return fmt.Errorf("%w: Threads = %d, want 0 (all allowed cores) to %d", ErrConfig, c.Threads, MaxThreads)
	}
	if c.Spin < 0 || c.Spin > MaxSpin {
		return fmt.Errorf("%w: Spin = %v, want 0 to %v", ErrConfig, c.Spin, MaxSpin)
	}
	if math.IsNaN(c.Alpha) || c.Alpha < 0 || c.Alpha > 1 {
		return fmt.Errorf("%w: Alpha = %v, want a number in [0, 1]", ErrConfig, c.Alpha)
	}
	return nil
}
