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
	segB := nb
	if l.SegLen > 0 {
		segB = l.SegLen / 32
	}
	per := int1TabBytes(k.ops.int1Tab, ly.Kp)
	G := ly.PanelRows()
	if need := G * nseg * gT * RowBlock; cap(tb.sums) < need {
		tb.sums = make([]int32, need)
	}
	if need := G * gT * RowBlock; cap(tb.acc) < need {
		tb.acc = make([]int16, need)
	}
	ia, epi := &tb.ia, &tb.epi
	for r0 := rb0; r0 < rb1; {
		pr0, g := ly.Panel(r0 / G)
		r1 := min(rb1, pr0+g)
		nr := r1 - r0
		off, stride := ly.BlockAt(r0, 0)
		for t0 := 0; t0 < n; t0 += gT {
			T := min(gT, n-t0)
			rbSums := 4 * nseg * T * RowBlock // bytes of a row block's sums
			sums := tb.sums[:nr*nseg*T*RowBlock]
			clear(sums)
			for j := range nseg {
				b0 := j * segB
				*ia = int1Args{
					W: unsafe.Pointer(&l.Data[off+b0*stride]), NRB: nr, BStride: stride, Blocks: min(nb, b0+segB) - b0,
					Sums: unsafe.Pointer(&sums[j*T*RowBlock]), SStride: rbSums, Acc: unsafe.Pointer(&tb.acc[0]),
				}
				if per > 0 {
					ia.Tab, ia.TabStride = unsafe.Pointer(&s[p.tabOff+t0*per+b0*(per/nb)]), per
				} else {
					ia.X, ia.XStride = unsafe.Pointer(&s[p.xOff+t0*ly.Kp+32*b0]), ly.Kp
				}
				k.ops.int1Panel[T](argp(ia))
			}
			*epi = epiArgs{NSeg: nseg, A: 1, CorrStride: 4 * nseg, OutStride: 4 * ly.M, NTok: T,
				Corr: unsafe.Pointer(&s[p.corrOff+4*t0*nseg]), XS: unsafe.Pointer(&s[p.xsOff+4*t0*nseg])}
			if lp.wsRB != 0 {
				epi.WSSeg = 4 * lp.wsSeg
			}
			if nseg == 1 { // (the rows' epilogue takes one segment)
				epi.NRB, epi.SumsRB, epi.WSRB = nr, rbSums, 4*lp.wsRB
				epi.Sums = unsafe.Pointer(&sums[0])
				setRB(epi, ly, lp, r0, t0, out)
				epi.Mask = rowMask(ly, r1-1)
				k.ops.epiRows(argp(epi))
				continue
			}
			for i := range nr {
				epi.Sums = unsafe.Pointer(&sums[i*nseg*T*RowBlock])
				k.epiRB(epi, ly, lp, r0+i, t0, out)
			}
		}
		r0 = r1
	}
}
