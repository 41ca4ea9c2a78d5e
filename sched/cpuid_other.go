//go:build !amd64 || noasm

package sched

// hybridCPU reports false: core-type detection needs the amd64 assembly,
// which -tags noasm switches off. (arm64 big.LITTLE would read
// /sys/devices/system/cpu/cpuN/cpu_capacity.)
func hybridCPU() bool { return false }

func coreTypeHere() CoreType { return CoreUnknown }

// cpuFast has no instruction to use here; currentCPU falls back to the
// getcpu system call.
func cpuFast() int { return -1 }
