//go:build amd64 && !noasm

package kernels_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"bitgo/kernels"
	"bitgo/kernels/kbench"
	"bitgo/quantcfg"
)

// TestInt1PanelTime times int1PanelT<T>AVX512 against the int1 kernel the Layer API
// selects for T tokens, from DRAM (a working set of at least 1 GiB), in rounds that
// alternate their order, in one process; timing only (both read the same blobs, whatever
// they hold). BITD_INT1_TIME=MxK,... sets the shapes, BITD_INT1_TIME_TOKENS=1,2,... the
// token counts, BITD_INT1_TIME_THREADS the threads (1), BITD_INT1_TIME_ROUNDS the rounds
// (31). The figures are over the rounds in which both ran with their CPUs throughout
// (kbench.Trial). The old kernel's time includes its activation preparation and its
// epilogue; the panel kernel's neither. Both split the row blocks evenly between the
// threads (the panel kernel a call for each panel's share), or with
// BITD_INT1_TIME_SPLIT=panels the panel kernel whole panels.
func TestInt1PanelTime(t *testing.T) {
	env := os.Getenv("BITD_INT1_TIME")
	if env == "" {
		t.Skip("BITD_INT1_TIME not set")
	}
	threads, rounds := 1, 31
	if s := os.Getenv("BITD_INT1_TIME_THREADS"); s != "" {
		threads, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("BITD_INT1_TIME_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	byPanel := os.Getenv("BITD_INT1_TIME_SPLIT") == "panels"
	var tokens []int
	for _, s := range strings.Split(os.Getenv("BITD_INT1_TIME_TOKENS"), ",") {
		T, err := strconv.Atoi(s)
		if err != nil || T < 1 || T > 4 {
			t.Fatalf("BITD_INT1_TIME_TOKENS: %q is not 1 to 4", s)
		}
		tokens = append(tokens, T)
	}
	pool := kbench.NewPool(threads)
	defer pool.Close()
	for _, shs := range strings.Split(env, ",") {
		sh, err := kbench.ParseShape(shs)
		if err != nil {
			t.Fatal(err)
		}
		set, err := kbench.NewSet(quantcfg.Int1, sh, 1<<30, 1)
		if err != nil {
			t.Fatal(err)
		}
		ly := set.Layers[0].Layout
		bytes := ly.Bytes()
		all := unsafe.Slice(&set.Layers[0].Data[0], len(set.Layers)*bytes) // (NewSet's layers lie back to back)
		rd, _ := kbench.ReadBandwidth(pool, all, 3)
		fmt.Printf("%s threads %d: read %.1f GB/s (best of 3)\n", shs, threads, rd/1e9)
		rng := rand.New(rand.NewPCG(3, 4))
		for _, T := range tokens {
			name := fmt.Sprintf("int1PanelT%dAVX512", T)
			x := make([]float32, T*sh.K)
			for i := range x {
				x[i] = rng.Float32() - 0.5
			}
			acts := &kernels.Acts{}
			if err := set.Layers[0].Quantize(x, T, acts); err != nil {
				t.Fatal(err)
			}
			old, err := kernels.Select(set.Layers[0], T)
			if err != nil {
				t.Fatal(err)
			}
			xb := make([]byte, T*ly.Kp)
			for i := range xb {
				xb[i] = byte(rng.Uint32())
			}
			outs := make([][]float32, threads)
			sums := make([][]int32, threads)
			accs := make([][]int16, threads)
			for i := range outs {
				outs[i] = make([]float32, T*sh.M)
				sums[i] = make([]int32, kernels.Int1Panel*32*T)
				accs[i] = make([]int16, kernels.Int1Panel*32*T)
			}
			var to, tn []float64 // GB/s of the rounds in which both ran clean (kbench.Trial)
			for round := range rounds {
				var gb [2]float64
				clean := true
				for _, which := range []int{round % 2, 1 - round%2} {
					tr := kbench.StartTrial()
					for _, l := range set.Layers {
						if which == 0 {
							old.Prepare(l, acts)
							pool.Run(func(wk int) {
								lo, hi := kbench.Split(ly.RowBlocks(), threads, wk)
								old.Run(l, acts, lo, hi, outs[wk])
							})
							continue
						}
						pool.Run(func(wk int) {
							lo, hi := kbench.Split(ly.RowBlocks(), threads, wk)
							if byPanel {
								lo, hi = kbench.Split(ly.Panels(), threads, wk)
								lo, hi = lo*ly.PanelRows(), min(hi*ly.PanelRows(), ly.RowBlocks())
							}
							kernels.Int1PanelTime(T, l, xb, lo, hi, sums[wk], accs[wk])
						})
					}
					wall, ok := tr.Stop(threads)
					gb[which] = float64(len(set.Layers)*bytes) / wall.Seconds() / 1e9
					clean = clean && ok
				}
				if clean {
					to, tn = append(to, gb[0]), append(tn, gb[1])
				}
			}
			n := len(to)
			if n == 0 {
				fmt.Printf("%s T%d threads %d: %s: no clean round of %d\n", shs, T, threads, name, rounds)
				continue
			}
			ratios := make([]float64, n)
			for i := range ratios {
				ratios[i] = tn[i] / to[i]
			}
			slices.Sort(to)
			slices.Sort(tn)
			slices.Sort(ratios)
			fmt.Printf("%s T%d threads %d, %d clean rounds of %d: old %s median %.1f GB/s (%.1f-%.1f); %s median %.1f (%.1f-%.1f); ratio of medians %.3f, median ratio %.3f (%.3f-%.3f)\n",
				shs, T, threads, n, rounds, old.Name(), to[n/2], to[0], to[n-1], name, tn[n/2], tn[0], tn[n-1],
				tn[n/2]/to[n/2], ratios[n/2], ratios[0], ratios[n-1])
		}
		set.Free()
	}
}
