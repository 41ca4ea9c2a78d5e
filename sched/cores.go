package sched

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// CoreType is the kind of a CPU core as the hardware reports it.
type CoreType uint8

const (
	// CoreP is a performance core. On CPUs that are not hybrid every core is
	// reported as CoreP (all cores are alike).
	CoreP CoreType = iota
	// CoreE is an efficiency core (Intel "Atom" cores of hybrid parts).
	CoreE
	// CoreUnknown is a core of a hybrid CPU whose CPUID leaf 0x1A gave a
	// type this package does not know, or whose type could not be read
	// (the process could not run a thread on it).
	CoreUnknown
)

// String returns "P", "E" or "unknown".
func (t CoreType) String() string {
	switch t {
	case CoreP:
		return "P"
	case CoreE:
		return "E"
	default:
		return "unknown"
	}
}

// Core is one CPU core this process may run on.
type Core struct {
	ID   int      // the kernel's CPU number (as in /proc/cpuinfo and taskset)
	Type CoreType // P or E; CoreP on non-hybrid CPUs
}

// Hybrid reports whether the CPU has cores of more than one type
// (CPUID leaf 7 EDX bit 15). It is false on AMD and on Intel parts before
// Alder Lake, and on every non-amd64 machine.
func Hybrid() bool { return hybridCPU() }

// Cores returns the cores in this process's CPU affinity mask (which
// already reflects a cgroup cpuset or a taskset restriction), in increasing
// ID order, with their types. The IDs need not be 0..N-1. On hybrid CPUs
// the type of each core is read by running CPUID leaf 0x1A on that core
// (a locked thread moves to each core in turn and then gets its original
// mask back).
func Cores() ([]Core, error) {
	ids, err := allowedCPUs()
	if err != nil {
		return nil, err
	}
	cores := make([]Core, len(ids))
	for i, id := range ids {
		cores[i] = Core{ID: id, Type: CoreP}
	}
	if !hybridCPU() {
		return cores, nil
	}
	// Probe on a throw-away goroutine that never unlocks its thread: the
	// thread, pinned to each core in turn, exits with the goroutine instead
	// of going back to the runtime with a strange mask.
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		for i := range cores {
			var one unix.CPUSet
			one.Set(cores[i].ID)
			if unix.SchedSetaffinity(0, &one) != nil {
				cores[i].Type = CoreUnknown
				continue
			}
			cores[i].Type = coreTypeHere()
		}
	}()
	<-done
	return cores, nil
}

// allowedCPUs returns the CPU numbers in the process's affinity mask
// (the main thread's mask, read by PID, so that a pinned worker thread
// never reports only its own core).
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(os.Getpid(), &set); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAffinity, os.NewSyscallError("sched_getaffinity", err))
	}
	var ids []int
	for id := 0; id < len(set)*int(unsafe.Sizeof(set[0]))*8; id++ {
		if set.IsSet(id) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: the process's affinity mask is empty", ErrAffinity)
	}
	return ids, nil
}
