package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Argument block offsets: kernels.int1Args.
const (
	iW, iNRB, iBStride, iBlocks, iX, iXStride = 0, 8, 16, 24, 32, 40
	iTab, iTabStride, iSums, iSStride, iAcc   = 48, 56, 64, 72, 80
)

// int1Flush is how many blocks a row's int16 sum takes before it is widened into Sums: a
// block adds sum_k w*x over 32 inputs, at most 32*128 = 4096 in magnitude (every x = -128),
// and 7*4096 = 28672 <= 32767 < 8*4096. (The widening is two vpmovsxwd and two vpaddd
// into Sums against a store and a load of Acc; the most blocks int16 holds is also the
// fewest widenings.)
const int1Flush = 7

// int1BlockBytes is one row block's bytes of an int1 block (32 rows x 32 inputs).
const int1BlockBytes = 128

// int1TabBlock is the bytes of one token's tables of one block in the frame of the kernels
// for three and four tokens: 8 quads, 64 bytes (32 words) each.
const int1TabBlock = 8 * 64

// int1Consts are the registers of the table build from biased activations: a quad's four
// bytes u_i = x_i+128 broadcast to every dword, vpdpbusd of them against pat (dword c: the
// four signs of code c as bytes +-1) onto cst (dword c: -128 times the sum of code c's
// signs) gives T_q[c] in dword c, and vpermw by dup (word e: 2*(e&15)) takes the dwords'
// low words twice over: the quad's table as kernels/int1.go describes it (32 words, entry e
// = T_q[e & 15]). Four instructions a table.
type int1Consts struct{ pat, cst, dup VecPhysical }

var int1PatM, int1CstM, int1DupM Mem

// int1Tables defines the constant tables of int1Consts (once a file).
func int1Tables() {
	var patB []byte
	var cstD []uint32
	var dupW []byte
	for c := 0; c < 16; c++ {
		s := 0
		for j := 0; j < 4; j++ {
			if c>>j&1 != 0 {
				patB = append(patB, 0xff)
				s--
			} else {
				patB = append(patB, 1)
				s++
			}
		}
		cstD = append(cstD, uint32(int32(-128*s)))
	}
	for i := 0; i < 32; i++ {
		v := uint16(2 * (i % 16))
		dupW = append(dupW, byte(v), byte(v>>8))
	}
	int1PatM = table("int1Pat", patB)
	int1CstM = dwordTable("int1Cst", cstD)
	int1DupM = table("int1Dup", dupW)
}

func (k int1Consts) load() {
	VMOVDQU64(int1PatM, k.pat)
	VMOVDQU64(int1CstM, k.cst)
	VMOVDQU64(int1DupM, k.dup)
}

// table builds the table of the quad whose biased activations are at x into out, with t
// (not out) as scratch.
func (k int1Consts) table(x Mem, t, out VecPhysical) {
	if t == out {
		panic("int1Consts.table: scratch is out")
	}
	VPBROADCASTD(x, t)
	VMOVDQA64(k.cst, out)
	VPDPBUSD(k.pat, t, out)
	VPERMW(out, k.dup, out)
}

// genInt1Panels writes int1PanelT1AVX512 to int1PanelT4AVX512 (genInt1Panel).
func genInt1Panels() {
	int1Tables()
	for T := 1; T <= 4; T++ {
		genInt1Panel(T)
	}
}

// genInt1Panel writes int1PanelT<T>AVX512, the int1 GEMV of T tokens over row blocks of one
// panel of an int1 blob (layout kernels/9, kernels/int1.go; kernels.int1Args): block by
// block, every row block of the call in turn, whose 128 bytes of the block follow one
// another, so the weights stream in order. Once a block (and call) it builds the block's 8
// quad tables of every token from the biased activations at X (int1Consts: four
// instructions a table); then, for each row block, per plane one load and three shifts
// (by 4, 8, 12) bring the four nibbles down, and each token looks every nibble up with a
// vpermw (which reads the low five bits of each word: the table is there twice over, so
// bit 4 does not matter) and adds it into int16 chains (four a token with one token, two
// with more). A row block's int16 sums over up to int1Flush blocks wait in Acc between
// blocks, then are widened into Sums (row block i's at Sums + i*SStride). No kernel reads
// Tab.
//
// Where the tables live, and the prefetch, were chosen by measurement: a DRAM timing test
// (kernels/int1panel_time_test.go as of commit 3760b82, removed once the kernels/8 kernels
// it timed against were gone; a working set of at least 1 GiB, 31 rounds that alternate
// their order in one process, the rounds in which the process had its CPUs; 2-vCPU Zen 4
// guest, shared), run as `env BITD_INT1_TIME=4096x14336,14336x4096,2560x2560
// BITD_INT1_TIME_TOKENS=1,2,3,4 [BITD_INT1_TIME_THREADS=2 BITD_INT1_TIME_SPLIT=panels] go
// test ./kernels -run Int1PanelTime -v`; the variants were scratch kernels, timed against
// each other in one process by that test's version in commit ffeffa2 (BITD_INT1_TIME_K and
// BITD_INT1_TIME_VS), which holds them. Figures are the medians of the per-round ratios on
// 4096x14336, 14336x4096 and 2560x2560 in turn.
//
//   - One token (the prototype's design): the 8 tables in registers, no software prefetch.
//     prefetcht1 8 KiB ahead against none: 0.99, 0.98, 1.04 at one thread, 0.94, 0.95,
//     0.96 at two. It reads about what one thread reads from DRAM there (28-30 GB/s
//     against 30-31).
//   - Two tokens: the 16 tables in registers (27 of the 32 zmm), prefetcht1 panelAheadT1 (8
//     KiB) ahead, two lines a row block. From two tokens on the kernels are bound by their
//     vpermw and vpaddw (a scratch loop of eight independent zmm vpermw: 0.27 ns each, one a
//     cycle; with a vpaddw each 0.34 ns), and the prefetch keeps the stream coming behind
//     them: against none 1.28, 1.27, 1.25 (one thread), 1.17, 1.27, 1.15 (two); 4 KiB ahead
//     0.95, 0.95, 0.94 of 8, 16 KiB 1.00, 1.00, 0.99. Tables in memory instead (those 32
//     words a quad, built once a call by an assembly builder, vpermw from memory) 0.92, 0.94, 0.94 (one
//     thread); built once a block into the frame, as three and four tokens do, 0.98, 0.97,
//     0.93 (two).
//   - Three and four tokens: 24 or 32 tables do not fit beside the chains, so the block's
//     tables are built once a block into the frame (512 bytes a token, 64-byte aligned) and
//     each vpermw reads its table from there (L1); prefetcht1 8 KiB ahead as with two.
//     Against tables built once a call (as with two tokens; read from L2 or L3 at each panel):
//     three tokens 1.00, 0.99, 0.99 at one thread and 1.22, 1.09, 1.31 at two; four tokens
//     1.06 and 0.99, 0.95 and 0.98, 0.96 and 0.97 (two runs) at one thread and 1.20, 1.28,
//     1.29 at two (both threads read every table, which one of them wrote). With tables in
//     memory, prefetching later blocks' tables (prefetcht0, a line a row block) did not
//     help (0.98-1.00), nor did the weights' prefetch distance matter (four tokens: 4 and 16
//     KiB 1.00-1.01 of 8).
//
// From L2 (BenchmarkInt1Panel: one panel, K = 2560, one thread; `go test ./kernels -run
// XXX -bench Int1Panel -count=3`) one to four tokens read 35.2-35.7, 19.7-20.1, 12.6-13.1
// and 9.2-9.7 GB/s: from two tokens on as fast as from DRAM.
//
// Against the kernels/8 VNNI4 kernels (each over n tokens a call): int1Versus. Threads
// should take whole panels: two threads that split a panel's row blocks between them
// (2560x2560, 40 row blocks each, so each reads 1 or 3 KiB of every 4 KiB block of the
// middle panel) ran the one-token kernel at 0.48x and 0.71x of the old one in two runs
// (two to four tokens 1.11-1.16x, 1.22-1.30x, 1.28-1.30x), against 1.03-1.04x with whole
// panels; prefetching each row block's lines in the blocks that hold the call's 8 KiB
// ahead did not change that (0.76x).
//
// Left for later: five-bit fields (bits 0-4, 5-9 and 10-14 of each word against 32-entry
// tables of five inputs, the two planes' bit 15 gathered into one more lookup: 7 lookups a
// block instead of 8) read 1.08, 1.08 (two tokens) and 1.10, 1.10 (four) on 4096x14336
// and 2560x2560 at one thread in a timing-only kernel that did the lookups but not the
// dearer build of those tables; 1.01, 1.00 with one token.
func genInt1Panel(T int) {
	name := fmt.Sprintf("int1PanelT%dAVX512", T)
	regs := T <= 2 // the tables in registers (else in the frame)
	pf := T >= 2   // prefetcht1 panelAheadT1 ahead
	var a GPVirtual
	var frame Mem
	if regs {
		a = fn(name, int1PanelDoc(name, T)...)
	} else {
		a = fnAttr(name, 0, int1PanelDoc(name, T)...) // (a frame of 512*T+64 bytes)
		frame = AllocLocal(int1TabBlock*T + 64)
	}
	p := newPool(true)
	var treg [][]VecPhysical // [token][quad]: the block's tables (regs)
	if regs {
		treg = make([][]VecPhysical, T)
		for t := range treg {
			treg[t] = p.getn(8)
		}
	}
	k := int1Consts{p.get(), p.get(), p.get()}
	k.load()
	nch := 4 // int16 chains a token
	if T > 1 {
		nch = 2
	}
	chains := make([][]VecPhysical, T)
	for t := range chains {
		chains[t] = p.getn(nch)
	}
	d := p.getn(2)
	v, c := p.get(), p.get()

	w0, nb, xp := ld(a, iW), ld(a, iBlocks), ld(a, iX)
	var xs, xs3 GPVirtual // XStride, 3*XStride
	if T > 1 {
		xs = ld(a, iXStride)
	}
	if T > 3 {
		xs3 = GP64()
		MOVQ(xs, xs3)
		IMUL3Q(U8(3), xs3, xs3)
	}
	// xq is token t's quad q's four biased activations of the block.
	xq := func(t, q int) Mem {
		switch t {
		case 0:
			return at(xp, 4*q)
		case 3:
			return idx(xp, xs3, 1, 4*q)
		}
		return idx(xp, xs, uint8(t), 4*q)
	}
	w, sp, ap, n, g := GP64(), GP64(), GP64(), GP64(), GP64()
	TESTQ(nb, nb)
	JZ(LabelRef(name + "_end"))
	var tb GPVirtual // the frame's tables, 64-byte aligned (!regs)
	if !regs {
		tb = GP64()
		LEAQ(frame, tb)
		ADDQ(U8(63), tb)
		ANDQ(I8(-64), tb)
	}

	// block emits one block over the call's row blocks: load adds a row block's int16 sums
	// so far from Acc, widen adds the block's into Sums (else they go to Acc).
	block := func(lbl string, load, widen bool) {
		i := 0
		for t := 0; t < T; t++ { // the block's tables (d, v and c are free here)
			for q := 0; q < 8; q++ {
				if regs {
					k.table(xq(t, q), []VecPhysical{d[0], d[1], v, c}[i%4], treg[t][q])
				} else {
					tm, o := []VecPhysical{d[0], v}[i%2], []VecPhysical{d[1], c}[i%2]
					k.table(xq(t, q), tm, o)
					VMOVDQA64(o, at(tb, int1TabBlock*t+64*q))
				}
				i++
			}
		}
		MOVQ(w0, w)
		MOVQ(at(a, iSums), sp)
		MOVQ(at(a, iAcc), ap)
		MOVQ(at(a, iNRB), n)
		Label(lbl)
		if pf {
			PREFETCHT1(at(w, panelAheadT1))
			PREFETCHT1(at(w, panelAheadT1+64))
		}
		lk := &panelLooker{chains: chains, d: d}
		look := func(q int, ix VecPhysical) {
			lk.look(q, ix, func(t int) Op {
				if regs {
					return treg[t][q]
				}
				return at(tb, int1TabBlock*t+64*q)
			})
		}
		for h := 0; h < 2; h++ {
			VMOVDQU64(at(w, 64*h), v)
			look(4*h, v)
			for f := 1; f < 4; f++ {
				VPSRLW(U8(4*f), v, c)
				look(4*h+f, c)
			}
		}
		panelBlockEnd(chains, ap, sp, d, load, widen) // (the lookups' registers d are free here)
		ADDQ(U32(int1BlockBytes), w)
		ADDQ(U32(64*T), ap)
		ADDQ(at(a, iSStride), sp)
		DECQ(n)
		JNZ(LabelRef(lbl))
		ADDQ(at(a, iBStride), w0)
		ADDQ(U8(32), xp)
	}
	panelGroupsN(name, nb, g, int1Flush, nil, block)
	Label(name + "_end")
	VZEROUPPER()
	RET()
}

// int1PanelDoc is the doc comment of int1PanelT<T>AVX512.
func int1PanelDoc(name string, T int) []string {
	tabs, pf := "in registers", "leaves the weights' prefetch to the hardware"
	if T > 2 {
		tabs = fmt.Sprintf("in its frame (%d bytes)", int1TabBlock*T+64)
	}
	if T > 1 {
		pf = "prefetches the weights 8 KiB ahead into L2"
	}
	return []string{
		fmt.Sprintf("%s is the int1 GEMV of %d token(s) over the row blocks of one panel of a kernels/9 blob (see int1Args);", name, T),
		"int1PanelGeneric is its reference. It reads the biased activations at X (never Tab) and builds each",
		fmt.Sprintf("block's quad tables (int1.go) from them once a block, %s; it %s, and keeps", tabs, pf),
		fmt.Sprintf("int16 sums in Acc over up to %d blocks. Measured design: kernels/_asm/int1.go (genInt1Panel).", int1Flush),
		int1Versus[T] + " (4096x14336, 14336x4096, 2560x2560; int1Versus)",
	}
}

// int1Versus is, per token count, what int1PanelT<T>AVX512 read from DRAM against the
// kernels/8 VNNI4 int1 kernel the Layer API selects for T tokens (avx512vnni/int1, which
// reads any bytes at the same rate: timing only): the medians of the per-round ratios on
// 4096x14336, 14336x4096 and 2560x2560, two runs of the command of genInt1Panel's comment
// (a third at one thread for 14336x4096 with three and four tokens; 31 rounds each; the old kernel's time includes its activation preparation and its
// epilogue, the new one's neither), at one thread and at two with whole panels a thread
// (BITD_INT1_TIME_SPLIT=panels; 2560x2560's three panels split one and two). One thread
// read 29.8-31.2 GB/s there; two 35-62, varying from minute to minute.
var int1Versus = map[int]string{
	1: "From DRAM against the kernels/8 kernel: 1.22-1.26x, 1.20-1.24x, 1.13-1.15x at one thread (28-30 GB/s); 1.04-1.29x, 1.04-1.05x, 1.03-1.04x at two.",
	2: "From DRAM against the kernels/8 kernel: 1.37x, 1.37-1.38x, 1.38-1.39x at one thread (19 GB/s); 1.23-1.41x, 1.20-1.25x, 1.13-1.14x at two.",
	3: "From DRAM against the kernels/8 kernel: 1.32x, 1.23-1.32x, 1.33-1.34x at one thread (12.3-12.6 GB/s); 1.31-1.33x, 1.24-1.32x, 1.08-1.13x at two.",
	4: "From DRAM against the kernels/8 kernel: 1.32-1.33x, 1.22-1.32x, 1.30-1.32x at one thread (8.6-9.5 GB/s); 1.32-1.33x, 1.29-1.31x, 1.12-1.13x at two.",
}
