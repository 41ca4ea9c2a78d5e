//go:build amd64 && !noasm

package sched

// cpuid executes the CPUID instruction with EAX = leaf and ECX = subleaf on
// the current core. It is four lines of hand-written assembly (cpuid_amd64.s):
// no SIMD, so it is not worth an avo generator.
//
//go:noescape
func cpuid(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32)

// rdpid returns IA32_TSC_AUX (RDPID); call only when hasRDPID.
//
//go:noescape
func rdpid() uint32

// rdtscpAux returns IA32_TSC_AUX (RDTSCP); call only when hasRDTSCP.
//
//go:noescape
func rdtscpAux() uint32

var (
	hasRDPID  = func() bool { _, _, ecx, _ := cpuid(7, 0); return ecx&(1<<22) != 0 }()
	hasRDTSCP = func() bool {
		if max, _, _, _ := cpuid(0x80000000, 0); max < 0x80000001 {
			return false
		}
		_, _, _, edx := cpuid(0x80000001, 0)
		return edx&(1<<27) != 0
	}()
)

// cpuFast returns the number of the CPU the thread runs on from
// IA32_TSC_AUX (3 ns with RDPID, 20 ns with RDTSCP, against 130 ns for the
// getcpu system call on the development VM), or -1 when neither
// instruction exists. Linux keeps node<<12 | cpu there.
func cpuFast() int {
	switch {
	case hasRDPID:
		return int(rdpid() & 0xfff)
	case hasRDTSCP:
		return int(rdtscpAux() & 0xfff)
	}
	return -1
}

// hybridCPU reports whether the CPU declares itself hybrid
// (CPUID.(EAX=07H,ECX=0):EDX[15], Intel Alder Lake and later).
func hybridCPU() bool {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 0x1a {
		return false
	}
	_, _, _, edx := cpuid(7, 0)
	return edx&(1<<15) != 0
}

// coreTypeHere returns the type of the core the calling thread runs on,
// from CPUID leaf 0x1A (EAX[31:24]: 0x20 Atom = E-core, 0x40 Core = P-core).
func coreTypeHere() CoreType {
	eax, _, _, _ := cpuid(0x1a, 0)
	switch eax >> 24 {
	case 0x20:
		return CoreE
	case 0x40:
		return CoreP
	default:
		return CoreUnknown
	}
}
