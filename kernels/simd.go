package kernels

import (
	"fmt"
	"sync"
	"unsafe"

	"bitgo/quantcfg"
)

// The SIMD kernels: one per ISA path and format, all driven by the code in this file.
// For a few tokens (GEMV, n <= the path's token tile) an assembly GEMV reads each row
// block once for all tokens and leaves raw per-segment integer sums; for many tokens
// (GEMM) each row block is unpacked once into a VNNI-ordered byte matrix that a
// register-tiled micro-kernel multiplies with token tiles. A shared epilogue turns the
// sums into the reference's float32 outputs. Float formats compute in one pass.

const (
	maxGemvT = 8  // tokens per GEMV call
	maxTileT = 12 // tokens per GEMM micro-kernel call (and float tile)
	// gemmMinN is the fewest tokens the GEMM path takes. Below it the fused GEMV kernels in
	// groups of up to 8 tokens win: at 8 tokens they are as bound by vpdpbusd as the GEMM
	// micro-kernel (about 90% of the VNNI peak) and need no unpacked copy of each row block
	// (4096x14336 int2 on Zen 5, one thread: 2.3 ms against 3.7 ms at 16 tokens, 9.9 against
	// 10.5 ms at 64).
	gemmMinN = 64
)

// fmtOps are one (ISA, format)'s assembly operations; nil where the path has none.
type fmtOps struct {
	gemv    [maxGemvT + 1]func(*byte) // by token count
	lut     [maxGemvT + 1]func(*byte) // tl1/tl2: the chunked lookup-table GEMV (lutArgs) by token count
	tile    [maxTileT + 1]func(*byte) // GEMM micro-kernel by token count
	unpack  func(*byte)
	epi     func(*byte)
	float   [maxTileT + 1]func(*byte) // bf16/f32 by token count
	floatT  int                       // largest T in float
	gemvT   int                       // largest T in gemv
	tileT   int                       // largest T in tile
	kstep   int                       // inputs per GEMV step (segments are whole steps)
	xKind   xKind                     // GEMV activation layout
	tabKind tabKind                   // GEMV table layout
	exact   bool                      // GEMV sums are the exact dot products (no correction)
	// tileMaxU: the GEMM micro-kernel saturates above this unsigned weight value
	// (vpmaddubsw); 255 when it cannot saturate.
	tileMaxU int
	// gemvMaxU: likewise for the GEMV kernels of int2.
	gemvMaxU int
}

type xKind int

const (
	xNatural  xKind = iota // the quantized activations as they are
	xInt1Perm              // int1 on zmm: per 16 inputs, the dwords in order 0, 2, 1, 3
	xInt16                 // int16 copies (AVX2 int8)
)

type tabKind int

const (
	tabNone  tabKind = iota
	tabInt2          // 32 bytes: u of the low code of a nibble, u of the high code
	tabInt2Z         // 192 bytes: for s = 0, 1, 2, byte i = u of code (i >> 2s) & 3
	tabTL1Z          // per unit 64 B: int16 sums of pair 2u (16 entries), of pair 2u+1
	tabTL1Y          // per unit 64 B: low bytes, high bytes of pair 2u; of pair 2u+1
	tabTL2Z          // per triple 64 B: int16 sums of |v| 0..15, then their negations; tail as TL1Z
	tabTL2Y          // per triple 32 B: low bytes, high bytes of |v| 0..15; tail as TL1Y
)

// simdKernel is one ISA path for one format.
type simdKernel struct {
	isa      ISA
	format   quantcfg.Format
	ops      *fmtOps
	int8vnni bool // the AVX-VNNI-INT8 int8 kernel (needs hasINT8)
}

func (k *simdKernel) Name() string {
	if k.int8vnni {
		return "avxvnniint8/" + string(k.format)
	}
	return k.isa.String() + "/" + string(k.format)
}

func (k *simdKernel) CanImplement(l *Layer, n int) (bool, string) {
	if l.Spec.Format != k.format {
		return false, "format " + string(l.Spec.Format)
	}
	if r := isaReason(k.isa); r != "" {
		return false, r
	}
	if k.int8vnni && !hasINT8() {
		return false, "CPU lacks AVX-VNNI-INT8 (VEX vpdpbssd)"
	}
	if n < 1 {
		return false, fmt.Sprintf("n=%d tokens", n)
	}
	if k.format == quantcfg.I2S && l.SegLen%128 != 0 {
		return false, fmt.Sprintf("i2s segments of %d inputs (needs a multiple of 128)", l.SegLen)
	}
	if l.SegLen != 0 && k.ops.kstep != 0 && l.SegLen%k.ops.kstep != 0 {
		return false, fmt.Sprintf("segments of %d inputs (needs a multiple of %d)", l.SegLen, k.ops.kstep)
	}
	if k.format == quantcfg.Int2 {
		lo, hi := codebookSpan(l)
		if hi-lo > k.ops.gemvMaxU {
			return false, fmt.Sprintf("codebook spans %d..%d; vpmaddubsw would saturate beyond a span of %d", lo, hi, k.ops.gemvMaxU)
		}
	}
	return true, ""
}

func codebookSpan(l *Layer) (lo, hi int) {
	lo, hi = 127, -128
	for _, v := range l.Levels {
		lo, hi = min(lo, int(v)), max(hi, int(v))
	}
	return lo, hi
}

// useGemm: the GEMM path runs n tokens when n is at least gemmMinN and more than the GEMV
// tile, and the micro-kernel can take this layer's unsigned weights.
func (k *simdKernel) useGemm(l *Layer, n int) bool {
	if n < gemmMinN || n <= k.ops.gemvT || k.ops.unpack == nil || k.ops.tileT == 0 {
		return false
	}
	return unpackMaxU(l) <= k.ops.tileMaxU
}

// unpackMaxU is the largest unsigned weight value the GEMM unpacker produces for l.
func unpackMaxU(l *Layer) int {
	switch l.Spec.Format {
	case quantcfg.Int2:
		lo, hi := codebookSpan(l)
		return hi - lo
	case quantcfg.Int8:
		return 255
	}
	return 2
}

// gemmC0: the GEMM unpackers store u = w + off; the correction is c0 * sum(x) with c0 = -off
// (int1 stores the sign bit b, w = 1 - 2b: A = -2, c0 = 1).
func gemmC0(l *Layer) int32 {
	switch l.Spec.Format {
	case quantcfg.Int2:
		lo, _ := codebookSpan(l)
		return int32(lo)
	case quantcfg.Int8:
		return -128
	case quantcfg.Int1:
		return 1
	}
	return -1
}

// gemvC0 is the correction multiplier for the GEMV sums.
func (k *simdKernel) gemvC0(l *Layer) int32 {
	if k.ops.exact {
		return 0
	}
	return gemmC0(l)
}

// plan is the layout of a call's scratch (offsets from a 64-byte aligned base) and the
// choices Prepare made; Run recomputes it from the same inputs.
type plan struct {
	gemm      bool
	nseg      int
	c0        int32
	corrOff   int // int32 [n][nseg]
	xsOff     int // float32 [n][nseg]
	xOff      int // prepared activations, -1 for a.Q itself
	xStride   int // bytes between tokens (GEMV) or quads (GEMM xT)
	tabOff    int
	tabStride int
	size      int
}

func align64(x int) int { return (x + 63) &^ 63 }

func (k *simdKernel) plan(l *Layer, n int) plan {
	ly := l.Layout
	p := plan{gemm: k.useGemm(l, n), nseg: l.Segments(), xOff: -1, xStride: ly.Kp}
	if p.gemm {
		p.c0 = gemmC0(l)
	} else {
		p.c0 = k.gemvC0(l)
	}
	off := 0
	p.corrOff = off
	off = align64(off + 4*n*p.nseg)
	p.xsOff = off
	off = align64(off + 4*n*p.nseg)
	switch {
	case p.gemm:
		p.xOff, p.xStride = off, 4*n
		off = align64(off + ly.Kp*n)
	case k.ops.xKind == xInt1Perm:
		p.xOff = off
		off = align64(off + ly.Kp*n)
	case k.ops.xKind == xInt16:
		p.xOff, p.xStride = off, 2*ly.Kp
		off = align64(off + 2*ly.Kp*n)
	}
	if !p.gemm {
		var tb int
		switch k.ops.tabKind {
		case tabInt2:
			tb = 32
		case tabInt2Z:
			tb = 192
		case tabTL1Z, tabTL1Y:
			tb = 16 * ly.Kp
		case tabTL2Z:
			tb = 64*(ly.K3/3) + 16*ly.Kp1
		case tabTL2Y:
			tb = 32*(ly.K3/3) + 16*ly.Kp1
		}
		if tb > 0 {
			p.tabOff, p.tabStride = off, align64(tb)
			if k.ops.tabKind == tabInt2 || k.ops.tabKind == tabInt2Z {
				p.tabStride = 0 // one table for every token
				off += align64(tb)
			} else {
				off += p.tabStride * n
			}
		}
	}
	p.size = off
	return p
}

// scratchBase returns a's scratch, grown to hold size bytes after a 64-byte aligned base,
// and the base's offset (Prepare only: Run must not write a).
func scratchBase(a *Acts, size int) (int, []byte) {
	if cap(a.Scratch) < size+64 {
		a.Scratch = make([]byte, size+64)
	}
	a.Scratch = a.Scratch[:cap(a.Scratch)]
	return scratchView(a, size)
}

// scratchView is scratchBase without growing (Run, concurrently with other Runs).
func scratchView(a *Acts, size int) (int, []byte) {
	s := a.Scratch[:cap(a.Scratch)]
	base := int((64 - uintptr(unsafe.Pointer(&s[0]))%64) % 64)
	return base, s[base : base+size]
}

func (k *simdKernel) Prepare(l *Layer, a *Acts) {
	l.simdPrep()
	if k.format.IsFloat() {
		if a.N > 1 {
			n, kk := a.N, l.Layout.K
			_, s := scratchBase(a, 4*n*kk)
			transposeFloats(a.F, n, kk, unsafe.Slice((*float32)(unsafe.Pointer(&s[0])), n*kk))
		}
		return
	}
	n, ly := a.N, l.Layout
	p := k.plan(l, n)
	_, s := scratchBase(a, p.size)
	corr := unsafe.Slice((*int32)(unsafe.Pointer(&s[p.corrOff])), n*p.nseg)
	xs := unsafe.Slice((*float32)(unsafe.Pointer(&s[p.xsOff])), n*p.nseg)
	for t := 0; t < n; t++ {
		xq := a.Q[t*ly.Kp : (t+1)*ly.Kp]
		for j := 0; j < p.nseg; j++ {
			k0, k1 := l.SegBounds(j)
			xs[t*p.nseg+j] = a.XS[a.XSIndex(t, k0)]
			var sum int32
			if p.c0 != 0 {
				sum = sumInt8(xq[k0:k1])
			}
			corr[t*p.nseg+j] = p.c0 * sum
		}
	}
	if p.gemm {
		transposeDwords(a.Q[:n*ly.Kp], n, ly.Kp, s[p.xOff:p.xOff+ly.Kp*n])
		return
	}
	switch k.ops.xKind {
	case xInt1Perm:
		x := s[p.xOff : p.xOff+ly.Kp*n]
		for t := 0; t < n; t++ {
			permInt1(a.Q[t*ly.Kp:(t+1)*ly.Kp], x[t*ly.Kp:(t+1)*ly.Kp])
		}
	case xInt16:
		x := unsafe.Slice((*int16)(unsafe.Pointer(&s[p.xOff])), ly.Kp*n)
		for i, v := range a.Q[:ly.Kp*n] {
			x[i] = int16(v)
		}
	}
	switch k.ops.tabKind {
	case tabInt2:
		buildInt2Tab(l, s[p.tabOff:p.tabOff+32])
	case tabInt2Z:
		buildInt2TabZ(l, s[p.tabOff:p.tabOff+192])
	case tabTL1Z, tabTL1Y, tabTL2Z, tabTL2Y:
		for t := 0; t < n; t++ {
			x, dst := a.Q[t*ly.Kp:(t+1)*ly.Kp], s[p.tabOff+t*p.tabStride:p.tabOff+(t+1)*p.tabStride]
			if fast := lutBuilders[k.ops.tabKind]; fast != nil && !purego.Load() {
				buildLUTWith(fast, k.ops.tabKind, ly, x, dst)
			} else {
				buildLUT(k.ops.tabKind, ly, x, dst)
			}
		}
	}
}

// Assembly helpers of Prepare, set by the amd64 build when the CPU has them (nil: the Go
// versions run).
var (
	lutBuilders [tabTL2Y + 1]func(x *int8, count int, dst *byte) // by table kind; count = units (tl1) or triples (tl2)
	sumInt8Fast func(x *int8, n int) int32                       // n a multiple of 32
)

// sumInt8 returns the sum of x.
func sumInt8(x []int8) int32 {
	var s int32
	n := len(x) &^ 31
	if n > 0 && sumInt8Fast != nil && !purego.Load() {
		s = sumInt8Fast(&x[0], n)
	} else {
		n = 0
	}
	return s + sumInt8Generic(x[n:])
}

// sumInt8Generic is the reference of sumInt8AVX2.
func sumInt8Generic(x []int8) int32 {
	var s int32
	for _, v := range x {
		s += int32(v)
	}
	return s
}

// transposeDwords writes dst[q][t] = the dword q of row t of src (n rows of kp bytes), in
// 16x16 tiles.
func transposeDwords(src []int8, n, kp int, dst []byte) {
	nq := kp / 4
	s := unsafe.Slice((*uint32)(unsafe.Pointer(&src[0])), n*nq)
	d := unsafe.Slice((*uint32)(unsafe.Pointer(&dst[0])), n*nq)
	for t0 := 0; t0 < n; t0 += 16 {
		t1 := min(t0+16, n)
		for q0 := 0; q0 < nq; q0 += 16 {
			q1 := min(q0+16, nq)
			for t := t0; t < t1; t++ {
				row := s[t*nq:]
				for q := q0; q < q1; q++ {
					d[q*n+t] = row[q]
				}
			}
		}
	}
}

// transposeFloats writes dst[k][t] = src[t][k] for n rows of kk floats, in 16x16 tiles.
func transposeFloats(src []float32, n, kk int, dst []float32) {
	for t0 := 0; t0 < n; t0 += 16 {
		t1 := min(t0+16, n)
		for k0 := 0; k0 < kk; k0 += 16 {
			k1 := min(k0+16, kk)
			for t := t0; t < t1; t++ {
				row := src[t*kk:]
				for k := k0; k < k1; k++ {
					dst[k*n+t] = row[k]
				}
			}
		}
	}
}

// permInt1 reorders each 16 inputs' dwords as 0, 2, 1, 3 (the zmm int1 kernel broadcasts
// the qword of dwords 0, 2 for low nibbles and of 1, 3 for high nibbles).
func permInt1(x []int8, dst []byte) {
	s := unsafe.Slice((*uint32)(unsafe.Pointer(&x[0])), len(x)/4)
	d := unsafe.Slice((*uint32)(unsafe.Pointer(&dst[0])), len(x)/4)
	for g := 0; g+3 < len(s); g += 4 {
		d[g], d[g+1], d[g+2], d[g+3] = s[g], s[g+2], s[g+1], s[g+3]
	}
}

// buildInt2Tab writes the nibble decode tables: u = level - min level of the low code
// (bits 1..0) and of the high code (bits 3..2) of every nibble value.
func buildInt2Tab(l *Layer, dst []byte) {
	lo, _ := codebookSpan(l)
	for i := 0; i < 16; i++ {
		dst[i] = byte(int(l.Levels[i&3]) - lo)
		dst[16+i] = byte(int(l.Levels[i>>2]) - lo)
	}
}

// buildInt2TabZ writes the three 64-entry vpermb tables: byte i of table s is u of code
// (i >> 2s) & 3.
func buildInt2TabZ(l *Layer, dst []byte) {
	lo, _ := codebookSpan(l)
	for s := 0; s < 3; s++ {
		for i := 0; i < 64; i++ {
			dst[64*s+i] = byte(int(l.Levels[(i>>(2*s))&3]) - lo)
		}
	}
}

// tl1Sum is the table entry of pair index i for activations x0, x1 (0 for invalid indices).
func tl1Sum(i int, x0, x1 int8) int16 {
	if i > 8 {
		return 0
	}
	return int16((i/3-1)*int(x0) + (i%3-1)*int(x1))
}

// tl2Sum is the table entry of triple magnitude v for x0, x1, x2 (0 for v > 13).
func tl2Sum(v int, x0, x1, x2 int8) int16 {
	if v > 13 {
		return 0
	}
	d0 := (v + 13) / 9
	rem := v + 13 - 9*d0
	return int16((d0-1)*int(x0) + (rem/3-1)*int(x1) + (rem%3-1)*int(x2))
}

func putI16(b []byte, v int16) { b[0], b[1] = byte(v), byte(uint16(v)>>8) }

// buildLUT writes one token's lookup tables in layout kind.
func buildLUT(kind tabKind, ly Layout, x []int8, dst []byte) {
	tl1 := func(k0, units int, dst []byte, z bool) {
		for u := 0; u < units; u++ {
			d := dst[64*u : 64*u+64]
			for h := 0; h < 2; h++ {
				k := k0 + 4*u + 2*h
				for i := 0; i < 16; i++ {
					v := tl1Sum(i, x[k], x[k+1])
					if z {
						putI16(d[32*h+2*i:], v)
					} else {
						d[32*h+i], d[32*h+16+i] = byte(v), byte(uint16(v)>>8)
					}
				}
			}
		}
	}
	switch kind {
	case tabTL1Z, tabTL1Y:
		tl1(0, ly.Kp/4, dst, kind == tabTL1Z)
	case tabTL2Z, tabTL2Y:
		nt := ly.K3 / 3
		per := 64
		if kind == tabTL2Y {
			per = 32
		}
		for t := 0; t < nt; t++ {
			d := dst[per*t : per*t+per]
			for v := 0; v < 16; v++ {
				s := tl2Sum(v, x[3*t], x[3*t+1], x[3*t+2])
				if kind == tabTL2Z {
					putI16(d[2*v:], s)
					putI16(d[32+2*v:], -s)
				} else {
					d[v], d[16+v] = byte(s), byte(uint16(s)>>8)
				}
			}
		}
		tl1(ly.K3, ly.Kp1/4, dst[per*nt:], kind == tabTL2Z)
	}
}

// lutChunkBytes is the tables' size (all tokens of a group) in one K chunk of the
// lookup-table kernels: the chunk's tables stay in L1 while every row block of the range
// uses them (re-reading a whole K's tables from L2 for each row block halved their speed
// from DRAM).
const lutChunkBytes = 24 << 10

// runLUT is Run for the tl1/tl2 lookup-table kernels: per token group, the row blocks are
// swept chunk by chunk of K, accumulating int32 sums, then the epilogue runs per row block.
func (k *simdKernel) runLUT(l *Layer, a *Acts, rb0, rb1 int, out []float32, p plan, s []byte, lp *layerPrep, tb *threadBuf) {
	ly, n, nrb := l.Layout, a.N, rb1-rb0
	tile := min(k.ops.gemvT, n)
	if need := nrb * tile * RowBlock; cap(tb.sums) < need {
		tb.sums = make([]int32, need)
	}
	blkTab := 1024 // bytes of tables per tl2 block
	if k.ops.tabKind == tabTL2Y {
		blkTab = 512
	}
	la, epi := &tb.la, &tb.epi
	*epi = epiArgs{NSeg: 1, A: 1, CorrStride: 4, OutStride: 4 * ly.M, WSSeg: 0}
	base := unsafe.Pointer(&l.Data[rb0*ly.RowBlockBytes])
	for t0 := 0; t0 < n; t0 += tile {
		T := min(tile, n-t0)
		sums := tb.sums[:nrb*T*RowBlock]
		clear(sums)
		tab := unsafe.Pointer(&s[p.tabOff+t0*p.tabStride])
		call := func(w unsafe.Pointer, tabOff, blocks, units int) {
			*la = lutArgs{W: w, RBBytes: ly.RowBlockBytes, NRB: nrb, Sums: unsafe.Pointer(&sums[0]),
				Tab: unsafe.Add(tab, tabOff), TabStride: p.tabStride, Blocks: blocks, Units: units}
			k.ops.lut[T](argp(la))
		}
		if k.format == quantcfg.TL2 {
			nb, cb := ly.K3/TL2Block, max(1, lutChunkBytes/(blkTab*T))
			for b0 := 0; b0 < nb; b0 += cb {
				call(unsafe.Add(base, 320*b0), blkTab*b0, min(cb, nb-b0), 0)
			}
			if u := ly.Kp1 / 4; u > 0 {
				call(unsafe.Add(base, 320*nb), blkTab*nb, 0, u)
			}
		} else {
			nu, cu := ly.Kp/4, max(1, lutChunkBytes/(64*T))
			for u0 := 0; u0 < nu; u0 += cu {
				call(unsafe.Add(base, 32*u0), 64*u0, 0, min(cu, nu-u0))
			}
		}
		epi.NTok = T
		epi.Corr = unsafe.Pointer(&s[p.corrOff+4*t0*p.nseg])
		epi.XS = unsafe.Pointer(&s[p.xsOff+4*t0*p.nseg])
		for rb := rb0; rb < rb1; rb++ {
			m0 := rb * RowBlock
			epi.Sums = unsafe.Pointer(&sums[(rb-rb0)*T*RowBlock])
			epi.Mask = 1<<min(RowBlock, ly.M-m0) - 1
			epi.WS = unsafe.Pointer(&lp.ws[rb*lp.wsRB])
			epi.Bias = nil
			if lp.bias != nil {
				epi.Bias = unsafe.Pointer(&lp.bias[m0])
			}
			epi.Out = unsafe.Pointer(&out[t0*ly.M+m0])
			k.ops.epi(argp(epi))
		}
	}
}

// buildLUTWith is buildLUT with an assembly builder (tl2: the triples, then the tl1 tail).
func buildLUTWith(fast func(*int8, int, *byte), kind tabKind, ly Layout, x []int8, dst []byte) {
	switch kind {
	case tabTL1Z, tabTL1Y:
		fast(&x[0], ly.Kp/4, &dst[0])
	case tabTL2Z, tabTL2Y:
		nt, per, tl1 := ly.K3/3, 64, lutBuilders[tabTL1Z]
		if kind == tabTL2Y {
			per, tl1 = 32, lutBuilders[tabTL1Y]
		}
		if nt > 0 {
			fast(&x[0], nt, &dst[0])
		}
		if ly.Kp1 > 0 {
			if tl1 != nil {
				tl1(&x[ly.K3], ly.Kp1/4, &dst[per*nt])
			} else {
				buildLUT(kind-2, Layout{Kp: ly.Kp1}, x[ly.K3:], dst[per*nt:]) // the tl1 layout of the same width
			}
		}
	}
}

// threadBuf is one Run call's private memory, argument blocks included (an indirect
// call makes its arguments escape; pooling them avoids an allocation per call).
type threadBuf struct {
	sums []int32
	b    []byte
	g    gemvArgs
	mm   gemmArgs
	ua   unpackArgs
	la   lutArgs
	epi  epiArgs
	f    floatArgs
	tab  [32]byte
}

func (tb *threadBuf) release() {
	tb.g, tb.mm, tb.ua, tb.la, tb.epi, tb.f = gemvArgs{}, gemmArgs{}, unpackArgs{}, lutArgs{}, epiArgs{}, floatArgs{}
	bufPool.Put(tb)
}

var bufPool = sync.Pool{New: func() any { return new(threadBuf) }}

func alignedBytes(buf []byte, n int) ([]byte, []byte) {
	if cap(buf) < n+64 {
		buf = make([]byte, n+64)
	}
	buf = buf[:cap(buf)]
	o := int((64 - uintptr(unsafe.Pointer(&buf[0]))%64) % 64)
	return buf, buf[o : o+n]
}

func (k *simdKernel) Run(l *Layer, a *Acts, rb0, rb1 int, out []float32) {
	if rb0 >= rb1 {
		return
	}
	if k.format.IsFloat() {
		k.runFloat(l, a, rb0, rb1, out)
		return
	}
	ly := l.Layout
	n := a.N
	p := k.plan(l, n)
	_, s := scratchView(a, p.size)
	lp := l.simdPrep()
	tb := bufPool.Get().(*threadBuf)
	defer tb.release()
	if !p.gemm && k.ops.lut[1] != nil {
		k.runLUT(l, a, rb0, rb1, out, p, s, lp, tb)
		return
	}
	tile := k.ops.gemvT
	if p.gemm {
		tile = k.ops.tileT
	}
	tile = min(tile, n)
	if cap(tb.sums) < p.nseg*tile*RowBlock {
		tb.sums = make([]int32, p.nseg*tile*RowBlock)
	}
	sums := tb.sums[:p.nseg*tile*RowBlock]
	var bmat []byte
	if p.gemm {
		tb.b, bmat = alignedBytes(tb.b, RowBlock*ly.Kp)
	}
	xbase := unsafe.Pointer(&a.Q[0])
	if p.xOff >= 0 {
		xbase = unsafe.Pointer(&s[p.xOff])
	}
	epi := &tb.epi
	*epi = epiArgs{
		Sums: unsafe.Pointer(&sums[0]), NSeg: p.nseg, A: 1,
		CorrStride: 4 * p.nseg, OutStride: 4 * ly.M,
	}
	if k.format == quantcfg.Int1 {
		epi.A = -2
	}
	if lp.wsRB == 0 {
		epi.WSSeg = 0
	} else {
		epi.WSSeg = 4 * lp.wsSeg
	}
	g, mm, ua := &tb.g, &tb.mm, &tb.ua
	if p.gemm {
		segQ := ly.Kp / 4
		if l.SegLen > 0 {
			segQ = l.SegLen / 4
		}
		*mm = gemmArgs{XQ: p.xStride, SegQ: segQ, NSeg: p.nseg, LastQ: ly.Kp/4 - (p.nseg-1)*segQ, Sums: unsafe.Pointer(&sums[0])}
		*ua = unpackArgs{B: unsafe.Pointer(&bmat[0])}
		switch k.format {
		case quantcfg.I2S:
			ua.N, ua.N2 = ly.Kp/128, ly.Kp/128*128
		case quantcfg.TL2:
			ua.N, ua.N2 = ly.K3/TL2Block, ly.Kp1/4
		case quantcfg.Int1:
			ua.N = ly.Kp / 8
		default:
			ua.N = ly.Kp / 4
		}
		if k.format == quantcfg.Int2 {
			buildInt2Tab(l, tb.tab[:])
			ua.Tab = unsafe.Pointer(&tb.tab[0])
		}
	} else {
		step := max(k.ops.kstep, 1) // tl2 has no steps (Aux, Aux2 say what to run)
		segLen := ly.Kp
		if l.SegLen > 0 {
			segLen = l.SegLen
		}
		*g = gemvArgs{
			XStride: p.xStride, Sums: unsafe.Pointer(&sums[0]), SegSteps: segLen / step, NSeg: p.nseg,
			LastSteps: (ly.Kp - (p.nseg-1)*segLen) / step, TabStride: p.tabStride,
		}
		if k.ops.tabKind != tabNone {
			g.Tab = unsafe.Pointer(&s[p.tabOff])
		}
		switch k.format {
		case quantcfg.I2S:
			g.Aux = ly.Kp / 128 * 128
		case quantcfg.TL2:
			g.Aux, g.Aux2 = ly.K3/TL2Block, ly.Kp1/4
		}
	}
	for rb := rb0; rb < rb1; rb++ {
		m0 := rb * RowBlock
		rows := min(RowBlock, ly.M-m0)
		epi.Mask = 1<<rows - 1
		epi.WS = unsafe.Pointer(&lp.ws[rb*lp.wsRB])
		epi.Bias = nil
		if lp.bias != nil {
			epi.Bias = unsafe.Pointer(&lp.bias[m0])
		}
		w := unsafe.Pointer(&l.Data[rb*ly.RowBlockBytes])
		if p.gemm {
			ua.W = w
			k.ops.unpack(argp(ua))
		}
		for t0 := 0; t0 < n; t0 += tile {
			T := min(tile, n-t0)
			if p.gemm {
				mm.B = unsafe.Pointer(&bmat[0])
				mm.X = unsafe.Add(xbase, 4*t0)
				mm.SumsSeg = T * RowBlock * 4
				k.ops.tile[T](argp(mm))
			} else {
				g.W = w
				g.X = unsafe.Add(xbase, t0*p.xStride)
				if g.Tab != nil && p.tabStride != 0 {
					g.Tab = unsafe.Pointer(&s[p.tabOff+t0*p.tabStride])
				}
				k.ops.gemv[T](argp(g))
			}
			epi.NTok = T
			epi.Corr = unsafe.Pointer(&s[p.corrOff+4*t0*p.nseg])
			epi.XS = unsafe.Pointer(&s[p.xsOff+4*t0*p.nseg])
			epi.Out = unsafe.Pointer(&out[t0*ly.M+m0])
			k.ops.epi(argp(epi))
		}
	}
}

func (k *simdKernel) runFloat(l *Layer, a *Acts, rb0, rb1 int, out []float32) {
	ly := l.Layout
	n := a.N
	lp := l.simdPrep()
	tb := bufPool.Get().(*threadBuf)
	defer tb.release()
	f := &tb.f
	*f = floatArgs{XStride: 4 * n, K: ly.K, OutStride: 4 * ly.M}
	xt := unsafe.Pointer(&a.F[0])
	if n > 1 {
		_, s := scratchView(a, 4*n*ly.K)
		xt = unsafe.Pointer(&s[0])
	}
	for rb := rb0; rb < rb1; rb++ {
		m0 := rb * RowBlock
		rows := min(RowBlock, ly.M-m0)
		f.Mask = 1<<rows - 1
		f.W = unsafe.Pointer(&l.Data[rb*ly.RowBlockBytes])
		f.Bias = nil
		if lp.bias != nil {
			f.Bias = unsafe.Pointer(&lp.bias[m0])
		}
		for t0 := 0; t0 < n; t0 += k.ops.floatT {
			T := min(k.ops.floatT, n-t0)
			f.X = unsafe.Add(xt, 4*t0)
			f.Out = unsafe.Pointer(&out[t0*ly.M+m0])
			k.ops.float[T](argp(f))
		}
	}
}
