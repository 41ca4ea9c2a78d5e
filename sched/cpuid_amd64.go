package sched

// cpuid executes the CPUID instruction with EAX = leaf and ECX = subleaf on
// the current core. It is four lines of hand-written assembly (cpuid_amd64.s):
// no SIMD, so it is not worth an avo generator.
//
//go:noescape
func cpuid(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32)

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
