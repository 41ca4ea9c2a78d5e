//go:build !amd64

package sched

// hybridCPU reports false: core-type detection is implemented for amd64 only
// (arm64 big.LITTLE would read /sys/devices/system/cpu/cpuN/cpu_capacity).
func hybridCPU() bool { return false }

func coreTypeHere() CoreType { return CoreUnknown }

func cpuFast() int { return -1 }
