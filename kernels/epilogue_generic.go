package kernels

import "unsafe"

// epilogueGeneric is the integer epilogue of epilogue_amd64.s (see epiArgs).
func epilogueGeneric(a *epiArgs) {
	e, n := *a, max(1, a.NRB)
	for i := range n {
		if i > 0 { // (moved on only to a row block that is there: no pointer past the objects)
			e.Sums, e.WS, e.Out = unsafe.Add(e.Sums, a.SumsRB), unsafe.Add(e.WS, a.WSRB), unsafe.Add(e.Out, 4*RowBlock)
			if e.Bias != nil {
				e.Bias = unsafe.Add(e.Bias, 4*RowBlock)
			}
		}
		e.Mask = 1<<RowBlock - 1
		if i == n-1 {
			e.Mask = a.Mask
		}
		epilogueRB(&e)
	}
}

// epilogueRB is epilogueGeneric's row block: a's first.
func epilogueRB(a *epiArgs) {
	sums := int32At(a.Sums, a.NSeg*a.NTok*RowBlock)
	for t := 0; t < a.NTok; t++ {
		var y [RowBlock]float32
		for j := 0; j < a.NSeg; j++ {
			corr := *(*int32)(unsafe.Add(a.Corr, t*a.CorrStride+4*j))
			xs := *(*float32)(unsafe.Add(a.XS, t*a.CorrStride+4*j))
			ws := unsafe.Slice((*float32)(unsafe.Add(a.WS, j*a.WSSeg)), RowBlock)
			for r := range y {
				acc := int32(a.A)*sums[(j*a.NTok+t)*RowBlock+r] + corr
				p := Epilogue(acc, ws[r], xs)
				if j == 0 {
					y[r] = p
				} else {
					y[r] = y[r] + p
				}
			}
		}
		// (row by row: the last row block's rows past M are past the end of the output, so
		// no slice of all 32 may be formed there)
		for r := range y {
			if a.Mask>>r&1 == 0 {
				continue
			}
			if a.Bias != nil {
				y[r] = y[r] + *(*float32)(unsafe.Add(a.Bias, 4*r))
			}
			*(*float32)(unsafe.Add(a.Out, t*a.OutStride+4*r)) = y[r]
		}
	}
}
