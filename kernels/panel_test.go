package kernels

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"bitgo/quantcfg"
)

// TestTL2PanelGEMV: panel-major tl2 layers give the reference's results bit for bit
// through every tuning's tl2 kernels, for one to eight tokens (several token groups, one
// token alone), in row ranges that start and end inside panels (runSplit), and split among
// workers by whole panels (RunSplit, RowGranule): 4100 x 4100 (eight panels and one row
// block, a 20-input tl1 tail) and 4096 x 4080 (eight whole panels, no tail).
func TestTL2PanelGEMV(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 41))
	shapes := [][2]int{{4100, 4100}, {4096, 4080}}
	ns := []int{1, 2, 3, 4, 5, 8}
	if raceEnabled {
		shapes, ns = shapes[:1], []int{1, 3}
	}
	defer SwitchTuning(currentTuning())
	ran := 0
	for tn := Tuning(0); tn < numTunings; tn++ {
		SwitchTuning(tn)
		for _, k := range asmKernels() {
			if k.format != quantcfg.TL2 {
				continue
			}
			name := fmt.Sprintf("%s/%s", tn, k.Name())
			eachShape(t, name, k, k.format, rng, shapes, 1, ns, func(what string, tl testLayer, x []float32, n int, want []float32) {
				if !tl.Layout.Paneled() {
					t.Fatalf("%s: not panel-major", what)
				}
				if g := k.RowGranule(tl.Layer); g != TL2Panel {
					t.Fatalf("%s: row granule %d, want %d", what, g, TL2Panel)
				}
				checkExact(t, what, runSplit(t, k, tl.Layer, x, n), want, tl.Spec.Out)
				for _, workers := range []int{2, 3} {
					checkExact(t, fmt.Sprintf("%s, %d workers", what, workers), runPanelSplit(t, k, tl.Layer, x, n, workers), want, tl.Spec.Out)
				}
				ran++
			})
		}
	}
	if ran == 0 {
		t.Skip("no tl2 assembly kernel on this CPU")
	}
	// prefill: the GEMM unpacks each row block's stream gathered from its panel (unpackRB)
	if raceEnabled {
		return
	}
	SwitchTuning(TuningDefault)
	for _, k := range asmKernels() {
		if k.format != quantcfg.TL2 {
			continue
		}
		n := gemmMinN
		eachShape(t, k.Name(), k, k.format, rng, [][2]int{{4096, 4080}}, 1, []int{n}, func(what string, tl testLayer, x []float32, n int, want []float32) {
			if !k.useGemm(tl.Layer, n) {
				t.Fatalf("%s: not the GEMM", what)
			}
			checkExact(t, what, runSplit(t, k, tl.Layer, x, n), want, tl.Spec.Out)
		})
	}
}

// runPanelSplit runs a call of k through RunSplit over workers goroutines, the splitter
// checking that its units are the layer's panels.
func runPanelSplit(t *testing.T, k *simdKernel, l *Layer, x []float32, n, workers int) []float32 {
	t.Helper()
	var a Acts
	if err := l.Quantize(x, n, &a); err != nil {
		t.Fatal(err)
	}
	k.Prepare(l, &a)
	out := make([]float32, n*l.Layout.M)
	mrb := l.Layout.RowBlocks()
	var bad []string
	split := func(_ string, units int, _ bool, fn func(w, lo, hi int)) {
		if want := (mrb + TL2Panel - 1) / TL2Panel; units != want {
			bad = append(bad, fmt.Sprintf("%d units for %d row blocks, want %d panels", units, mrb, want))
		}
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fn(w, units*w/workers, units*(w+1)/workers)
			}()
		}
		wg.Wait()
	}
	RunSplit(k, l, &a, out, workers, split)
	for _, b := range bad {
		t.Error(b)
	}
	return out
}
