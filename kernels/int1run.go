package kernels

import "unsafe"

// The int1 GEMV: every int1 blob is panel-major (int1.go), and its kernels (fmtOps.int1Panel,
// int1Args) build (AVX-512) or read (AVX2: tabInt1Y, built by Prepare) lookup tables of the
// activations' signed quad sums. Run sweeps each
// panel's part of its row blocks segment by segment (groups of weights or activations: whole
// blocks, as quantcfg.MinGroup is a block), the tokens in passes of up to gemvT, and runs the
// epilogue on the part's sums of a pass.

// int1TabBytes is the bytes of one token's tables of kind for kp inputs.
func int1TabBytes(kind tabKind, kp int) int {
	switch kind {
	case tabInt1Y:
		return int1TabYBlock * kp / 32
	}
	return 0
}

// buildInt1Tabs writes the tables of kind for the activations x (len a multiple of 32) to dst.
func buildInt1Tabs(kind tabKind, x []int8, dst []byte) {
	if len(x) == 0 {
		return
	}
	if fast := lutBuilders[kind]; fast != nil && !purego.Load() {
		fast(&x[0], len(x), &dst[0])
		return
	}
	switch kind {
	case tabInt1Y:
		buildInt1TabYGeneric(x, dst)
	}
}

// prepareInt1 writes what a call's kernels read: every token's tables, or the biased
// activations (int1Bias).
func (k *simdKernel) prepareInt1(l *Layer, a *Acts, p plan, s []byte) {
	ly, n := l.Layout, a.N
	kind := k.ops.int1Tab
	if kind == tabNone {
		int1Bias(a.Q[:n*ly.Kp], s[p.xOff:p.xOff+n*ly.Kp])
		return
	}
	per := int1TabBytes(kind, ly.Kp)
	for t := range n {
		buildInt1Tabs(kind, a.Q[t*ly.Kp:(t+1)*ly.Kp], s[p.tabOff+t*per:p.tabOff+(t+1)*per])
	}
}

// runInt1 is Run for int1's GEMV.
func (k *simdKernel) runInt1(l *Layer, a *Acts, rb0, rb1 int, out []float32, p plan, s []byte, lp *layerPrep, tb *threadBuf) {
	ly, n := l.Layout, a.N
	nb, nseg, gT := ly.Kp/32, p.nseg, k.ops.gemvT
	G := ly.PanelRows()
	if need := G * nseg * gT * RowBlock; cap(tb.sums) < need {
		tb.sums = make([]int32, need)
	}
	for r0 := rb0; r0 < rb1; {
		pr0, g := ly.Panel(r0 / G)
		r1 := min(rb1, pr0+g)
		for t0 := 0; t0 < n; t0 += gT {
			T := min(gT, n-t0)
			sums := tb.sums[:(r1-r0)*nseg*T*RowBlock]
			clear(sums)
			k.int1Sweep(l, p, s, tb, r0, r1, 0, nb, t0, T, sums, nseg*T*RowBlock, T*RowBlock)
			k.int1Epilogue(l, p, s, lp, tb, sums, r0, r1, t0, T, out)
		}
		r0 = r1
	}
}

// int1Sweep runs int1's kernel for tokens t0..t0+T-1 (T <= gemvT) over row blocks [r0, r1)
// of one panel and their blocks [b0, b1), segment by segment, adding into sums: row block
// r0's first, rbInts apart, segment j's segInts on, token t0+t's RowBlock int32s t*RowBlock
// on from there.
func (k *simdKernel) int1Sweep(l *Layer, p plan, s []byte, tb *threadBuf, r0, r1, b0, b1, t0, T int, sums []int32, rbInts, segInts int) {
	ly := l.Layout
	nb := ly.Kp / 32
	segB := nb
	if l.SegLen > 0 {
		segB = l.SegLen / 32
	}
	if need := ly.PanelRows() * k.ops.gemvT * RowBlock; cap(tb.acc) < need {
		tb.acc = make([]int16, need)
	}
	per := int1TabBytes(k.ops.int1Tab, ly.Kp)
	off, stride := ly.BlockAt(r0, 0)
	ia := &tb.ia
	panel := k.ops.int1Panel[T]
	if T == 1 && k.ops.l1.int1Panel1 != nil && currentTuning().l1Prefetch() {
		panel = k.ops.l1.int1Panel1
	}
	for j := b0 / segB; j*segB < b1; j++ {
		c0, c1 := max(b0, j*segB), min(b1, (j+1)*segB)
		*ia = int1Args{
			W: unsafe.Pointer(&l.Data[off+c0*stride]), NRB: r1 - r0, BStride: stride, Blocks: c1 - c0,
			Sums: unsafe.Pointer(&sums[j*segInts]), SStride: 4 * rbInts, Acc: unsafe.Pointer(&tb.acc[0]),
		}
		if per > 0 {
			ia.Tab, ia.TabStride = unsafe.Pointer(&s[p.tabOff+t0*per+c0*(per/nb)]), per
		} else {
			ia.X, ia.XStride = unsafe.Pointer(&s[p.xOff+t0*ly.Kp+32*c0]), ly.Kp
		}
		panel(argp(ia))
	}
}

// int1Epilogue writes the outputs of tokens t0..t0+T-1 for row blocks [r0, r1) from their
// sums: row block r0's first, each row block's [segment][token][RowBlock] int32s.
func (k *simdKernel) int1Epilogue(l *Layer, p plan, s []byte, lp *layerPrep, tb *threadBuf, sums []int32, r0, r1, t0, T int, out []float32) {
	ly, nseg, epi := l.Layout, p.nseg, &tb.epi
	rbInts := nseg * T * RowBlock
	*epi = epiArgs{NSeg: nseg, A: 1, CorrStride: 4 * nseg, OutStride: 4 * ly.M, NTok: T,
		Corr: unsafe.Pointer(&s[p.corrOff+4*t0*nseg]), XS: unsafe.Pointer(&s[p.xsOff+4*t0*nseg])}
	if lp.wsRB != 0 {
		epi.WSSeg = 4 * lp.wsSeg
	}
	if nseg == 1 { // (the rows' epilogue takes one segment)
		epi.NRB, epi.SumsRB, epi.WSRB = r1-r0, 4*rbInts, 4*lp.wsRB
		epi.Sums = unsafe.Pointer(&sums[0])
		setRB(epi, ly, lp, r0, t0, out)
		epi.Mask = rowMask(ly, r1-1)
		k.ops.epiRows(argp(epi))
		return
	}
	for i := range r1 - r0 {
		epi.Sums = unsafe.Pointer(&sums[i*rbInts])
		k.epiRB(epi, ly, lp, r0+i, t0, out)
	}
}

// int1PartMinSaved is the fewest bytes by which a call in parts (Units) must shorten the
// largest share of a row split by whole panels: a call in parts pays a second fork/join,
// the adds of the workers' sums and the pieces of blocks at the ends of its ranges. On
// the Zen 4 guest, two workers on evenly shared blobs (one and four tokens, two runs of
// 9 rounds each way) took about 1.5-3 us longer a call in parts (1024x2560 and 2560x2560),
// where 64 KiB is 2-3 us of one thread's stream.
var int1PartMinSaved = 64 << 10

// int1PartSaved is by how many bytes a call in parts shortens the largest share of a row
// split by whole panels over workers.
func int1PartSaved(ly Layout, workers int) float64 {
	return (panelSplitLoss(ly, workers) - 1) * float64(ly.Bytes()) / float64(workers)
}

// int1PartUnits is Units for int1's GEMV: a call runs in parts, each worker one stretch of
// the blob (its row blocks' blocks, panelUnits), where whole panels would share out among
// the workers unevenly (panelSplitLoss above panelPartLoss, by at least int1PartMinSaved
// bytes a worker): every int1 blob is panel-major, its panels at most Int1Panel row
// blocks, so a row split by panels leaves workers idle once they outnumber the panels
// (2560 rows are 4 panels, 14336 rows 14), and a worker that shared a panel's row blocks
// would stream the others' part of each block past its caches (int1.go). Any count of
// tokens the GEMV takes runs in parts, in passes of up to gemvT.
func (k *simdKernel) int1PartUnits(l *Layer, a *Acts, workers int) int {
	ly := l.Layout
	if workers < 2 || a.N < 1 || k.useGemm(l, a.N) || panelSplitLoss(ly, workers) <= panelPartLoss || int1PartSaved(ly, workers) < float64(int1PartMinSaved) {
		return 0
	}
	a.parts.start(workers)
	_, units := panelUnits(ly)
	return units
}

// int1RunUnits is RunUnits for int1's GEMV: units [u0, u1) (panelUnits, unitSegs) into
// worker w's sums, which cover the row blocks its units touched (rowSums), each row block's
// [segment][token][RowBlock] int32s.
func (k *simdKernel) int1RunUnits(l *Layer, a *Acts, w, u0, u1 int) {
	ly, n, gT := l.Layout, a.N, k.ops.gemvT
	p := k.plan(l, n)
	_, s := scratchView(a, p.size)
	tb := bufPool.Get().(*threadBuf)
	defer tb.release()
	tb.segs = unitSegs(ly, u0, u1, tb.segs[:0])
	lo, hi := segRows(tb.segs)
	ps, stride := &a.parts, p.nseg*n*RowBlock
	r := &ps.rows[w]
	tb.widths = append(tb.widths[:0], stride)
	sums := r.cover(lo, hi, tb.widths)
	for _, sg := range tb.segs {
		for t0 := 0; t0 < n; t0 += gT {
			T := min(gT, n-t0)
			k.int1Sweep(l, p, s, tb, sg.r0, sg.r1, sg.b0, sg.b1, t0, T, sums[(sg.r0-r.lo)*stride+t0*RowBlock:], stride, n*RowBlock)
		}
	}
}

// int1Finish is Finish for int1's GEMV: the workers' sums of row blocks [rb0, rb1) added up
// in the thread's buffer, then the epilogue for every token.
func (k *simdKernel) int1Finish(l *Layer, a *Acts, rb0, rb1 int, out []float32) {
	n := a.N
	p := k.plan(l, n)
	_, s := scratchView(a, p.size)
	tb := bufPool.Get().(*threadBuf)
	defer tb.release()
	sums := k.partsAdded(a, rb0, rb1, append(tb.widths[:0], p.nseg*n*RowBlock), tb)
	k.int1Epilogue(l, p, s, l.simdPrep(), tb, sums, rb0, rb1, 0, n, out)
}
