package kernels

import (
	"math"
	"unsafe"
)

// floatGeneric is the bf16/f32 GEMV of float_amd64.s for T tokens (see floatArgs).
func floatGeneric(a *floatArgs, T int, bf16 bool) {
	for t := 0; t < T; t++ {
		x := func(k int) float32 { return *(*float32)(unsafe.Add(a.X, k*a.XStride+4*t)) }
		for r := 0; r < RowBlock; r++ {
			if a.Mask>>r&1 == 0 {
				continue
			}
			var acc float32
			for k := 0; k < a.K; k++ {
				var w float32
				if bf16 {
					w = FromBF16(*(*uint16)(unsafe.Add(a.W, (32*k+r)*2)))
				} else {
					w = math.Float32frombits(*(*uint32)(unsafe.Add(a.W, (32*k+r)*4)))
				}
				acc = acc + float32(w*x(k))
			}
			if a.Bias != nil {
				acc = acc + *(*float32)(unsafe.Add(a.Bias, 4*r))
			}
			*(*float32)(unsafe.Add(a.Out, t*a.OutStride+4*r)) = acc
		}
	}
}
