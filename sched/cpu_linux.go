package sched

import (
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// getcpu returns the CPU the calling thread runs on (the getcpu system
// call), or -1.
func getcpu() int {
	var cpu, node uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), uintptr(unsafe.Pointer(&node)), 0); e != 0 {
		return -1
	}
	return int(cpu)
}

// fastCPUOK says whether cpuFast agrees with getcpu on this machine (a
// hypervisor or kernel might not keep IA32_TSC_AUX as Linux does); it is
// checked once, on a locked thread.
var fastCPUOK = sync.OnceValue(func() bool {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for range 3 {
		a := cpuFast()
		b := getcpu()
		c := cpuFast()
		if a == b && b == c && a >= 0 {
			return true
		}
		if a == c && a != b {
			return false
		}
		// migrated between the reads: try again
	}
	return false
})

// currentCPU returns the CPU the calling thread is running on right now
// (it may change at any moment unless the thread is pinned), or -1.
func currentCPU() int {
	if fastCPUOK() {
		return cpuFast()
	}
	return getcpu()
}
