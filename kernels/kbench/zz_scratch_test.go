package kbench

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"bitgo/kernels"
	"bitgo/quantcfg"
)

func TestZZSplitTimes(t *testing.T) {
	for _, f := range []quantcfg.Format{quantcfg.I2S, quantcfg.Int1, quantcfg.TL2} {
		s, err := NewSet(f, Shape{2560, 2560}, 8<<20, 1)
		if err != nil {
			t.Fatal(err)
		}
		p := NewPool(2)
		r, err := NewRunner(p, s, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		r.Warm()
		const N = 4000
		var t0 time.Time
		var st, en [2][]float64
		var tot, prep, ent []float64
		split := func(_ string, units int, _ bool, fn func(w, lo, hi int)) {
			ent = append(ent, float64(time.Since(t0).Nanoseconds()))
			p.Run(func(w int) {
				a := time.Since(t0)
				if lo, hi := Split(units, p.Threads(), w); lo < hi {
					fn(w, lo, hi)
				}
				st[w] = append(st[w], float64(a.Nanoseconds()))
				en[w] = append(en[w], float64(time.Since(t0).Nanoseconds()))
			})
		}
		for i := 0; i < N; i++ {
			l := s.Layers[i%len(s.Layers)]
			t0 = time.Now()
			r.k.Prepare(l, &r.acts)
			prep = append(prep, float64(time.Since(t0).Nanoseconds()))
			kernels.RunSplit(r.k, l, &r.acts, r.out, 2, split)
			tot = append(tot, float64(time.Since(t0).Nanoseconds()))
		}
		med := func(v []float64) float64 { v = append([]float64(nil), v...); sort.Float64s(v); return v[len(v)/2] }
		fmt.Printf("%s: entry %.0f total %.0f prep %.0f | w0 %.0f..%.0f  w1 %.0f..%.0f\n", f, med(ent), med(tot), med(prep), med(st[0]), med(en[0]), med(st[1]), med(en[1]))
		p.Close()
		s.Free()
	}
}
