package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Argument block offsets: kernels.panelArgs.
const (
	pW, pNRB, pBStride, pBlocks, pTab, pTabStride, pSums, pAcc = 0, 8, 16, 24, 32, 40, 48, 56
)

// tl2PanelFlush is how many blocks a row's int16 sum takes before it is widened: 16
// entries of |e| <= 381 a block, at most 32767.
const tl2PanelFlush = 5

// panelAheadT1 is how far ahead the panel kernels of two or more tokens prefetch their
// weights into L2 (prefetcht1). Their tables are read from L1, which the weights' lines
// would evict; one token's are in registers, and it leaves the weights to the hardware's
// prefetchers. Measured (Zen 4 guest, DRAM, one thread, 2560x2560 and 4096x14336, two
// tokens / four tokens, GB/s): none 10.2, 14.9 / 7.1, 9.1; prefetcht0 2 KiB ahead 11.2,
// 15.6 / 7.0, 9.2; 8 KiB 11.3, 14.3 / 7.8, 8.8; prefetcht1 8 KiB 18.8, 19.2 / 9.7,
// 10.5, the chunk-major layout's kernels 16.5, 20.5 / 9.8, 10.5 in the same run. With one
// token any software prefetch was slower: prefetcht1 4, 8 and 16 KiB ahead 0.82-0.85x,
// 0.81-0.86x and 0.78-0.82x on 2560x2560 against none. Against 8 KiB (tl2 per token over
// i2s at one thread, 4096x14336, 14336x4096 and 4096x4096, two and four tokens, two or
// three runs in turn): 4 KiB 0.86-0.99x, 16 KiB 0.95-1.00x; a prefetchnta 640 or 1280
// bytes ahead besides, marking the lines non-temporal as the chunk kernels' NT variants
// do, 0.95-1.05x (medians; the noise).
const panelAheadT1 = 8192

// panelTabBlock is the bytes between consecutive blocks' Tab of a token in the panel kernel
// for T tokens: one token's kernel reads the block's 48 activations (it builds the tables
// itself), more tokens' read tables that lie 1 KiB a block as lutBuildTL2AVX512 writes them.
func panelTabBlock(T int) int {
	if T == 1 {
		return 48 // (a tl2 block)
	}
	return 1024
}

// genTL2Panel writes tl2PanelT<T>AVX512, the tl2 GEMV of T tokens over row blocks of one
// panel of the panel-major blob (see kernels.panelArgs): block by block, every row block
// of the panel in turn, whose 320 bytes of the block follow one another, so the weights
// stream in order. With one token the block's 16 triple tables (tabTL2Z) are computed into
// registers from its 48 activations (Tab; tl2Builder.table, seven instructions a table)
// once a block and panel, and serve every row block; with more, each lookup reads its
// table from memory (L1 after the block's first row block). A row block's int16 sums over
// up to tl2PanelFlush blocks wait in Acc between blocks, then are widened into Sums.
//
// One token's tables were built before the sweep, for all of K, in two copies that
// consecutive panels took in turn, 2 KiB a block (tl2PanelBuildAVX512), and loaded a block
// at a time. The build took 1.5-1.9 us a call at K = 2560 and 6.6 at K = 6912 (one thread),
// but that was not all it cost: without it (timing only) tl2 ran 1.05-1.20x as fast at one
// thread on 2560x2560, 1.03-1.07x on 2560x6912, and 1.11-1.16x at two threads on cores the
// threads shared (a build on each). Building one copy instead of two (timing only) won back
// a part (1.01-1.06x at one thread). A reading, not measured directly: the tables (53 KiB
// a copy at K = 2560) are written once a call and evicted by the weights before the next,
// so their dirty lines go back to DRAM beside the weights' reads; both copies are 8% of the
// bytes a 2560x2560 call reads. Built in registers instead, once a block and panel, it ran (`bitd bench -tuning default,zen4`
// with the new kernel under zen4, three runs of 9 rounds, from DRAM; one thread / two):
// 2560x2560 1.10-1.18 / 1.05-1.25, 2560x6912 1.05-1.08 / 1.10-1.11, 3840x2560 1.06-1.09 /
// 1.12-1.19, 13824x2560 0.98-1.04 / 1.03-1.06, 14336x4096 1.04-1.07 / 0.93-1.08,
// 4096x14336 0.99-1.09 / 1.01-1.08. The build's seven instructions a table add about 6%
// to a block's lookups of 32 row blocks.
//
// Of the built tables, earlier measurements (tl2 per token over i2s from DRAM at one
// thread): two copies against one 1.15-1.26 against 1.04-1.08 on 2560x6912, alike on the 8B
// shapes, which the build's dirty lines would explain; building them run by run as the
// first panel reached them 0.94-1.01x of building them all first; at K = 2560 panels of 64
// row blocks 0.98-1.02x of 32, of 120 0.91-0.97x.
//
// Each plane of the block stays in a register of its own, and triple 15's code is gathered
// after the last, from plane 4 down (x = x<<1 | plane>>15), one vpshldw a plane.
func genTL2Panel(T int) {
	name := fmt.Sprintf("tl2PanelT%dAVX512", T)
	a := fn(name, fmt.Sprintf("%s is the tl2 GEMV of %d token(s) over the row blocks of one panel (see panelArgs); tl2PanelGeneric is its reference.", name, T))
	p := newPool(true)
	var tabs []VecPhysical // one token: the block's tables
	if T == 1 {
		tabs = p.getn(16)
	}
	nch := 4 // int16 chains a token
	// (Two row blocks an iteration, each table of two or three tokens loaded into a
	// register once for both, ran slower: tl2 per token over i2s from DRAM at one thread,
	// two runs, 4096x14336 and 14336x4096, two tokens 0.86-0.93 against 0.94-0.98, three
	// 0.86-0.90 against 0.90-0.93. Chains of a vpaddd a row block that nothing reads, which
	// make the i2s row kernel's stream from DRAM faster (rowPad), slow the one-token one:
	// three 0.98-1.00x, six 0.96-0.99x at one thread, 4096x14336, 14336x4096 and 4096x4096,
	// 31 rounds in one process against the kernel without them.)
	if T > 1 {
		nch = 2
	}
	planes := p.getn(5)
	c, x := p.get(), p.get()
	chains := make([][]VecPhysical, T) // [token][chain]
	for t := range chains {
		chains[t] = p.getn(nch)
	}
	d := p.getn(2)
	w0, nb := ld(a, pW), ld(a, pBlocks)
	tp := make([]GPVirtual, T) // token t's tables of the block
	for t := range tp {
		tp[t] = ld(a, pTab)
		if t > 0 {
			ts := ld(a, pTabStride)
			if t > 1 {
				IMUL3Q(U8(t), ts, ts)
			}
			ADDQ(ts, tp[t])
		}
	}
	w, sp, ap, n, g := GP64(), GP64(), GP64(), GP64(), GP64()
	TESTQ(nb, nb)
	JZ(LabelRef(name + "_end"))

	// block emits one block over the panel's row blocks: load adds a row block's int16
	// sums so far from Acc, widen adds the block's into Sums (else they go to Acc).
	block := func(lbl string, load, widen bool) {
		if T == 1 { // the block's tables from its activations (planes, c and x are free here)
			b := &tl2Builder{p01: planes[0], p2e: planes[1], x80: planes[2], hi: planes[3], v: c, tm: x}
			b.load()
			for t := range tabs {
				b.table(at(tp[0], 3*t), tabs[t])
			}
		}
		MOVQ(w0, w)
		MOVQ(at(a, pSums), sp)
		MOVQ(at(a, pAcc), ap)
		MOVQ(at(a, pNRB), n)
		Label(lbl)
		if T > 1 { // (see panelAheadT1)
			for j := 0; j < 5; j++ {
				PREFETCHT1(at(w, panelAheadT1+64*j))
			}
		}
		lk := &panelLooker{chains: chains, d: d}
		look := func(tri int, idx VecPhysical) {
			lk.look(tri, idx, func(t int) Op {
				if T == 1 {
					return tabs[tri]
				}
				return at(tp[t], 64*tri)
			})
		}
		for j := 0; j < 5; j++ {
			v := planes[j]
			VMOVDQU64(at(w, 64*j), v)
			look(3*j, v)
			VPSRLW(U8(5), v, c)
			look(3*j+1, c)
			VPSRLW(U8(10), v, c)
			look(3*j+2, c)
		}
		VPSRLW(U8(15), planes[4], x)
		for j := 3; j >= 0; j-- {
			VPSHLDW(U8(1), planes[j], x, x)
		}
		look(15, x)
		panelBlockEnd(chains, ap, sp, d, load, widen) // (the lookups' registers d are free here)
		panelNext(lbl, a, panelRegs{w, ap, sp, n, w0}, tp, panelTabBlock(T))
	}

	panelGroups(name, nb, g, block)
	Label(name + "_end")
	VZEROUPPER()
	RET()
}

// genTL2PanelY writes tl2PanelT<T>AVX2, genTL2Panel's kernel on ymm for one or two tokens:
// the tables are tabTL2Y (512 bytes a block, token t's at Tab + t*TabStride), looked up
// as the chunk kernels do (lutY.tl2Block).
func genTL2PanelY(T int) {
	name := fmt.Sprintf("tl2PanelT%dAVX2", T)
	a := fn(name, fmt.Sprintf("%s is the tl2 GEMV of %d token(s) over the row blocks of one panel (see panelArgs), AVX2; tl2PanelGeneric is its reference.", name, T))
	s := &lutY{p: newPool(false), T: T}
	s.w = GP64()
	s.acc16 = make([][2]VecPhysical, T)
	for t := range s.acc16 {
		copy(s.acc16[t][:], s.p.getn(2))
	}
	s.lo, s.hi, s.l, s.h = s.p.get(), s.p.get(), s.p.get(), s.p.get()
	r := s.tl2Regs()
	w0, nb := ld(a, pW), ld(a, pBlocks)
	tp := make([]GPVirtual, T) // token t's tables of the block
	for t := range tp {
		tp[t] = ld(a, pTab)
		if t > 0 {
			ADDQ(at(a, pTabStride), tp[t])
		}
	}
	s.tabs = tp
	sp, ap, n, g := GP64(), GP64(), GP64(), GP64()
	TESTQ(nb, nb)
	JZ(LabelRef(name + "_end"))
	block := func(lbl string, load, widen bool) {
		MOVQ(w0, s.w)
		MOVQ(at(a, pSums), sp)
		MOVQ(at(a, pAcc), ap)
		MOVQ(at(a, pNRB), n)
		Label(lbl)
		if load {
			for t := 0; t < T; t++ {
				VMOVDQU(at(ap, 64*t), s.acc16[t][0])
				VMOVDQU(at(ap, 64*t+32), s.acc16[t][1])
			}
		} else {
			zeroAll(s.allAcc16()...)
		}
		s.tl2Block(r, func(j int) { PREFETCHT1(at(s.w, panelAheadT1+64*j)) })
		for t := 0; t < T; t++ {
			if !widen {
				VMOVDQU(s.acc16[t][0], at(ap, 64*t))
				VMOVDQU(s.acc16[t][1], at(ap, 64*t+32))
				continue
			}
			for i, c := range s.acc16[t] { // rows 16i..16i+15
				for half := 0; half < 2; half++ {
					if half == 0 {
						VPMOVSXWD(c.AsX(), s.l)
					} else {
						VEXTRACTI128(U8(1), c, s.l.AsX())
						VPMOVSXWD(s.l.AsX(), s.l)
					}
					m := at(sp, 128*t+32*(2*i+half))
					VPADDD(m, s.l, s.l)
					VMOVDQU(s.l, m)
				}
			}
		}
		panelNext(lbl, a, panelRegs{s.w, ap, sp, n, w0}, tp, 512)
	}
	panelGroups(name, nb, g, block)
	Label(name + "_end")
	VZEROUPPER()
	RET()
}

// panelRegs are a panel kernel's pointers: the row block's block (w), its int16 sums (ap)
// and int32 sums (sp), the row blocks left in the block (n), and the first row block's
// block (w0).
type panelRegs struct{ w, ap, sp, n, w0 Register }

// panelLooker emits a zmm panel kernel's lookups of one row block's block: look(q, idx,
// tab) looks idx up in each token t's table tab(t) (vpermw) and adds it into the token's
// int16 chain q%len(chains[t]); the first lookups of the block start the chains, the
// others go through the scratch registers d in turn.
type panelLooker struct {
	chains [][]VecPhysical
	d      []VecPhysical
	k      int
}

func (l *panelLooker) look(q int, idx VecPhysical, tab func(t int) Op) {
	for t, chs := range l.chains {
		ch := chs[q%len(chs)]
		if q < len(chs) {
			VPERMW(tab(t), idx, ch)
			continue
		}
		r := l.d[l.k%len(l.d)]
		l.k++
		VPERMW(tab(t), idx, r)
		VPADDW(r, ch, ch)
	}
}

// panelBlockEnd ends a zmm panel kernel's block of one row block: each token's int16 chains
// (chains[t]) added into the first, with the sums so far from Acc (ap) if load, then either
// left in Acc or, if widen, widened and added into Sums (sp); d are two free registers.
func panelBlockEnd(chains [][]VecPhysical, ap, sp Register, d []VecPhysical, load, widen bool) {
	for t, ch := range chains {
		for h := len(ch) / 2; h >= 1; h /= 2 {
			for i := 0; i < h; i++ {
				VPADDW(ch[i+h], ch[i], ch[i])
			}
		}
		if load {
			VPADDW(at(ap, 64*t), ch[0], ch[0])
		}
		if !widen {
			VMOVDQU64(ch[0], at(ap, 64*t))
			continue
		}
		l, l2 := d[0], d[1]
		VPMOVSXWD(ch[0].AsY(), l)
		VPADDD(at(sp, 128*t), l, l)
		VMOVDQU32(l, at(sp, 128*t))
		VEXTRACTI64X4(U8(1), ch[0], l2.AsY())
		VPMOVSXWD(l2.AsY(), l2)
		VPADDD(at(sp, 128*t+64), l2, l2)
		VMOVDQU32(l2, at(sp, 128*t+64))
	}
}

// panelNext ends a panel kernel's row block: w, ap and sp move to the next row block (T =
// len(tp) tokens' sums), and after the block's last row block (back to lbl until then) w0
// to the next block and every token's tables tabBlock bytes on.
func panelNext(lbl string, a Register, r panelRegs, tp []GPVirtual, tabBlock int) {
	T := len(tp)
	ADDQ(U32(320), r.w)
	ADDQ(U32(64*T), r.ap)
	ADDQ(U32(128*T), r.sp)
	DECQ(r.n)
	JNZ(LabelRef(lbl))
	ADDQ(at(a, pBStride), r.w0)
	for _, t := range tp {
		ADDQ(U32(tabBlock), t)
	}
}

// panelGroups emits the panel kernels' loop over nb (a register, counted down) blocks in
// groups of up to tl2PanelFlush: block(label, load, widen) emits one block, load when an
// earlier block of the group left its int16 sums in Acc, widen at the group's last block.
func panelGroups(name string, nb, g Register, block func(lbl string, load, widen bool)) {
	panelGroupsN(name, nb, g, tl2PanelFlush, nil, block)
}

// panelGroupsN is panelGroups with groups of up to flush blocks, and start (if not nil)
// emitted at each group's start, g holding its blocks.
func panelGroupsN(name string, nb, g Register, flush int, start func(), block func(lbl string, load, widen bool)) {
	Label(name + "_grp")
	MOVQ(nb, g) // g = min(nb, flush) blocks in this group
	CMPQ(g, U8(flush))
	JLE(LabelRef(name + "_g"))
	MOVQ(U32(flush), g)
	Label(name + "_g")
	if start != nil {
		start()
	}
	SUBQ(g, nb)
	CMPQ(g, U8(1))
	JNE(LabelRef(name + "_first"))
	block(name+"_only", false, true)
	JMP(LabelRef(name + "_next"))
	Label(name + "_first")
	block(name+"_rb0", false, false)
	DECQ(g)
	Label(name + "_mid")
	CMPQ(g, U8(1))
	JE(LabelRef(name + "_last"))
	block(name+"_rb1", true, false)
	DECQ(g)
	JMP(LabelRef(name + "_mid"))
	Label(name + "_last")
	block(name+"_rb2", true, true)
	Label(name + "_next")
	TESTQ(nb, nb)
	JNZ(LabelRef(name + "_grp"))
}
