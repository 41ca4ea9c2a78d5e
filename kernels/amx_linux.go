//go:build linux && amd64 && !noasm

package kernels

import (
	"syscall"
	"unsafe"
)

// Linux's arch_prctl codes for dynamically enabled state (asm/prctl.h) and the AMX tile
// data feature (XFEATURE_XTILEDATA).
const (
	archGetXCompPerm = 0x1022
	archReqXCompPerm = 0x1023
	xfeatureTileData = 18
)

// amxPermit asks for the AMX tile data state for this process and checks it was granted.
func amxPermit() error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archReqXCompPerm, xfeatureTileData, 0); e != 0 {
		return e
	}
	var mask uint64
	if _, _, e := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archGetXCompPerm, uintptr(unsafe.Pointer(&mask)), 0); e != 0 {
		return e
	}
	if mask&(1<<xfeatureTileData) == 0 {
		return syscall.EPERM
	}
	return nil
}
