package kernels

import (
	"math/rand/v2"
	"sync"
	"testing"

	"bitgo/quantcfg"
)

// TestLayerPrepOnce: callers racing to a layer's first simdPrep all get the one that is
// kept, with the layer's scales and bias laid out, and later calls get it again; a copy of
// the layer whose prep is reset builds its own. (The race detector checks the lock-free
// reads in the race run of the suite.)
func TestLayerPrepOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	tl := newTestLayer(t, rng, quantcfg.LayerSpec{Format: quantcfg.TL2, Out: 70, In: 2560, Bias: true, Scale: quantcfg.ScaleGran{Kind: quantcfg.ScaleRow}})
	const callers = 8
	got := make([]*layerPrep, callers)
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range got {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			got[i] = tl.simdPrep()
		}()
	}
	start.Done()
	done.Wait()
	p := tl.simdPrep()
	for i, q := range got {
		if q != p {
			t.Fatalf("caller %d got layer data %p, the layer keeps %p", i, q, p)
		}
	}
	check := func(what string, p *layerPrep) {
		t.Helper()
		for m := range tl.Spec.Out {
			rb, r := m/RowBlock, m%RowBlock
			if w := p.ws[rb*p.wsRB+r]; w != tl.Scales[m] {
				t.Fatalf("%s: row %d scale %v, want %v", what, m, w, tl.Scales[m])
			}
			if p.bias[m] != tl.Bias[m] {
				t.Fatalf("%s: row %d bias %v, want %v", what, m, p.bias[m], tl.Bias[m])
			}
		}
		if len(p.chunks) != tl.Layout.Chunks() {
			t.Fatalf("%s: %d chunks, want %d", what, len(p.chunks), tl.Layout.Chunks())
		}
	}
	check("first use", p)
	l := *tl.Layer
	l.prep = nil
	q := l.simdPrep()
	if q == p {
		t.Fatal("a copy with its prep reset shares the original's")
	}
	check("the copy's", q)
}
