package sched

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Linux futex operations (linux/futex.h); x/sys/unix does not define them.
const (
	futexWaitPrivate = 0 | 128 // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
	futexWakePrivate = 1 | 128 // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
)

// futexWait sleeps while *addr == val (or until a wake-up or a signal; the
// caller re-checks its condition). It goes through unix.Syscall6 so the Go
// runtime knows the thread blocks and can hand its P to other goroutines.
func futexWait(addr *atomic.Uint32, val uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitPrivate, uintptr(val), 0, 0, 0)
}

// futexWake wakes up to n threads sleeping in futexWait on addr.
func futexWake(addr *atomic.Uint32, n int) {
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakePrivate, uintptr(n), 0, 0, 0)
}

// osYield gives the core to another runnable thread, if any (sched_yield).
// It does not block, so the raw form (no runtime bookkeeping) is safe.
func osYield() {
	unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
}
