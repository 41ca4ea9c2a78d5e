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
// and 7*4096 = 28672 <= 32767 < 8*4096.
const int1Flush = 7

// int1TabBlock is the bytes of one token's tabInt1Z tables of one block: 8 quads, 64 each.
const int1TabBlock = 8 * 64

// int1Tabs is where an int1 panel kernel's tables of a block come from.
type int1Tabs int

const (
	int1TabsRegs  int1Tabs = iota // built from X into registers, once a block
	int1TabsMem                   // read from Tab (tabInt1Z, buildInt1TabZAVX512)
	int1TabsStack                 // built from X once a block into the frame, read from there
)

// int1Consts are the registers of the table build from biased activations: a quad's four
// bytes u_i = x_i+128 broadcast to every dword, vpdpbusd against pat (dword c: the four
// signs of code c as bytes +-1) onto cst (dword c: -128 * the sum of code c's signs) gives
// T_q[c] in dword c, and vpermw by dup (word e: 2*(e&15)) takes the dwords' low words twice
// over: the tabInt1Z table.
type int1Consts struct{ pat, cst, dup VecPhysical }

var int1PatM, int1CstM, int1DupM, int1X80M Mem

// int1Tables defines the constant tables of the int1 table build (once a file).
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

// table builds the tabInt1Z table of the quad whose biased activations are at x into out,
// with t as scratch (t may be out).
func (k int1Consts) table(x Mem, t, out VecPhysical) {
	if t == out {
		panic("int1Consts.table: t is out")
	}
	VPBROADCASTD(x, t)
	VMOVDQA64(k.cst, out)
	VPDPBUSD(k.pat, t, out)
	VPERMW(out, k.dup, out)
}

var int1Quint bool

// genInt1Panels writes the int1 panel kernels and the tabInt1Z builder.
func genInt1Panels() {
	int1Tables()
	genBuildInt1TabZ()
	genInt1PanelNamed("int1PanelT1AVX512", 1, int1TabsRegs, false)
	genInt1PanelNamed("int1PanelT1AVX512PF", 1, int1TabsRegs, true)
	genInt1PanelNamed("int1PanelT2AVX512", 2, int1TabsRegs, false)
	genInt1PanelNamed("int1PanelT2AVX512PF", 2, int1TabsRegs, true)
	genInt1PanelNamed("int1PanelT2AVX512Mem", 2, int1TabsMem, true)
	genInt1PanelNamed("int1PanelT2AVX512Stk", 2, int1TabsStack, true)
	genInt1PanelPF("int1PanelT3AVX512TP", 3, int1TabsMem, panelAheadT1, true)
	genInt1PanelPF("int1PanelT4AVX512TP", 4, int1TabsMem, panelAheadT1, true)
	int1Quint = true
	genInt1PanelPF("int1PanelT1AVX512Q", 1, int1TabsRegs, 0, false)
	genInt1PanelPF("int1PanelT2AVX512Q", 2, int1TabsRegs, panelAheadT1, false)
	genInt1PanelPF("int1PanelT4AVX512Q", 4, int1TabsMem, panelAheadT1, false)
	int1Quint = false
	for T := 3; T <= 4; T++ {
		genInt1PanelNamed(fmt.Sprintf("int1PanelT%dAVX512", T), T, int1TabsMem, true)
		genInt1PanelNamed(fmt.Sprintf("int1PanelT%dAVX512Stk", T), T, int1TabsStack, true)
	}
}

// genInt1PanelNamed writes an int1 panel kernel of T tokens whose tables come from tabs;
// pf: prefetch the weights panelAheadT1 ahead into L2.
func genInt1PanelNamed(name string, T int, tabs int1Tabs, pf bool) {
	genInt1PanelPF(name, T, tabs, map[bool]int{true: panelAheadT1}[pf], false)
}

func genInt1PanelPF(name string, T int, tabs int1Tabs, pf int, tabPF bool) {
	var a GPVirtual
	var frame Mem
	if tabs == int1TabsStack {
		a = fnAttr(name, 0, name+" doc")
		frame = AllocLocal(int1TabBlock*T + 64)
	} else {
		a = fn(name, name+" doc")
	}
	p := newPool(true)
	var treg [][]VecPhysical // [token][quad]: the block's tables (int1TabsRegs)
	var k int1Consts
	if tabs == int1TabsRegs {
		treg = make([][]VecPhysical, T)
		for t := range treg {
			treg[t] = p.getn(8)
		}
	}
	if tabs != int1TabsMem {
		k = int1Consts{p.get(), p.get(), p.get()}
		k.load()
	}
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
	var qx VecPhysical
	if int1Quint {
		qx = p.get()
	}

	w0, nb := ld(a, iW), ld(a, iBlocks)
	var xp GPVirtual   // token 0's activations of the block
	var xs GPVirtual   // XStride
	var tp []GPVirtual // token t's tables of the block (int1TabsMem)
	var tpf GPVirtual // tabPF: the row block's table line ahead, 64 bytes a row block
	if tabPF {
		tpf = GP64()
	}
	switch tabs {
	case int1TabsMem:
		tp = make([]GPVirtual, T)
		for t := range tp {
			tp[t] = ld(a, iTab)
			if t > 0 {
				ts := ld(a, iTabStride)
				if t > 1 {
					IMUL3Q(U8(t), ts, ts)
				}
				ADDQ(ts, tp[t])
			}
		}
	default:
		xp = ld(a, iX)
		if T > 1 {
			xs = ld(a, iXStride)
		}
	}
	w, sp, ap, n, g := GP64(), GP64(), GP64(), GP64(), GP64()
	TESTQ(nb, nb)
	JZ(LabelRef(name + "_end"))
	var sb GPVirtual // the frame's tables, 64-byte aligned (int1TabsStack)
	if tabs == int1TabsStack {
		sb = GP64()
		LEAQ(frame, sb)
		ADDQ(U8(63), sb)
		ANDQ(I8(-64), sb)
	}

	// xq is token t's quad q's four biased activations of the block.
	xq := func(t, q int) Mem {
		switch t {
		case 0:
			return at(xp, 4*q)
		case 1, 2:
			return idx(xp, xs, uint8(t), 4*q)
		}
		return Mem{} // (T = 3 and 4 keep a register for 3*XStride: see below)
	}
	var xs3 GPVirtual
	if T >= 4 && tabs != int1TabsMem {
		xs3 = GP64()
		MOVQ(xs, xs3)
		IMUL3Q(U8(3), xs3, xs3)
	}
	xqm := func(t, q int) Mem {
		if t == 3 {
			return idx(xp, xs3, 1, 4*q)
		}
		return xq(t, q)
	}

	block := func(lbl string, load, widen bool) {
		switch tabs {
		case int1TabsRegs:
			i := 0
			for t := 0; t < T; t++ {
				for q := 0; q < 8; q++ {
					tm := []VecPhysical{d[0], d[1], v, c}[i%4]
					i++
					k.table(xqm(t, q), tm, treg[t][q])
				}
			}
		case int1TabsStack:
			i := 0
			for t := 0; t < T; t++ {
				for q := 0; q < 8; q++ {
					tm, o := []VecPhysical{d[0], v}[i%2], []VecPhysical{d[1], c}[i%2]
					i++
					k.table(xqm(t, q), tm, o)
					VMOVDQU64(o, at(sb, int1TabBlock*t+64*q))
				}
			}
		}
		MOVQ(w0, w)
		MOVQ(at(a, iSums), sp)
		MOVQ(at(a, iAcc), ap)
		MOVQ(at(a, iNRB), n)
		if tabPF {
			XORQ(tpf, tpf)
		}
		Label(lbl)
		if tabPF {
			for t := range tp {
				PREFETCHT0(Mem{Base: tp[t], Index: tpf, Scale: 1, Disp: int1TabBlock})
			}
			ADDQ(U8(64), tpf)
		}
		if pf > 0 {
			PREFETCHT1(at(w, pf))
			PREFETCHT1(at(w, pf+64))
		}
		kk := 0
		look := func(q int, ix VecPhysical) {
			for t := 0; t < T; t++ {
				ch := chains[t][q%nch]
				var tab Op
				switch tabs {
				case int1TabsRegs:
					tab = treg[t][q]
				case int1TabsMem:
					tab = at(tp[t], 64*q)
				case int1TabsStack:
					tab = at(sb, int1TabBlock*t+64*q)
				}
				if q < nch {
					VPERMW(tab, ix, ch)
					continue
				}
				r := d[kk%2]
				kk++
				VPERMW(tab, ix, r)
				VPADDW(r, ch, ch)
			}
		}
		if int1Quint { // TIMING ONLY: 5-bit fields, 7 lookups (wrong results)
			VMOVDQU64(at(w, 0), v)
			look(0, v)
			VPSRLW(U8(5), v, c)
			look(1, c)
			VPSRLW(U8(10), v, c)
			look(2, c)
			VMOVDQU64(at(w, 64), qx)
			look(4, qx)
			VPSRLW(U8(5), qx, c)
			look(5, c)
			VPSRLW(U8(10), qx, c)
			look(6, c)
			VPSRLW(U8(15), qx, c)
			VPSHLDW(U8(1), v, c, c)
			look(3, c)
		} else {
			for h := 0; h < 2; h++ {
				VMOVDQU64(at(w, 64*h), v)
				look(4*h, v)
				for f := 1; f < 4; f++ {
					VPSRLW(U8(4*f), v, c)
					look(4*h+f, c)
				}
			}
		}
		for t := 0; t < T; t++ {
			ch := chains[t]
			for hh := nch / 2; hh >= 1; hh /= 2 {
				for i := 0; i < hh; i++ {
					VPADDW(ch[i+hh], ch[i], ch[i])
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
		ADDQ(U32(int1BlockBytes), w)
		ADDQ(U32(64*T), ap)
		ADDQ(at(a, iSStride), sp)
		DECQ(n)
		JNZ(LabelRef(lbl))
		ADDQ(at(a, iBStride), w0)
		if tabs == int1TabsMem {
			for _, t := range tp {
				ADDQ(U32(int1TabBlock), t)
			}
		} else {
			ADDQ(U8(32), xp)
		}
	}
	int1Groups(name, nb, g, block)
	Label(name + "_end")
	VZEROUPPER()
	RET()
}

// int1BlockBytes is one row block's bytes of an int1 block.
const int1BlockBytes = 128

// int1Groups emits an int1 panel kernel's loop over nb (a register, counted down) blocks in
// groups of up to int1Flush: block(label, load, widen) emits one block, load when an
// earlier block of the group left its int16 sums in Acc, widen at the group's last block.
// (panelGroups with int1Flush.)
func int1Groups(name string, nb, g Register, block func(lbl string, load, widen bool)) {
	Label(name + "_grp")
	MOVQ(nb, g)
	CMPQ(g, U8(int1Flush))
	JLE(LabelRef(name + "_g"))
	MOVQ(U32(int1Flush), g)
	Label(name + "_g")
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

// genBuildInt1TabZ writes buildInt1TabZAVX512(x, n, dst): the tabInt1Z tables of the n
// inputs at x (n a multiple of 4), 64 bytes a quad.
func genBuildInt1TabZ() {
	name := "buildInt1TabZAVX512"
	header(name, NOSPLIT, "func(x *int8, n int, dst *byte)", name+" doc")
	x, n, dst := Load(Param("x"), GP64()), Load(Param("n"), GP64()), Load(Param("dst"), GP64())
	p := newPool(true)
	k := int1Consts{p.get(), p.get(), p.get()}
	k.load()
	x80 := p.get()
	bcastByte(x80, 0x80)
	t := p.getn(4)
	o := p.getn(4)
	SHRQ(U8(2), n) // quads
	JZ(LabelRef(name + "_end"))
	CMPQ(n, U8(4))
	JB(LabelRef(name + "_one"))
	Label(name + "_four")
	for i := 0; i < 4; i++ {
		VPBROADCASTD(at(x, 4*i), t[i])
		VPXORD(x80, t[i], t[i])
		VMOVDQA64(k.cst, o[i])
		VPDPBUSD(k.pat, t[i], o[i])
		VPERMW(o[i], k.dup, o[i])
		VMOVDQU64(o[i], at(dst, 64*i))
	}
	ADDQ(U8(16), x)
	ADDQ(U32(256), dst)
	SUBQ(U8(4), n)
	CMPQ(n, U8(4))
	JAE(LabelRef(name + "_four"))
	TESTQ(n, n)
	JZ(LabelRef(name + "_end"))
	Label(name + "_one")
	VPBROADCASTD(at(x, 0), t[0])
	VPXORD(x80, t[0], t[0])
	VMOVDQA64(k.cst, o[0])
	VPDPBUSD(k.pat, t[0], o[0])
	VPERMW(o[0], k.dup, o[0])
	VMOVDQU64(o[0], at(dst, 0))
	ADDQ(U8(4), x)
	ADDQ(U8(64), dst)
	DECQ(n)
	JNZ(LabelRef(name + "_one"))
	Label(name + "_end")
	VZEROUPPER()
	RET()
}
