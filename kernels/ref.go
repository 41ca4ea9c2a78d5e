package kernels

import (
	"sync"

	"bitgo/quantcfg"
)

// The reference kernel: plain Go, the definition of every result (see the package doc).
// It decodes each row block from the packed layout (so it also checks the layouts) and
// computes the segments' exact integer sums and the float epilogue in the defined order.

type refKernel struct{}

func (refKernel) Name() string { return "ref" }

func (refKernel) CanImplement(*Layer, int) (bool, string) { return true, "" }

func (refKernel) Prepare(*Layer, *Acts) {}

func (refKernel) Run(l *Layer, a *Acts, rb0, rb1 int, out []float32) {
	if l.Spec.Format.IsFloat() {
		refFloat(l, a, rb0, rb1, out)
		return
	}
	ly := l.Layout
	b := getRefBuf()
	defer putRefBuf(b)
	b.w = resize(b.w, RowBlock*ly.Kp)
	w := b.w
	segs := l.Segments()
	if ly.interleaved() {
		b.stream = resize(b.stream, ly.RowBlockBytes)
	}
	for rb := rb0; rb < rb1; rb++ {
		// Blobs reaching a kernel were produced by Pack or passed CheckBlob. (Other than an
		// interleaved layout's, the stream is the blob's own bytes, never kept.)
		stream := ly.RowBlockData(l.Data, rb, b.stream)
		_ = decoders[ly.Format](ly, stream, w)
		if ly.Format == quantcfg.Int2 {
			for i, c := range w {
				w[i] = l.Levels[c&3]
			}
		}
		for r := 0; r < RowBlock; r++ {
			m := rb*RowBlock + r
			if m >= ly.M {
				break
			}
			row := w[r*ly.Kp : (r+1)*ly.Kp]
			for t := 0; t < a.N; t++ {
				xq := a.Q[t*ly.Kp : (t+1)*ly.Kp]
				var y float32
				for j := 0; j < segs; j++ {
					k0, k1 := l.SegBounds(j)
					var acc int32
					for k := k0; k < k1; k++ {
						acc += int32(row[k]) * int32(xq[k])
					}
					p := Epilogue(acc, l.Scales[l.WSIndex(m, j)], a.XS[a.XSIndex(t, k0)])
					if j == 0 {
						y = p
					} else {
						y = y + p
					}
				}
				if l.Bias != nil {
					y = y + l.Bias[m]
				}
				out[t*ly.M+m] = y
			}
		}
	}
}

// refBufs keeps the reference kernel's decode buffers between calls, so that a call through
// it (the pure-Go path: noasm, BITD_PUREGO=1) allocates nothing once warm: a free list
// rather than a sync.Pool, which a collection empties and whose per-P caches miss when a
// worker runs on another P. Runs of one call on disjoint row ranges run concurrently: each
// takes a buffer of its own, so the list holds as many as ran at once. Buffers above
// refKeepBytes (a row block of a very long K) are dropped after their call.
var refBufs struct {
	sync.Mutex
	free []*refBuf
}

const refKeepBytes = 8 << 20

type refBuf struct {
	w      []int8    // a row block's decoded weights
	f      []float32 // a float row block's
	stream []byte    // a chunk-major row block's gathered stream (RowBlockData)
}

func getRefBuf() *refBuf {
	refBufs.Lock()
	defer refBufs.Unlock()
	if n := len(refBufs.free); n > 0 {
		b := refBufs.free[n-1]
		refBufs.free = refBufs.free[:n-1]
		return b
	}
	return new(refBuf)
}

func putRefBuf(b *refBuf) {
	if cap(b.w)+4*cap(b.f)+cap(b.stream) > refKeepBytes {
		return
	}
	refBufs.Lock()
	refBufs.free = append(refBufs.free, b)
	refBufs.Unlock()
}

func refFloat(l *Layer, a *Acts, rb0, rb1 int, out []float32) {
	ly := l.Layout
	b := getRefBuf()
	defer putRefBuf(b)
	b.f = resize(b.f, RowBlock*ly.K)
	w := b.f
	for rb := rb0; rb < rb1; rb++ {
		floatDecode(ly, ly.RowBlockData(l.Data, rb, nil), w)
		for r := 0; r < RowBlock; r++ {
			m := rb*RowBlock + r
			if m >= ly.M {
				break
			}
			row := w[r*ly.K : (r+1)*ly.K]
			for t := 0; t < a.N; t++ {
				x := a.F[t*ly.K : (t+1)*ly.K]
				var acc float32
				for k, wk := range row {
					acc = acc + float32(wk*x[k])
				}
				if l.Bias != nil {
					acc = acc + l.Bias[m]
				}
				out[t*ly.M+m] = acc
			}
		}
	}
}

// Reference computes y for n tokens of x (row-major [n][K]) with the reference kernel:
// the definition every other kernel is tested against. out is [n][M] float32.
func Reference(l *Layer, x []float32, n int) ([]float32, error) {
	var a Acts
	if err := l.Quantize(x, n, &a); err != nil {
		return nil, err
	}
	out := make([]float32, n*l.Layout.M)
	refKernel{}.Run(l, &a, 0, l.Layout.RowBlocks(), out)
	return out, nil
}
