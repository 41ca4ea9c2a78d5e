package xe2

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"bitgo/quantcfg"
)

// docReference is an independent transcription of kernels/doc.go's arithmetic, checked
// against Reference (package kernels) so that the two definitions cannot drift. spec is an int2 (or ternary) layer; codes
// are its logical int2 codes ([M][K], 0..3). The result is [n][M] float32 (callers round
// to bf16 for bf16 outputs).
func docReference(spec quantcfg.LayerSpec, codes []int8, scales, bias []float32, x []float32, n int) ([]float32, error) {
	spec = spec.WithDefaults()
	if err := checkLayer(spec, codes, scales, bias); err != nil {
		return nil, err
	}
	m, k := spec.Out, spec.In
	if n < 1 || len(x) != n*k {
		return nil, fmt.Errorf("%w: layer %s: %d activation values for %d tokens, want %d", ErrShape, spec.Name, len(x), n, n*k)
	}
	if err := checkFiniteAct(x, k); err != nil {
		return nil, fmt.Errorf("layer %s: %w", spec.Name, err)
	}
	cb := codebookOf(spec)
	// Activation quantization.
	xq := make([]int8, n*k)
	var xs []float32
	ga := spec.Act.Group
	nga := 1
	switch spec.Act.Kind {
	case quantcfg.ActPerTensor:
		xs = []float32{actScale(absMax(x))}
		for i, v := range x {
			xq[i] = quantAct(v, xs[0])
		}
	case quantcfg.ActPerGroup:
		nga = ceilDiv(k, ga)
		xs = make([]float32, n*nga)
		for t := 0; t < n; t++ {
			for g := 0; g < nga; g++ {
				k0, k1 := t*k+g*ga, t*k+min((g+1)*ga, k)
				s := actScale(absMax(x[k0:k1]))
				xs[t*nga+g] = s
				for i := k0; i < k1; i++ {
					xq[i] = quantAct(x[i], s)
				}
			}
		}
	default: // per-token
		xs = make([]float32, n)
		for t := 0; t < n; t++ {
			row := x[t*k : (t+1)*k]
			xs[t] = actScale(absMax(row))
			for i, v := range row {
				xq[t*k+i] = quantAct(v, xs[t])
			}
		}
	}
	xsAt := func(t, k0 int) float32 {
		switch spec.Act.Kind {
		case quantcfg.ActPerTensor:
			return xs[0]
		case quantcfg.ActPerGroup:
			return xs[t*nga+k0/ga]
		}
		return xs[t]
	}
	wsAt := func(row, k0 int) float32 {
		switch spec.Scale.Kind {
		case quantcfg.ScaleRow:
			return scales[row]
		case quantcfg.ScaleGroup:
			g := spec.Scale.Group
			return scales[row*ceilDiv(k, g)+k0/g]
		}
		return scales[0]
	}
	sl := segLen(spec)
	if sl == 0 {
		sl = k
	}
	out := make([]float32, n*m)
	for row := 0; row < m; row++ {
		w := codes[row*k : (row+1)*k]
		for t := 0; t < n; t++ {
			q := xq[t*k : (t+1)*k]
			var y float32
			for k0 := 0; k0 < k; k0 += sl {
				var acc int32
				for i := k0; i < min(k0+sl, k); i++ {
					acc += int32(cb[w[i]]) * int32(q[i])
				}
				p := float32(float32(acc)*wsAt(row, k0)) / xsAt(t, k0)
				if k0 == 0 {
					y = p
				} else {
					y = y + p
				}
			}
			if bias != nil {
				y = y + bias[row]
			}
			out[t*m+row] = y
		}
	}
	return out, nil
}

const actEps = float32(1e-5)

func actScale(amax float32) float32 { return float32(127) / max(amax, actEps) }

func quantAct(x, xs float32) int8 {
	p := x * xs
	r := math.RoundToEven(float64(p))
	return int8(max(-128, min(127, r)))
}

func absMax(x []float32) float32 {
	var m float32
	for _, v := range x {
		m = max(m, float32(math.Abs(float64(v))))
	}
	return m
}

func TestReferenceMatchesDocGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 14))
	acts := []quantcfg.ActMode{quantcfg.PerToken, quantcfg.PerTensor, quantcfg.PerGroup(32), quantcfg.PerGroup(96)}
	scales := []quantcfg.ScaleGran{quantcfg.PerRowScale, quantcfg.PerTensorScale, quantcfg.GroupScale(32), quantcfg.GroupScale(192)}
	books := []quantcfg.Codebook{quantcfg.DefaultCodebook, {-3, -1, 1, 3}, {5, -128, 127, 0}}
	for i := 0; i < 300; i++ {
		spec := quantcfg.LayerSpec{Name: "ref", Format: quantcfg.Int2, Out: rng.IntN(40) + 1, In: rng.IntN(400) + 1,
			Act: acts[rng.IntN(4)], Scale: scales[rng.IntN(4)], Codebook: books[rng.IntN(3)], Bias: rng.IntN(2) == 0}
		if spec.Act.Kind == quantcfg.ActPerGroup && spec.Scale.Kind == quantcfg.ScaleGroup &&
			spec.Act.Group%spec.Scale.Group != 0 && spec.Scale.Group%spec.Act.Group != 0 {
			continue
		}
		n := rng.IntN(5) + 1
		codes, sc, bias := RandomLayer(rng, spec)
		x := RandomActs(rng, n, spec.In)
		a, err := Reference(spec, codes, sc, bias, x, n)
		if err != nil {
			t.Fatal(err)
		}
		b, err := docReference(spec, codes, sc, bias, x, n)
		if err != nil {
			t.Fatal(err)
		}
		if j := firstDiff(a, b); j >= 0 {
			t.Fatalf("%+v n=%d: output %d: kernels %g, doc.go %g", spec, n, j, a[j], b[j])
		}
	}
}
