package ipc

import (
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
// futex, from the waits it has seen: it spins about twice the recent typical wait, so a
// peer that answers quickly is caught without a wake-up (which costs 25-50 us across
// cores here), and a peer that takes long is waited for asleep.
type spinner struct {
	ewma  int64 // ns, recent waits (clamped)
	floor int64 // ns, always spin this long
	ceil  int64 // ns, never spin longer
}

func newSpinner(floor, ceil time.Duration) spinner {
	return spinner{ewma: int64(floor), floor: int64(floor), ceil: int64(ceil)}
}

func (s *spinner) budget() int64 {
	e := s.ewma
	if e > s.ceil {
		return s.floor // waits are long: sleep almost at once
	}
	b := 2*e + s.floor
	if b > s.ceil {
		b = s.ceil
	}
	return b
}

func (s *spinner) observe(d int64) {
	if d > 4*s.ceil {
		d = 4 * s.ceil
	}
	s.ewma += (d - s.ewma) / 4
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
	serverSpinCeil  = 250 * time.Microsecond
	clientSpinFloor = 50 * time.Microsecond
	clientSpinCeil  = time.Millisecond
)
