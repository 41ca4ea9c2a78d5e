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

// TestKernelsStayInsideTheLayer runs every assembly kernel this CPU has, and the generic
// operations of every format in both layouts, with the layer's blob, scales and bias each
// flush against an inaccessible page, after them and then before them, on ragged shapes
// and token counts through the GEMV and GEMM paths: a kernel that reads a byte outside the
// layer faults. bitd serve keeps packed weights in mapped arenas, where the page after a
// layer's blob need not be mapped at all.
func TestKernelsStayInsideTheLayer(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 51))
	shapes := [][2]int{{37, 300}, {64, 13*TL2Block + 20}, {5, 128}}
	type named struct {
		name string
		f    quantcfg.Format
		Kernel
	}
	var ks []named
	for _, k := range asmKernels() {
		ks = append(ks, named{k.Name(), k.format, k})
	}
	for _, f := range allFormats {
		for _, z := range []bool{true, false} {
			ks = append(ks, named{fmt.Sprintf("generic/%s (zmm layouts: %t)", f, z), f, &genericKernel{*newSIMDKernel(ISAAVX512, f, genericOps(f, z), false)}})
		}
	}
	for _, k := range ks {
		eachShape(t, k.name, k.Kernel, k.f, rng, shapes, 2, []int{1, 3, 8, 11}, func(what string, tl testLayer, x []float32, n int, want []float32) {
			for _, atEnd := range []bool{true, false} {
				l := *tl.Layer
				l.prep = nil
				l.Data = guarded(t, len(tl.Data), atEnd)
				copy(l.Data, tl.Data)
				l.Scales, l.Bias = guardedFloats(t, tl.Scales, atEnd), guardedFloats(t, tl.Bias, atEnd)
				where := map[bool]string{true: "after", false: "before"}[atEnd]
				checkExact(t, fmt.Sprintf("%s (flush against the page %s)", what, where), runSplit(t, k.Kernel, &l, x, n), want, tl.Spec.Out)
			}
		})
	}
}
