//go:build amd64 && !noasm

package kernels

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"bitgo/quantcfg"
)

// TestInt1YTime times the AVX2 int1 panel kernels (tables built per call, then panel by
// panel) against the AVX2 int1 path through the Layer API (gemvInt1T1AVX2 with its fused
// epilogue, once per token; it reads the kernels/9 blob as the old layout: timing only) at
// one thread, from DRAM: each round runs every copy of the layer in a working set of at
// least 1 GiB, the two in alternating order, and the medians of the rounds are compared.
//
//	BITD_INT1Y_TIME=4096x14336,14336x4096,2560x2560 [BITD_INT1Y_ROUNDS=15] [BITD_INT1Y_T=1,2]
//	[BITD_INT1Y_SET=bytes: working set] go test ./kernels -run Int1YTime -v
//
// Skipped unless BITD_INT1Y_TIME is set.
func TestInt1YTime(t *testing.T) {
	env := os.Getenv("BITD_INT1Y_TIME")
	if env == "" {
		t.Skip("BITD_INT1Y_TIME not set")
	}
	if !ISAAvailable(ISAAVX2) {
		t.Skip("no AVX2/FMA")
	}
	defer DisableAVX512()()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rounds := int1YEnvInt("BITD_INT1Y_ROUNDS", 15)
	set := int1YEnvInt("BITD_INT1Y_SET", 1<<30)
	toks := []int{1, 2}
	if s := os.Getenv("BITD_INT1Y_T"); s != "" {
		toks = nil
		for _, f := range strings.Split(s, ",") {
			n, _ := strconv.Atoi(f)
			toks = append(toks, n)
		}
	}
	for _, shs := range strings.Split(env, ",") {
		var M, K int
		if _, err := fmt.Sscanf(shs, "%dx%d", &M, &K); err != nil {
			t.Fatal(err)
		}
		l, err := NewLayout(quantcfg.Int1, M, K)
		if err != nil {
			t.Fatal(err)
		}
		bytes := l.Bytes()
		copies := max(2, (set+bytes-1)/bytes)
		mem := make([]byte, copies*bytes)
		rng := rand.New(rand.NewPCG(3, 4))
		for i := 0; i+8 <= len(mem); i += 8 {
			*(*uint64)(unsafe.Pointer(&mem[i])) = rng.Uint64()
		}
		spec := quantcfg.LayerSpec{Name: "x", Format: quantcfg.Int1, Out: M, In: K}
		scales := make([]float32, M)
		for i := range scales {
			scales[i] = 1
		}
		layers := make([]*Layer, copies)
		for c := range layers {
			if layers[c], err = NewLayer(spec, mem[c*bytes:][:bytes], scales, nil); err != nil {
				t.Fatal(err)
			}
		}
		nrb, nb := l.RowBlocks(), l.Kp/32
		for _, T := range toks {
			x := make([]float32, T*K)
			for i := range x {
				x[i] = rng.Float32() - 0.5
			}
			acts := &Acts{}
			if err := layers[0].Quantize(x, T, acts); err != nil {
				t.Fatal(err)
			}
			k, err := Select(layers[0], T)
			if err != nil {
				t.Fatal(err)
			}
			out := make([]float32, T*M)
			tabStride := int1TabYBlock * nb
			tab := make([]byte, T*tabStride)
			sums := make([]int32, nrb*32*T)
			acc := make([]int16, Int1Panel*32*T)
			kern, kname := int1PanelT1AVX2, "int1PanelT1AVX2"
			if T == 2 {
				kern, kname = int1PanelT2AVX2, "int1PanelT2AVX2"
			}
			runNew := func(c int) {
				blob := mem[c*bytes:][:bytes]
				for tk := range T {
					int1BuildTabYAVX2(&acts.Q[tk*l.Kp], nb, &tab[tk*tabStride])
				}
				clear(sums)
				for rb0 := 0; rb0 < nrb; rb0 += Int1Panel {
					off, stride := l.BlockAt(rb0, 0)
					a := int1Args{W: unsafe.Pointer(&blob[off]), NRB: min(Int1Panel, nrb-rb0), BStride: stride, Blocks: nb,
						Tab: unsafe.Pointer(&tab[0]), TabStride: tabStride, Sums: unsafe.Pointer(&sums[rb0*32*T]), SStride: 128 * T,
						Acc: unsafe.Pointer(&acc[0])}
					kern(argp(&a))
				}
			}
			runOld := func(c int) {
				k.Prepare(layers[c], acts)
				k.Run(layers[c], acts, 0, nrb, out)
			}
			// the builder alone, cache-resident
			t0 := time.Now()
			const reps = 200
			for range reps {
				for tk := range T {
					int1BuildTabYAVX2(&acts.Q[tk*l.Kp], nb, &tab[tk*tabStride])
				}
			}
			build := time.Since(t0).Seconds() / reps
			t0 = time.Now()
			for range 5 {
				for tk := range T {
					buildInt1TabYGeneric(acts.Q[tk*l.Kp:][:l.Kp], tab[tk*tabStride:])
				}
			}
			buildGo := time.Since(t0).Seconds() / 5
			var gOld, gNew []float64
			for r := range rounds {
				for _, which := range []int{r % 2, 1 - r%2} {
					t0 := time.Now()
					for c := range copies {
						if which == 0 {
							runOld(c)
						} else {
							runNew(c)
						}
					}
					gb := float64(copies*bytes) / time.Since(t0).Seconds() / 1e9
					if which == 0 {
						gOld = append(gOld, gb)
					} else {
						gNew = append(gNew, gb)
					}
				}
			}
			slices.Sort(gOld)
			slices.Sort(gNew)
			mid := rounds / 2
			fmt.Printf("%s T=%d (%d copies, %.2f GiB): old %s median %.1f GB/s (%.1f-%.1f); new %s median %.1f (%.1f-%.1f); ratio %.3f; tables %.1f us a call (%.1f%% of the new call; buildInt1TabYGeneric %.0f us)\n",
				shs, T, copies, float64(copies*bytes)/(1<<30), k.Name(), gOld[mid], gOld[0], gOld[rounds-1],
				kname, gNew[mid], gNew[0], gNew[rounds-1], gNew[mid]/gOld[mid],
				build*1e6, 100*build/(float64(bytes)/gNew[mid]/1e9), buildGo*1e6)
		}
	}
}

func int1YEnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
