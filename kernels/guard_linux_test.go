//go:build linux

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"bitgo/quantcfg"
)

// guarded returns n bytes between two inaccessible pages, flush against the one after
// (atEnd) or the one before: a read past either end faults.
func guarded(t *testing.T, n int, atEnd bool) []byte {
	t.Helper()
	pg := unix.Getpagesize()
	body := (n + pg - 1) / pg * pg
	m, err := unix.Mmap(-1, 0, body+2*pg, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(m) })
	if err := unix.Mprotect(m[:pg], unix.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mprotect(m[pg+body:], unix.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	if atEnd {
		return m[pg+body-n : pg+body : pg+body]
	}
	return m[pg : pg+n : pg+n]
}

// guardedFloats is a copy of v in guarded memory (v itself when empty).
func guardedFloats(t *testing.T, v []float32, atEnd bool) []float32 {
	if len(v) == 0 {
		return v
	}
	b := guarded(t, 4*len(v), atEnd)
	f := unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(v))
	copy(f, v)
	return f
}

// TestKernelsStayInsideTheLayer runs every kernel this CPU has (and the reference) with the
// layer's blob, scales and bias each flush against an inaccessible page, after them and then
// before them, on ragged shapes and token counts through the GEMV and GEMM paths: a kernel
// that reads a byte outside the layer faults. bitd serve keeps packed weights in mapped
// arenas, where the page after a layer's blob need not be mapped at all.
func TestKernelsStayInsideTheLayer(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 51))
	shapes := [][2]int{{37, 300}, {64, 13*TL2Block + 20}, {5, 128}}
	ns := []int{1, 3, 8, 11}
	ks := []Kernel{refKernel{}}
	for _, k := range asmKernels() {
		ks = append(ks, k)
	}
	for _, k := range ks {
		f := k.Name()
		formats := []quantcfg.Format{quantcfg.I2S, quantcfg.TL1, quantcfg.TL2, quantcfg.Int2, quantcfg.Int1, quantcfg.Int8, quantcfg.BF16, quantcfg.F32}
		if s, ok := k.(*simdKernel); ok {
			formats = []quantcfg.Format{s.format}
		}
		for _, format := range formats {
			for si, spec := range specsFor(format) {
				if si >= 2 {
					break
				}
				for _, sh := range shapes {
					spec := spec
					spec.Out, spec.In, spec.Bias = sh[0], sh[1], true
					tl := newTestLayer(t, rng, spec)
					for _, atEnd := range []bool{true, false} {
						l := *tl.Layer
						l.Prepared = nil
						l.Data = guarded(t, len(tl.Data), atEnd)
						copy(l.Data, tl.Data)
						l.Scales, l.Bias = guardedFloats(t, tl.Scales, atEnd), guardedFloats(t, tl.Bias, atEnd)
						for _, n := range ns {
							if ok, _ := k.CanImplement(&l, n); !ok {
								continue
							}
							x := randActs(rng, n, sh[1])
							want, err := Reference(tl.Layer, x, n)
							if err != nil {
								t.Fatal(err)
							}
							what := fmt.Sprintf("%s %s setting %d %dx%d n=%d (flush against the page %s)", f, format, si, sh[0], sh[1], n, map[bool]string{true: "after", false: "before"}[atEnd])
							checkExact(t, what, runSplit(t, k, &l, x, n), want, sh[0])
						}
					}
				}
			}
		}
	}
}
