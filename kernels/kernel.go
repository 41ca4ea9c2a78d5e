package kernels

import (
	"fmt"
	"strings"
)

// Kernel is one implementation of a layer's matrix product (GEMV for a few tokens, GEMM for
// many). Every kernel returns exactly the reference's results.
type Kernel interface {
	// Name identifies the kernel ("ref", "avx512vnni/int2", ...).
	Name() string
	// CanImplement says whether the kernel can run layer l with n tokens on this CPU, and if
	// not, why (for `bitd info` and for ErrNoKernel).
	CanImplement(l *Layer, n int) (ok bool, reason string)
	// Prepare does the per-call work every thread shares (lookup tables, activation sums)
	// into a.Scratch, after activations are quantized and before Run.
	Prepare(l *Layer, a *Acts)
	// Run computes out[t*M+m] (float32, epilogue and bias included) for every token t and
	// every row m of row blocks [rb0, rb1). Different row-block ranges may run concurrently.
	Run(l *Layer, a *Acts, rb0, rb1 int, out []float32)
}

// kernelList is the dispatch priority list: the first kernel that can implement a layer
// runs it. The reference is last and implements everything.
var kernelList = []Kernel{refKernel{}}

// Kernels returns the dispatch list in priority order.
func Kernels() []Kernel { return append([]Kernel(nil), kernelList...) }

// Ref returns the reference kernel.
func Ref() Kernel { return refKernel{} }

// Select returns the first kernel in the priority list that can run l with n tokens. When
// none can, the error lists every kernel's reason.
func Select(l *Layer, n int) (Kernel, error) {
	var why []string
	for _, k := range kernelList {
		ok, reason := k.CanImplement(l, n)
		if ok {
			return k, nil
		}
		why = append(why, k.Name()+": "+reason)
	}
	return nil, fmt.Errorf("%w for layer %s (%s %dx%d, n=%d): %s", ErrNoKernel, l.Spec.Name, l.Spec.Format, l.Spec.Out, l.Spec.In, n, strings.Join(why, "; "))
}
