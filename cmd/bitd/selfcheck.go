package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"time"

	"bitgo/kernels"
	"bitgo/quantcfg"
)

func init() {
	register(command{name: "selfcheck", summary: "run every format on a random layer and check it against float math", run: runSelfcheck})
}

// runSelfcheck builds a random MxK layer in every format, runs one GEMV through the kernel
// this CPU selects and through the reference, requires them to agree bit for bit, and
// compares the result with float64 math on the dequantized weights and activations.
func runSelfcheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("selfcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	m := fs.Int("m", 2560, "output features (rows)")
	k := fs.Int("k", 2560, "input features")
	n := fs.Int("n", 1, "tokens")
	seed := fs.Uint64("seed", 1, "random seed")
	if !parseFlags(fs, args, stderr) {
		return 2
	}
	rng := rand.New(rand.NewPCG(*seed, 0))
	x := make([]float32, *n**k)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	wf := make([]float32, *m**k)
	for i := range wf {
		wf[i] = float32(rng.NormFloat64() * 0.02)
	}
	fmt.Fprintf(stdout, "%-5s %-22s %10s %12s %12s  %s\n", "fmt", "kernel", "time", "max rel err", "vs float64", "")
	bad := 0
	for _, fi := range quantcfg.Formats() {
		spec := quantcfg.LayerSpec{Name: "selfcheck-" + string(fi.Format), Format: fi.Format, Out: *m, In: *k}.WithDefaults()
		w, scales, err := logicalFromFloat(spec, wf)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", fi.Format, err)
			return 1
		}
		blob, err := kernels.PackNew(spec.Format, *m, *k, w)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", fi.Format, err)
			return 1
		}
		l, err := kernels.NewLayer(spec, blob, scales, nil)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", fi.Format, err)
			return 1
		}
		kern, err := kernels.Select(l, *n)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", fi.Format, err)
			return 1
		}
		var a kernels.Acts
		if err := l.Quantize(x, *n, &a); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", fi.Format, err)
			return 1
		}
		out := make([]float32, *n**m)
		start := time.Now()
		kern.Prepare(l, &a)
		kern.Run(l, &a, 0, l.Layout.RowBlocks(), out)
		took := time.Since(start)
		ref, err := kernels.Reference(l, x, *n)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", fi.Format, err)
			return 1
		}
		exact := "bit-exact"
		for i := range ref {
			if math.Float32bits(ref[i]) != math.Float32bits(out[i]) {
				exact = fmt.Sprintf("MISMATCH at %d: %v vs reference %v", i, out[i], ref[i])
				bad++
				break
			}
		}
		// float64 math on the dequantized operands
		maxRel := 0.0
		for t := 0; t < *n; t++ {
			for r := 0; r < *m; r++ {
				var want, mag float64
				for i := 0; i < *k; i++ {
					wv, xv := dequant(l, w, &a, x, t, r, i)
					want += wv * xv
					mag += math.Abs(wv * xv)
				}
				if mag > 0 {
					maxRel = math.Max(maxRel, math.Abs(float64(out[t**m+r])-want)/mag)
				}
			}
		}
		status := "ok"
		if maxRel > 1e-5 {
			status = "FAIL"
			bad++
		}
		fmt.Fprintf(stdout, "%-5s %-22s %10s %12.2e %12s  %s\n", fi.Format, kern.Name(), took.Round(time.Microsecond), maxRel, status, exact)
	}
	if bad > 0 {
		fmt.Fprintf(stderr, "selfcheck: %d failure(s)\n", bad)
		return 1
	}
	fmt.Fprintf(stdout, "all formats agree with the reference and with float64 math (%dx%d, n=%d)\n", *m, *k, *n)
	return 0
}

// logicalFromFloat quantizes float weights for spec with the recipes of package kernels.
func logicalFromFloat(spec quantcfg.LayerSpec, wf []float32) (kernels.Weights, []float32, error) {
	switch {
	case spec.Format.IsFloat():
		return kernels.Weights{F: wf}, nil, nil
	case spec.Format.IsTernary():
		q, s, err := kernels.Ternarize(wf)
		return kernels.Weights{Q: q}, []float32{s}, err
	}
	q, s, err := kernels.QuantizeWeights(spec.Format, wf, spec.Out, spec.In, spec.Scale, spec.Codebook)
	return kernels.Weights{Q: q}, s, err
}

// dequant returns the float64 weight and activation the quantized layer stands for.
func dequant(l *kernels.Layer, w kernels.Weights, a *kernels.Acts, x []float32, t, r, i int) (float64, float64) {
	k := l.Layout.K
	if l.Spec.Format.IsFloat() {
		wv := float64(w.F[r*k+i])
		if l.Spec.Format == quantcfg.BF16 {
			wv = float64(kernels.RoundBF16(w.F[r*k+i]))
		}
		return wv, float64(x[t*k+i])
	}
	lv := float64(w.Q[r*k+i])
	if l.Spec.Format == quantcfg.Int2 {
		lv = float64(l.Levels[w.Q[r*k+i]])
	}
	seg := 0
	if l.SegLen > 0 {
		seg = i / l.SegLen
	}
	return lv * float64(l.Scales[l.WSIndex(r, seg)]), float64(a.Q[t*a.Kp+i]) / float64(a.XS[a.XSIndex(t, i)])
}
