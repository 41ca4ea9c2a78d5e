//go:build amd64 && !noasm

#include "textflag.h"

// func cpuid(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL subleaf+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func rdpid() uint32
// RDPID (F3 0F C7 /7, not known to the Go assembler) reads IA32_TSC_AUX,
// where Linux stores node<<12 | cpu.
TEXT ·rdpid(SB), NOSPLIT, $0-4
	BYTE $0xF3; BYTE $0x0F; BYTE $0xC7; BYTE $0xF8 // RDPID AX
	MOVL AX, ret+0(FP)
	RET

// func rdtscpAux() uint32
TEXT ·rdtscpAux(SB), NOSPLIT, $0-4
	RDTSCP
	MOVL CX, ret+0(FP)
	RET
