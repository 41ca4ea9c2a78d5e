package ipc

import (
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Futexes on the region's words are shared between processes, so these use the
// non-private operations (no FUTEX_PRIVATE_FLAG).
const (
	futexWaitOp = 0 // FUTEX_WAIT
	futexWakeOp = 1 // FUTEX_WAKE
)

// futexWait sleeps while *addr == val, at most timeout. Early returns (the value
// changed, EINTR, a spurious wake-up, the timeout) are all fine: callers re-check.
func futexWait(addr *uint32, val uint32, timeout time.Duration) {
	ts := unix.NsecToTimespec(int64(timeout))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes the waiters on addr.
func futexWake(addr *uint32) {
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, 1<<30, 0, 0, 0)
}

func schedYield() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// spinner adapts how long a waiter spins (with sched_yield) before it sleeps on the
// futex, from the waits it has seen. A wake-up costs 25-170 us on this kind of machine, so a
// waiter should be awake when the peer's next word arrives whenever that is likely soon:
// it spins half as long again as the longest of its recent waits (at most the ceiling)
// when that wait was under the ceiling; else the same from the 95th percentile, the 75th,
// the median; else (the peer is mostly slow or idle) just the floor. Percentiles, not a
// mean: a decode loop's gaps between calls are mostly short with a few long ones
// (attention between projections, the host's lm_head and sampling once per token), and a
// mean pulled up by the long ones would put the waiter to sleep before the short ones too.
type spinner struct {
	waits  [spinHistory]int64 // ns, the most recent waits (a ring)
	n, at  int                // filled entries, next slot
	cached int64              // the budget, recomputed every few observations
	fresh  int                // observations since the last recomputation
	floor  int64              // ns, always spin this long
	ceil   int64              // ns, never spin longer
}

const spinHistory = 32

func newSpinner(floor, ceil time.Duration) spinner {
	return spinner{floor: int64(floor), ceil: int64(ceil), cached: int64(floor)}
}

func (s *spinner) budget() int64 { return s.cached }

func (s *spinner) observe(d int64) {
	s.waits[s.at] = d
	s.at = (s.at + 1) % spinHistory
	s.n = min(s.n+1, spinHistory)
	if s.fresh++; s.fresh >= 4 || s.n < spinHistory {
		s.fresh = 0
		s.cached = s.compute()
	}
}

func (s *spinner) compute() int64 {
	var sorted [spinHistory]int64
	w := sorted[:s.n]
	copy(w, s.waits[:s.n])
	slices.Sort(w)
	for _, q := range []int{100, 95, 75, 50} {
		if p := w[(len(w)-1)*q/100]; p <= s.ceil {
			return min(s.ceil, max(s.floor, p+p/2+s.floor/2))
		}
	}
	return s.floor
}

// waitChange returns when *word != old: it polls briefly, spins with sched_yield for
// the spinner's budget, then sleeps on the futex in slices, with *sleeping = 1 while it
// may sleep so that the writer knows to wake it. After every slice that ends without a
// change it calls check, whose error ends the wait. now is the wait's start.
func waitChange(word, sleeping *uint32, old uint32, sp *spinner, slice time.Duration, now time.Time, check func() error) error {
	for i := 0; i < 64; i++ {
		if atomic.LoadUint32(word) != old {
			sp.observe(int64(time.Since(now)))
			return nil
		}
	}
	budget := sp.budget()
	for {
		if atomic.LoadUint32(word) != old {
			sp.observe(int64(time.Since(now)))
			return nil
		}
		if int64(time.Since(now)) > budget {
			break
		}
		schedYield()
	}
	// The first sleep is short: if a peer that cannot issue a full barrier (a pure
	// Python client) lost the flag/word race, it costs 2 ms, not a whole slice.
	d := min(slice, firstSlice)
	for {
		// Announce the sleep, then re-check: the writer stores the word and then loads
		// the flag, we store the flag and then load the word (both sequentially
		// consistent), so at least one of us sees the other.
		atomic.StoreUint32(sleeping, 1)
		if atomic.LoadUint32(word) != old {
			atomic.StoreUint32(sleeping, 0)
			break
		}
		futexWait(word, old, d)
		d = slice
		atomic.StoreUint32(sleeping, 0)
		if atomic.LoadUint32(word) != old {
			break
		}
		if err := check(); err != nil {
			return err
		}
	}
	sp.observe(int64(time.Since(now)))
	return nil
}

// publish stores a new value into word and wakes the peer if it said it sleeps.
func publish(word, peerSleeping *uint32, v uint32) {
	atomic.StoreUint32(word, v)
	if atomic.LoadUint32(peerSleeping) != 0 {
		futexWake(word)
	}
}

// firstSlice is the length of a waiter's first futex sleep.
const firstSlice = 2 * time.Millisecond

// Spin budgets (see spinner). Floors absorb the jitter of a shared machine (a peer
// descheduled for a few microseconds would otherwise cost a 25-50 us futex wake-up);
// ceilings bound the CPU a waiter burns when the peer is slow or idle.
var (
	serverSpinFloor = 50 * time.Microsecond
	serverSpinCeil  = 5 * time.Millisecond // a host's step between tokens; under the 10 ms after which an idle daemon must use ~no CPU
	clientSpinFloor = 50 * time.Microsecond
	clientSpinCeil  = time.Millisecond
)
