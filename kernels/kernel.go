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

// Parted is implemented by kernels that can also run a call in parts of the weights' stream
// instead of ranges of rows. A chunk-major blob (tl1, and tl2 but the panel-major shapes)
// stores chunk c of row block rb, unit c*RowBlocks()+rb, in the blob's own order, so a
// range of units is one stretch of memory, where a range of rows is a stretch in every
// chunk: with two threads on the 8B shapes, tl2 read closer to the memory's rate that way
// (before those shapes were panel-major, whose whole panels are one stretch: Granular). A
// panel-major blob (tl2, int1) runs in parts where its panels would not share out evenly,
// its row blocks' blocks the units. Each worker adds into int32 sums of its own, over the
// row blocks its units touch, and Finish adds them up per row block. RunSplit drives it.
type Parted interface {
	Kernel
	// Units prepares a call for workers threads, after Prepare, and returns how many units
	// to split among them, or 0 when the call runs by rows (Run).
	Units(l *Layer, a *Acts, workers int) int
	// RunUnits sweeps units [u0, u1) into worker w's sums (0 <= w < workers). Calls of
	// different workers may run concurrently; one worker's calls must not overlap.
	RunUnits(l *Layer, a *Acts, w, u0, u1 int)
	// Finish computes out for row blocks [rb0, rb1) from the workers' sums, after every
	// RunUnits of the call. Different row-block ranges may run concurrently.
	Finish(l *Layer, a *Acts, rb0, rb1 int, out []float32)
}

// PerCall is implemented by kernels whose Run (and RunUnits) calls cost something of their
// own beyond their rows' work: tl1 and tl2 build the lookup tables of every chunk a call
// sweeps, and int1's AVX-512 kernels build each block's tables once for the row blocks of
// a panel they sweep (kernels/_asm/int1.go), so a runner that steals,
// cutting a worker's share into ever smaller pieces, would have them built again for each
// piece. RunSplit gives each worker one range of theirs.
type PerCall interface {
	PerCall(l *Layer, n int) bool
}

// Paired is implemented by kernels whose calls read faster two row blocks at a time, far
// apart (the zen3 tuning's one-token i2s and int2: a core of that Zen 3 reads two streams
// 256 KiB or more apart 1.11-1.12x as fast as one). RunSplit splits such a call into
// PairUnits units, unit u being row blocks u and u+PairUnits (the second where it is below
// the layer's row blocks), and runs each range of units through RunPairs: so every piece a
// runner hands out, however short, reads two streams half the layer apart, where Run could
// pair only within its range (a stealing runner's last pieces are a row block or two).
type Paired interface {
	// PairUnits is the units of l's call of a.N tokens, (RowBlocks()+1)/2, or 0 where the
	// call runs by rows.
	PairUnits(l *Layer, a *Acts) int
	// RunPairs computes out as Run does for the row blocks of units [u0, u1). Different
	// ranges of units may run concurrently.
	RunPairs(l *Layer, a *Acts, u0, u1 int, out []float32)
}

// Splitter runs fn(w, lo, hi) over ranges [lo, hi) that cover [0, units), in parallel on a
// runner's workers, w being the worker that runs the range (0 <= w < the runner's threads,
// one worker's ranges one after another), and returns when all are done. With once, each
// worker runs at most one range (no stealing). class names the kind of work (sched.Pool
// keeps its per-worker ratios by class).
type Splitter func(class string, units int, once bool, fn func(w, lo, hi int))

// RunSplit runs a prepared call of k on workers threads: its row blocks split among them
// (class k.Name()), or, when k is Parted and takes the call in parts, the units of the
// weights (class k.Name()+"/parts") and then the row blocks' sums and outputs
// (k.Name()+"/finish"), or, when k is Paired and pairs the call, its pairs of row blocks
// (class k.Name()). A PerCall kernel's ranges are whole shares (once), and so are a
// Finish's: each Finish call pays its own setup (the plan, a thread buffer, the epilogue's
// fields) for a few microseconds of adds, which a stealing runner's eighths paid again and
// again (sched.Pool, two threads, tl2 from DRAM: 2560x6912 1.019x as fast with whole
// shares, the BitNet-2B-shaped model's decode 1.000-1.006x).
//
// It allocates nothing once a's first call has passed: the functions it hands the splitter
// and the class names are kept in a (splitCall).
func RunSplit(k Kernel, l *Layer, a *Acts, out []float32, workers int, split Splitter) {
	c := a.call
	if c == nil {
		c = newSplitCall()
		a.call = c
	}
	c.k, c.l, c.a, c.out = k, l, a, out
	a.workers = workers
	defer c.clear()
	pc, ok := k.(PerCall)
	once := ok && pc.PerCall(l, a.N)
	c.named(k.Name())
	if pk, ok := k.(Parted); ok {
		if units := pk.Units(l, a, workers); units > 0 {
			c.pk = pk
			split(c.parts, units, once, c.runUnits)
			split(c.finish, l.Layout.RowBlocks(), true, c.runFinish)
			return
		}
	}
	if pk, ok := k.(Paired); ok {
		if units := pk.PairUnits(l, a); units > 0 {
			c.pp = pk
			split(c.name, units, once, c.runPairs)
			return
		}
	}
	c.granule = 1
	if g, ok := k.(Granular); ok {
		c.granule = max(1, g.RowGranule(l, a.N))
	}
	mrb := l.Layout.RowBlocks()
	split(c.name, (mrb+c.granule-1)/c.granule, once, c.run)
}

// Granular is implemented by kernels whose calls split best in ranges of whole groups of
// row blocks: a tl2 blob's panels (Layout.PanelRows), whose blocks interleave their row
// blocks, so that two workers sharing a panel would each stream the other's half of every
// block past its caches (measured, 2560x2560 from DRAM at two threads, the 80 row blocks
// split 40/40: tl2 0.39-0.43x i2s's speed, against 1.0-1.06x with the chunk-major layout
// before; 2048x2560 and 3072x2560, whose halves are whole panels, ran as before). A tl2
// GEMM, which unpacks each row block on its own, splits by row blocks.
type Granular interface {
	// RowGranule is the row blocks of one unit of l's row split of a call of n tokens (the
	// last may be short).
	RowGranule(l *Layer, n int) int
}

// splitCall is RunSplit's call in flight, kept in its Acts (one call at a time, as the
// Acts themselves): the functions it hands the splitter are made once, and the class names
// once per kernel.
type splitCall struct {
	k                   Kernel
	pk                  Parted
	pp                  Paired
	l                   *Layer
	a                   *Acts
	out                 []float32
	name, parts, finish string
	granule             int // row blocks a unit of the row split (Granular)
	run                 func(w, lo, hi int)
	runUnits, runFinish func(w, lo, hi int)
	runPairs            func(w, lo, hi int)
}

func newSplitCall() *splitCall {
	c := &splitCall{}
	c.run = func(_, lo, hi int) {
		mrb := c.l.Layout.RowBlocks()
		c.k.Run(c.l, c.a, min(lo*c.granule, mrb), min(hi*c.granule, mrb), c.out)
	}
	c.runUnits = func(w, lo, hi int) { c.pk.RunUnits(c.l, c.a, w, lo, hi) }
	c.runFinish = func(_, lo, hi int) { c.pk.Finish(c.l, c.a, lo, hi, c.out) }
	c.runPairs = func(_, lo, hi int) { c.pp.RunPairs(c.l, c.a, lo, hi, c.out) }
	return c
}

func (c *splitCall) named(name string) {
	if name != c.name {
		c.name, c.parts, c.finish = name, name+"/parts", name+"/finish"
	}
}

// clear drops the call's references (the layer and the output may be freed after it).
func (c *splitCall) clear() {
	c.a.workers = 0 // (a later Run of its own is one worker's)
	c.k, c.pk, c.pp, c.l, c.a, c.out = nil, nil, nil, nil, nil, nil
}
