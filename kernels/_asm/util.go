package main

import (
	"fmt"

	"github.com/mmcloughlin/avo/attr"
	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Vector registers are assigned by hand from a pool (the kernels are register-bound and
// the AVX2 ones must stay within 0-15); general registers are avo's virtual registers.

var zregs = []VecPhysical{Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15,
	Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31}
var yregs = []VecPhysical{Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15,
	Y16, Y17, Y18, Y19, Y20, Y21, Y22, Y23, Y24, Y25, Y26, Y27, Y28, Y29, Y30, Y31}

// pool hands out vector registers of one width (zmm, or ymm 0-15 for AVX2 code).
type pool struct {
	regs []VecPhysical
	used []bool
}

func newPool(z bool) *pool {
	if z {
		return &pool{regs: zregs, used: make([]bool, 32)}
	}
	return &pool{regs: yregs[:16], used: make([]bool, 16)}
}

func (p *pool) get() VecPhysical {
	for i, u := range p.used {
		if !u {
			p.used[i] = true
			return p.regs[i]
		}
	}
	panic(fmt.Sprintf("out of vector registers (%d)", len(p.regs)))
}

func (p *pool) getn(n int) []VecPhysical {
	r := make([]VecPhysical, n)
	for i := range r {
		r[i] = p.get()
	}
	return r
}

func (p *pool) put(rs ...VecPhysical) {
	for _, r := range rs {
		for i, q := range p.regs {
			if q == r {
				if !p.used[i] {
					panic("double free of " + r.Asm())
				}
				p.used[i] = false
			}
		}
	}
}

// fn starts a function taking one argument-block pointer and returns that pointer.
func fn(name string, doc ...string) GPVirtual { return fnAttr(name, NOSPLIT, doc...) }

// fnAttr is fn with the given TEXT attributes (0 for functions whose frame is too big for
// NOSPLIT: the assembler then adds the stack check).
func fnAttr(name string, attr attr.Attribute, doc ...string) GPVirtual {
	header(name, attr, "func(a *byte)", doc...)
	return Load(Param("a"), GP64()).(GPVirtual)
}

// header starts function name of signature sig (noescape, documented by doc) on a 64-byte
// line.
func header(name string, attr attr.Attribute, sig string, doc ...string) {
	TEXT(name, attr, sig)
	Pragma("noescape")
	Doc(doc...)
	// Every function starts a 64-byte line (the linker aligns a function holding a PCALIGN to
	// it, and places the others 32 bytes apart), so a kernel's code sits the same way in its
	// lines whatever is linked before it, and a kernel's measurement holds across changes to
	// the others. (On a 2-vCPU Xeon guest with a 480 MiB L3, builds differing only in code
	// placement read DRAM up to 10% apart in the one-token i2s GEMV at K = 2560.)
	Instruction(&ir.Instruction{Opcode: "PCALIGN", Operands: []Op{U8(64)}})
}

// ld loads the 8-byte field at off of the block at a into a new register.
func ld(a Register, off int) GPVirtual {
	r := GP64()
	MOVQ(Mem{Base: a, Disp: off}, r)
	return r
}

func at(base Register, disp int) Mem { return Mem{Base: base, Disp: disp} }

func idx(base, index Register, scale uint8, disp int) Mem {
	return Mem{Base: base, Index: index, Scale: scale, Disp: disp}
}

// bcastByte fills v with byte b (via a general register).
func bcastByte(v VecPhysical, b byte) { bcastDword(v, uint32(b)*0x01010101) }

// bcastDword fills v with dword d. A zmm takes it straight from a general register; that
// form exists only in AVX-512 (EVEX), so a ymm or xmm, which AVX2 code uses, goes through
// its xmm (vmovd, then the AVX2 broadcast from a register).
func bcastDword(v VecPhysical, d uint32) {
	t := GP32()
	MOVL(U32(d), t)
	if v.Size() == 64 {
		VPBROADCASTD(t, v)
		return
	}
	MOVD(t, v.AsX())
	VPBROADCASTD(v.AsX(), v)
}

func bcastWord(v VecPhysical, w uint16) { bcastDword(v, uint32(w)*0x10001) }

// bcastQword fills the zmm v with qword q.
func bcastQword(v VecPhysical, q uint64) {
	t := GP64()
	MOVQ(U64(q), t)
	VPBROADCASTQ(t, v)
}

// gfField returns the vgf2p8affineqb matrix (one qword) that moves the n-bit field at bit
// from of every byte down to bits n-1..0 and clears the rest: output bit i of a byte is the
// parity of the matrix's byte 7-i and the input byte, so byte 7-i selects input bit from+i.
func gfField(from, n int) uint64 {
	var m uint64
	for i := 0; i < n; i++ {
		m |= uint64(1) << (from + i) << (8 * (7 - i))
	}
	return m
}

// shiftCtl returns the vpmultishiftqb control (one qword) under which byte j of every qword
// takes the eight bits from bit 8j+s on (mod 64): each word's bits 0 to 15-s are then the
// word shifted right by s (the bits above come from the next word), as a lookup on its low
// bits needs.
func shiftCtl(s int) uint64 {
	var c uint64
	for j := 0; j < 8; j++ {
		c |= uint64((8*j+s)&63) << (8 * j)
	}
	return c
}

// pairCtl returns the vpmultishiftqb control (one qword) under which both bytes of every
// word take the eight bits from the word's bit s on (s <= 8): the five-bit field at bit s
// is then the low bits of each byte, as a vpermb on byte planes needs (tl2Block).
func pairCtl(s int) uint64 {
	var c uint64
	for j := 0; j < 8; j++ {
		c |= uint64(16*(j/2)+s) << (8 * j)
	}
	return c
}

// table defines a read-only data symbol of bytes.
func table(name string, b []byte) Mem {
	m := GLOBL(name, RODATA|NOPTR)
	for i, v := range b {
		DATA(i, U8(v))
	}
	return m
}

func dwordTable(name string, d []uint32) Mem {
	m := GLOBL(name, RODATA|NOPTR)
	for i, v := range d {
		DATA(4*i, U32(v))
	}
	return m
}
