package kernels

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"bitgo/quantcfg"
)

// testLayer is a layer with its logical weights kept for independent checks.
type testLayer struct {
	*Layer
	W Weights
}

func randWeights(rng *rand.Rand, f quantcfg.Format, m, k int) Weights {
	return RandomWeights(rng, f, m, k, 1)
}

func newTestLayer(t testing.TB, rng *rand.Rand, spec quantcfg.LayerSpec) testLayer {
	t.Helper()
	spec = spec.WithDefaults()
	if spec.Name == "" {
		spec.Name = fmt.Sprintf("%s_%dx%d", spec.Format, spec.Out, spec.In)
	}
	w := randWeights(rng, spec.Format, spec.Out, spec.In)
	scales := make([]float32, spec.NumScales())
	for i := range scales {
		scales[i] = float32(0.001 + rng.Float64())
	}
	var bias []float32
	if spec.Bias {
		bias = make([]float32, spec.Out)
		for i := range bias {
			bias[i] = float32(rng.NormFloat64())
		}
	}
	return testLayer{packLayer(t, spec, w, scales, bias), w}
}

// packLayer packs the logical weights w of spec and makes the layer.
func packLayer(t testing.TB, spec quantcfg.LayerSpec, w Weights, scales, bias []float32) *Layer {
	t.Helper()
	blob, err := PackNew(spec.Format, spec.Out, spec.In, w)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLayer(spec, blob, scales, bias)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func randActs(rng *rand.Rand, n, k int) []float32 {
	x := make([]float32, n*k)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 3)
	}
	return x
}

// naive computes the package doc's arithmetic straight from logical weights (no layout),
// written independently of the reference kernel.
func naive(tl testLayer, x []float32, n int) []float32 {
	s := tl.Spec
	m, k := s.Out, s.In
	out := make([]float32, n*m)
	if s.Format.IsFloat() {
		for t := 0; t < n; t++ {
			for r := 0; r < m; r++ {
				var acc float32
				for i := 0; i < k; i++ {
					acc += float32(tl.W.F[r*k+i] * x[t*k+i])
				}
				if s.Bias {
					acc += tl.Bias[r]
				}
				out[t*m+r] = acc
			}
		}
		return out
	}
	level := func(v int8) int32 {
		if s.Format == quantcfg.Int2 {
			return int32(s.Codebook[v])
		}
		return int32(v)
	}
	// activation groups
	ag := k
	switch s.Act.Kind {
	case quantcfg.ActPerGroup:
		ag = s.Act.Group
	}
	xq := make([]int8, n*k)
	xs := make([]float32, n*k) // the scale that applies to each activation
	if s.Act.Kind == quantcfg.ActPerTensor {
		var amax float32
		for _, v := range x {
			amax = float32(math.Max(float64(amax), math.Abs(float64(v))))
		}
		sc := 127 / float32(math.Max(float64(amax), float64(float32(1e-5))))
		for i := range x {
			xs[i] = sc
		}
	} else {
		for t := 0; t < n; t++ {
			for g0 := 0; g0 < k; g0 += ag {
				var amax float32
				for i := g0; i < min(g0+ag, k); i++ {
					amax = float32(math.Max(float64(amax), math.Abs(float64(x[t*k+i]))))
				}
				sc := 127 / float32(math.Max(float64(amax), float64(float32(1e-5))))
				for i := g0; i < min(g0+ag, k); i++ {
					xs[t*k+i] = sc
				}
			}
		}
	}
	for i := range x {
		xq[i] = int8(math.Max(-128, math.Min(127, math.RoundToEven(float64(x[i]*xs[i])))))
	}
	seg := k
	if s.Act.Kind == quantcfg.ActPerGroup {
		seg = s.Act.Group
	}
	if s.Scale.Kind == quantcfg.ScaleGroup && s.Scale.Group < seg {
		seg = s.Scale.Group
	}
	ws := func(r, i int) float32 {
		switch s.Scale.Kind {
		case quantcfg.ScaleRow:
			return tl.Scales[r]
		case quantcfg.ScaleGroup:
			return tl.Scales[r*((k+s.Scale.Group-1)/s.Scale.Group)+i/s.Scale.Group]
		}
		return tl.Scales[0]
	}
	for t := 0; t < n; t++ {
		for r := 0; r < m; r++ {
			var y float32
			for k0 := 0; k0 < k; k0 += seg {
				var acc int32
				for i := k0; i < min(k0+seg, k); i++ {
					acc += level(tl.W.Q[r*k+i]) * int32(xq[t*k+i])
				}
				p := float32(float32(acc)*ws(r, k0)) / xs[t*k+k0]
				if k0 == 0 {
					y = p
				} else {
					y += p
				}
			}
			if s.Bias {
				y += tl.Bias[r]
			}
			out[t*m+r] = y
		}
	}
	return out
}

func sameBits(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }

func checkExact(t *testing.T, what string, got, want []float32, m int) {
	t.Helper()
	for i := range want {
		if !sameBits(got[i], want[i]) {
			t.Fatalf("%s: token %d row %d: got %v (%#x), want %v (%#x)", what, i/m, i%m, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// specsFor lists the settings each format is tested with.
func specsFor(f quantcfg.Format) []quantcfg.LayerSpec {
	base := quantcfg.LayerSpec{Format: f}
	var out []quantcfg.LayerSpec
	fi, _ := f.Info()
	for _, sk := range fi.Scales {
		for _, ak := range fi.Acts {
			s := base
			s.Scale = quantcfg.ScaleGran{Kind: sk}
			s.Act = quantcfg.ActMode{Kind: ak}
			if sk == quantcfg.ScaleGroup {
				s.Scale.Group = 64
			}
			if ak == quantcfg.ActPerGroup {
				s.Act.Group = 32
				if f == quantcfg.I2S {
					s.Act.Group = 128
				}
			}
			out = append(out, s)
		}
	}
	if f == quantcfg.Int2 {
		s := base
		s.Codebook = quantcfg.Codebook{-3, -1, 1, 3}
		out = append(out, s)
		s.Codebook = quantcfg.Codebook{-128, 127, 0, 5}
		out = append(out, s)
	}
	return out
}

var allFormats = []quantcfg.Format{quantcfg.I2S, quantcfg.TL1, quantcfg.TL2, quantcfg.Int2, quantcfg.Int1, quantcfg.Int8, quantcfg.BF16, quantcfg.F32}

// TestReferenceMatchesNaive: the reference kernel (through the packed layouts) equals the
// arithmetic computed from logical weights, bit for bit, over ragged shapes, block edges,
// every setting of every format, with and without bias, N = 1, 2, 7, 64.
func TestReferenceMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ms := []int{1, 31, 33, 64}
	ks := []int{1, 3, 4, 31, 32, 33, 47, 48, 49, 95, 96, 97, 127, 128, 129, 200}
	for _, f := range allFormats {
		for si, spec := range specsFor(f) {
			for _, m := range ms {
				for _, k := range ks {
					spec := spec
					spec.Out, spec.In, spec.Bias = m, k, (m+k)%2 == 0
					tl := newTestLayer(t, rng, spec)
					for _, n := range []int{1, 2, 7} {
						x := randActs(rng, n, k)
						got, err := Reference(tl.Layer, x, n)
						if err != nil {
							t.Fatal(err)
						}
						checkExact(t, fmt.Sprintf("%s setting %d (%s, %s) %dx%d n=%d", f, si, tl.Spec.Scale, tl.Spec.Act, m, k, n), got, naive(tl, x, n), m)
					}
				}
			}
		}
	}
	// N = 64 on a mid-size layer per format
	for _, f := range allFormats {
		tl := newTestLayer(t, rng, quantcfg.LayerSpec{Format: f, Out: 96, In: 300, Bias: true})
		x := randActs(rng, 64, 300)
		got, err := Reference(tl.Layer, x, 64)
		if err != nil {
			t.Fatal(err)
		}
		checkExact(t, string(f)+" n=64", got, naive(tl, x, 64), 96)
	}
}

// TestReferenceNearFloatMath: the quantized result is close to the plain float product of
// the dequantized weights and activations (a sanity check of the formula's meaning).
func TestReferenceNearFloatMath(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, f := range allFormats {
		for _, spec := range specsFor(f) {
			spec.Out, spec.In = 40, 256
			tl := newTestLayer(t, rng, spec)
			n := 3
			x := randActs(rng, n, spec.In)
			got, _ := Reference(tl.Layer, x, n)
			var a Acts
			if err := tl.Quantize(x, n, &a); err != nil {
				t.Fatal(err)
			}
			for tok := 0; tok < n; tok++ {
				for r := 0; r < spec.Out; r++ {
					var want, mag float64
					for i := 0; i < spec.In; i++ {
						var w, xv float64
						if f.IsFloat() {
							w, xv = float64(tl.W.F[r*spec.In+i]), float64(x[tok*spec.In+i])
						} else {
							lv := float64(tl.W.Q[r*spec.In+i])
							if f == quantcfg.Int2 {
								lv = float64(tl.Spec.Codebook[tl.W.Q[r*spec.In+i]])
							}
							seg := 0
							if tl.SegLen > 0 {
								seg = i / tl.SegLen
							}
							w = lv * float64(tl.Scales[tl.WSIndex(r, seg)])
							xv = float64(a.Q[tok*a.Kp+i]) / float64(a.XS[a.XSIndex(tok, i)])
						}
						want += w * xv
						mag += math.Abs(w * xv)
					}
					if tl.Bias != nil {
						want += float64(tl.Bias[r])
					}
					if d := math.Abs(float64(got[tok*spec.Out+r]) - want); d > 1e-5*mag+1e-6 {
						t.Fatalf("%s %s/%s: token %d row %d: %v vs float64 %v", f, tl.Spec.Scale, tl.Spec.Act, tok, r, got[tok*spec.Out+r], want)
					}
				}
			}
		}
	}
}

func TestEdgeActivations(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, f := range allFormats {
		tl := newTestLayer(t, rng, quantcfg.LayerSpec{Format: f, Out: 33, In: 130})
		// all-zero activations give exact zeros (never NaN)
		got, err := Reference(tl.Layer, make([]float32, 2*130), 2)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range got {
			if v != 0 || math.IsNaN(float64(v)) {
				t.Fatalf("%s: zero input gives %v at %d", f, v, i)
			}
		}
		// largest magnitudes
		x := make([]float32, 130)
		for i := range x {
			x[i] = math.MaxFloat32 / 1e6 * float32(1-2*(i%2))
		}
		x[7] = -math.MaxFloat32 / 1e6
		got, err = Reference(tl.Layer, x, 1)
		if err != nil {
			t.Fatal(err)
		}
		checkExact(t, string(f)+" large", got, naive(tl, x, 1), 33)
		// NaN and Inf are refused with the position named
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
			x := randActs(rng, 3, 130)
			x[130+17] = bad
			_, err := Reference(tl.Layer, x, 3)
			if !errors.Is(err, ErrNonFinite) || !contains(err.Error(), "token 1, input 17") {
				t.Fatalf("%s: %v activation: error %v", f, bad, err)
			}
		}
		// wrong lengths
		if _, err := Reference(tl.Layer, make([]float32, 129), 1); !errors.Is(err, ErrShape) {
			t.Fatalf("%s: short activations: %v", f, err)
		}
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && (s[:len(sub)] == sub || contains(s[1:], sub)))
}

// TestLossless: for ternary formats, the output equals BitNet b1.58's recipe computed
// here independently: absmean ternarization of float weights, per-token absmax int8
// activations, y = (W_t . xq) * scale / s.
func TestLossless(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const m, k, n = 70, 2560 + 16, 3
	wf := make([]float32, m*k)
	for i := range wf {
		wf[i] = float32(rng.NormFloat64() * 0.02)
	}
	// the recipe, written out
	var sum float64
	for _, v := range wf {
		sum += math.Abs(float64(v))
	}
	scale := float32(sum / float64(len(wf)))
	wt := make([]int8, m*k)
	for i, v := range wf {
		wt[i] = int8(math.Max(-1, math.Min(1, math.RoundToEven(float64(v/scale)))))
	}
	x := randActs(rng, n, k)
	want := make([]float32, n*m)
	for tok := 0; tok < n; tok++ {
		var amax float32
		for _, v := range x[tok*k : (tok+1)*k] {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		s := 127 / max(amax, float32(1e-5))
		for r := 0; r < m; r++ {
			var dot int32
			for i := 0; i < k; i++ {
				xq := int32(math.Max(-128, math.Min(127, math.RoundToEven(float64(x[tok*k+i]*s)))))
				dot += int32(wt[r*k+i]) * xq
			}
			want[tok*m+r] = float32(float32(dot)*scale) / s
		}
	}
	q, s, err := Ternarize(wf)
	if err != nil || s != scale {
		t.Fatalf("Ternarize scale %v, want %v (%v)", s, scale, err)
	}
	for _, f := range []quantcfg.Format{quantcfg.I2S, quantcfg.TL1, quantcfg.TL2} {
		l := packLayer(t, quantcfg.LayerSpec{Name: "lossless", Format: f, Out: m, In: k}, Weights{Q: q}, []float32{s}, nil)
		got, err := Reference(l, x, n)
		if err != nil {
			t.Fatal(err)
		}
		checkExact(t, string(f)+" lossless", got, want, m)
	}
}

func TestPackUnpackRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, f := range allFormats {
		for _, m := range []int{1, 5, 32, 33, 70} {
			for _, k := range []int{1, 2, 3, 5, 47, 48, 49, 64, 100, 129, 300} {
				w := randWeights(rng, f, m, k)
				checkRoundTrip(t, f, m, k, w)
			}
		}
	}
}

func checkRoundTrip(t *testing.T, f quantcfg.Format, m, k int, w Weights) {
	t.Helper()
	blob, err := PackNew(f, m, k, w)
	if err != nil {
		t.Fatalf("%s %dx%d: %v", f, m, k, err)
	}
	l, _ := NewLayout(f, m, k)
	if err := CheckBlob(l, blob); err != nil {
		t.Fatalf("%s %dx%d: packed blob fails CheckBlob: %v", f, m, k, err)
	}
	got, err := Unpack(f, m, k, blob)
	if err != nil {
		t.Fatalf("%s %dx%d: %v", f, m, k, err)
	}
	for i := range w.Q {
		if got.Q[i] != w.Q[i] {
			t.Fatalf("%s %dx%d: weight %d: %d != %d", f, m, k, i, got.Q[i], w.Q[i])
		}
	}
	for i := range w.F {
		if !sameBits(got.F[i], w.F[i]) {
			t.Fatalf("%s %dx%d: weight %d: %v != %v", f, m, k, i, got.F[i], w.F[i])
		}
	}
}

func FuzzPackUnpack(f *testing.F) {
	f.Add(uint8(0), uint16(5), uint16(49), uint64(1))
	f.Add(uint8(2), uint16(33), uint16(97), uint64(2))
	f.Fuzz(func(t *testing.T, fi uint8, m, k uint16, seed uint64) {
		format := allFormats[int(fi)%len(allFormats)]
		mm, kk := int(m%200)+1, int(k%400)+1
		w := randWeights(rand.New(rand.NewPCG(seed, 0)), format, mm, kk)
		checkRoundTrip(t, format, mm, kk, w)
	})
}

// FuzzUnpackArbitrary: any byte string of the right length either unpacks or is refused
// with ErrWeights; packing what it unpacks to gives the same bytes back (the layouts
// have no hidden bits) except where padding is involved.
func FuzzUnpackArbitrary(f *testing.F) {
	f.Add(uint8(0), []byte{0xff, 0x00, 0x12})
	f.Fuzz(func(t *testing.T, fi uint8, seed []byte) {
		format := allFormats[int(fi)%len(allFormats)]
		m, k := 32, 96 // no padding in any format
		if format == quantcfg.I2S {
			k = 128
		}
		l, _ := NewLayout(format, m, k)
		blob := make([]byte, l.Bytes())
		for i := range blob {
			if len(seed) > 0 {
				blob[i] = seed[i%len(seed)] ^ byte(i*131)
			}
		}
		w, err := Unpack(format, m, k, blob)
		if err != nil {
			if !errors.Is(err, ErrWeights) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if format.IsFloat() {
			return // NaN payloads and bf16 rounding are not canonical
		}
		back, err := PackNew(format, m, k, w)
		if err != nil {
			t.Fatal(err)
		}
		if format == quantcfg.TL2 {
			return // a sign bit on index 0 (negative zero triple) is not canonical
		}
		for i := range blob {
			if back[i] != blob[i] {
				t.Fatalf("%s: byte %d: repacked %#x, original %#x", format, i, back[i], blob[i])
			}
		}
	})
}

func TestBadWeightsNamed(t *testing.T) {
	for _, c := range []struct {
		f    quantcfg.Format
		q    []int8
		want string
	}{
		{quantcfg.I2S, []int8{0, 1, 2, 0}, "row 0, input 2 is 2"},
		{quantcfg.Int2, []int8{0, 4, 2, 0}, "row 0, input 1 is 4"},
		{quantcfg.Int1, []int8{1, -1, 0, 1}, "row 0, input 2 is 0"},
	} {
		_, err := PackNew(c.f, 2, 2, Weights{Q: c.q})
		if !errors.Is(err, ErrWeights) || !contains(err.Error(), "row 1, input 0") && !contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrWeights naming %q", c.f, err, c.want)
		}
	}
	if _, err := PackNew(quantcfg.I2S, 2, 2, Weights{Q: []int8{0}}); !errors.Is(err, ErrShape) {
		t.Errorf("short weights: %v", err)
	}
	l, _ := NewLayout(quantcfg.I2S, 32, 128)
	if err := CheckBlob(l, make([]byte, l.Bytes())); err != nil {
		t.Errorf("all-zero i2s blob (weights -1) refused: %v", err)
	}
	bad := make([]byte, l.Bytes())
	bad[100] = 0xff
	if err := CheckBlob(l, bad); !errors.Is(err, ErrWeights) {
		t.Errorf("i2s code 3 accepted: %v", err)
	}
}

// TestRealShapes: every real model dimension packs and runs (small partner dimension to
// keep it quick), including a 128256-row vocabulary.
func TestRealShapes(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	dims := []int{1600, 2048, 2560, 4096, 6912, 8192, 14336}
	for _, f := range allFormats {
		for _, d := range dims {
			for _, sh := range [][2]int{{d, 64}, {32, d}} {
				tl := newTestLayer(t, rng, quantcfg.LayerSpec{Format: f, Out: sh[0], In: sh[1]})
				x := randActs(rng, 1, sh[1])
				got, err := Reference(tl.Layer, x, 1)
				if err != nil {
					t.Fatal(err)
				}
				checkExact(t, fmt.Sprintf("%s %dx%d", f, sh[0], sh[1]), got, naive(tl, x, 1), sh[0])
			}
		}
	}
	tl := newTestLayer(t, rng, quantcfg.LayerSpec{Format: quantcfg.I2S, Out: 128256, In: 128})
	if tl.Layout.Mp != 128256 {
		t.Fatalf("vocabulary Mp = %d", tl.Layout.Mp)
	}
	x := randActs(rng, 1, 128)
	got, _ := Reference(tl.Layer, x, 1)
	checkExact(t, "vocab", got, naive(tl, x, 1), 128256)
}

func TestBF16(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want uint16
	}{
		{1, 0x3f80},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie -> even
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie -> even (up)
		{math.Float32frombits(0x3f808001), 0x3f81},
		{float32(math.Inf(1)), 0x7f80},
		{math.MaxFloat32, 0x7f80}, // rounds up to infinity
		{float32(math.NaN()), 0x7fc0},
	} {
		if got := BF16(c.in); got != c.want {
			t.Errorf("BF16(%v) = %#x, want %#x", c.in, got, c.want)
		}
	}
}

// packRandom packs random logical weights of format f (M x K) and returns them, the blob and
// its layout.
func packRandom(t *testing.T, f quantcfg.Format, m, k int, seed uint64) (Weights, []byte, Layout) {
	t.Helper()
	w := RandomWeights(rand.New(rand.NewPCG(seed, uint64(k))), f, m, k, 1)
	blob, err := PackNew(f, m, k, w)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLayout(f, m, k)
	if err != nil {
		t.Fatal(err)
	}
	return w, blob, l
}

// ownStream is row block rb's stream of the logical weights w (M x K), encoded on its own.
func ownStream(l Layout, w []int8, rb int, encode func(Layout, []int8, []byte)) []byte {
	rows := make([]int8, RowBlock*l.Kp)
	for r := 0; r < RowBlock && rb*RowBlock+r < l.M; r++ {
		copy(rows[r*l.Kp:], w[(rb*RowBlock+r)*l.K:][:l.K])
	}
	stream := make([]byte, l.RowBlockBytes)
	encode(l, rows, stream)
	return stream
}

// TestTL2PanelMajor: a tl2 blob of K >= 1008 and M > 3808 stores panels of 32 row blocks
// one after another, each block after block with its row blocks' 320 bytes of the block
// side by side, then their tl1 tails side by side (the offsets of tl2.go's picture,
// computed here independently of Layout); one of K >= 1008 and M in (2016, 3808] stores
// two panels the same way, of ceil(row blocks/2) and the rest; kernels/5 laid out its
// panel-major shapes (K >= 4080, M > 4064) in panels of 16 the same way (tl2Before, which
// Relayout reads them by). 130 row blocks: four panels of 32 and one of 2 (eight of 16 and
// one of 2). K = 48*88 + 7: 88 blocks and a 7-input tail; K = 48*85 without a tail. 75 row
// blocks: panels of 38 and 37; K = 48*53 + 1: 53 blocks, a 1-input tail. One row block or
// one block fewer than the rule's is chunk-major; kernels/7 laid out every shape of K <
// 2544 chunk-major, and kernels/6 every shape of fewer than 120 row blocks too.
func TestTL2PanelMajor(t *testing.T) {
	for _, c := range []struct{ m, k, nb, kp1, g, panels int }{
		{130*32 - 5, 48*88 + 7, 88, 8, 32, 5}, {130*32 - 5, 48 * 85, 85, 0, 32, 5}, {75*32 - 3, 48*53 + 1, 53, 4, 38, 2},
	} {
		w, blob, l := packRandom(t, quantcfg.TL2, c.m, c.k, 5)
		mrb, s := l.RowBlocks(), 320*c.nb+8*c.kp1
		if mrb != (c.m+31)/32 || l.K3 != 48*c.nb || l.Kp1 != c.kp1 || len(blob) != mrb*s || !l.Paneled() || l.Chunked() || l.PanelRows() != c.g || l.Panels() != c.panels {
			t.Fatalf("layout %+v, %d bytes", l, len(blob))
		}
		type laid struct {
			l    Layout
			blob []byte
			g    int
		}
		lays := []laid{{l, blob, c.g}}
		if c.g == 32 {
			l5, ok := tl2Before("kernels/5", l)
			if !ok || !l5.Paneled() || l5.PanelRows() != 16 || l5.Panels() != 9 {
				t.Fatalf("kernels/5 layout %+v (%v)", l5, ok)
			}
			blob5 := make([]byte, len(blob))
			for rb := range mrb {
				l5.SetRowBlockData(blob5, rb, ownStream(l, w.Q, rb, tl2Encode))
			}
			lays = append(lays, laid{l5, blob5, 16})
		}
		for _, lay := range lays {
			for rb := 0; rb < mrb; rb++ {
				stream := ownStream(l, w.Q, rb, tl2Encode)
				p, i := rb/lay.g, rb%lay.g
				g := min(lay.g, mrb-lay.g*p)
				base := lay.g * p * s
				for b := 0; b < c.nb; b++ {
					off := base + 320*(b*g+i)
					if !bytes.Equal(lay.blob[off:off+320], stream[320*b:320*b+320]) {
						t.Fatalf("%dx%d, panels of %d: row block %d's block %d is not at %d", c.m, c.k, lay.g, rb, b, off)
					}
				}
				off := base + 320*c.nb*g + 8*c.kp1*i
				if !bytes.Equal(lay.blob[off:off+8*c.kp1], stream[320*c.nb:]) {
					t.Fatalf("%dx%d, panels of %d: row block %d's tail is not at %d", c.m, c.k, lay.g, rb, off)
				}
				if got := lay.l.RowBlockData(lay.blob, rb, nil); !bytes.Equal(got, stream) {
					t.Fatalf("%dx%d, panels of %d: RowBlockData(%d) differs from the stream", c.m, c.k, lay.g, rb)
				}
			}
		}
	}
	for _, c := range [][2]int{
		{3808, 2544}, {3809, 2543}, {3809, 2544}, {2016, 2544}, {2017, 2544}, {2017, 2543}, {640, 2560}, {2560, 2560}, {2560, 2543},
		{3809, 1007}, {3809, 1008}, {2017, 1007}, {2017, 1008}, {16384, 2048}, {2048, 2048}, {4096, 1024}, {2500, 1200},
		{3840, 2560}, {14336, 4096}, {4096, 14336}, {2560, 6912}, {6912, 2560}, {2048, 8192}, {3000, 3000},
	} {
		l, err := NewLayout(quantcfg.TL2, c[0], c[1])
		if err != nil {
			t.Fatal(err)
		}
		// the panels this revision (K >= 1008) and kernels/7 (K >= 2544) lay the shape out in
		g, panels := twoPanelRule(c[0], c[1], 1008)
		if want := g > 0; l.Paneled() != want || l.Chunked() == want || l.PanelRows() != g || l.Panels() != panels {
			t.Errorf("%dx%d: panel-major %v (%d panels of %d), chunk-major %v; want %d panels of %d", c[0], c[1], l.Paneled(), l.Panels(), l.PanelRows(), l.Chunked(), panels, g)
		}
		l7, _ := tl2Before("kernels/7", l)
		g7, panels7 := twoPanelRule(c[0], c[1], 2544)
		if want := g7 > 0; l7.Paneled() != want || l7.Chunked() == want || l7.PanelRows() != g7 || l7.Panels() != panels7 || !want && l7.Chunks() != max(1, (c[1]/48+9)/10) {
			t.Errorf("%dx%d in kernels/7: panel-major %v (%d panels of %d), chunk-major %v (%d chunks); want %d panels of %d", c[0], c[1], l7.Paneled(), l7.Panels(), l7.PanelRows(), l7.Chunked(), l7.Chunks(), panels7, g7)
		}
		l6, _ := tl2Before("kernels/6", l)
		if want := c[0] > 3808 && c[1] >= 2544; l6.Paneled() != want || l6.Chunked() == want || want != (l6.PanelRows() == 32) || !want && l6.Chunks() != max(1, (c[1]/48+9)/10) {
			t.Errorf("%dx%d in kernels/6: panel-major %v, chunk-major %v (%d chunks); want panel-major %v", c[0], c[1], l6.Paneled(), l6.Chunked(), l6.Chunks(), want)
		}
		l5, _ := tl2Before("kernels/5", l)
		if want := c[0] > 4064 && c[1] >= 4080; l5.Paneled() != want || l5.Chunked() == want || want != (l5.PanelRows() == 16) || !want && l5.Chunks() != max(1, (c[1]/48+9)/10) {
			t.Errorf("%dx%d in kernels/5: panel-major %v, chunk-major %v (%d chunks); want panel-major %v", c[0], c[1], l5.Paneled(), l5.Chunked(), l5.Chunks(), want)
		}
	}
}

// twoPanelRule is the rule of layouts kernels/7 and kernels/8 (of K >= minK), stated here
// independently of Layout: an m x k tl2 blob of at least 64 row blocks and minK inputs is
// panel-major, in two panels of ceil(row blocks/2) and the rest below 120 row blocks and in
// panels of 32 from 120 on; g is the row blocks a panel (0: chunk-major).
func twoPanelRule(m, k, minK int) (g, panels int) {
	switch mrb := (m + 31) / 32; {
	case k < minK || mrb < 64:
		return 0, 0
	case mrb < 120:
		return (mrb + 1) / 2, 2
	default:
		return 32, (mrb + 31) / 32
	}
}

// TestTL2ChunkMajor: a tl2 blob stores its chunks (at most 10 blocks, spread evenly) one
// after another, each with every row block's piece side by side, the last piece ending with
// the tl1 tail (the offsets of tl2.go's picture, computed here independently of Layout).
// K = 48*27 + 7: three chunks of 9 blocks and a 7-input tail; K = 48*25: 8, 8 and 9 blocks
// without a tail; K = 48*11 + 3: 5 and 6 blocks and a 3-input tail; K = 47: one chunk of
// the tail alone.
func TestTL2ChunkMajor(t *testing.T) {
	for _, c := range []struct{ k, nb, kp1 int }{{48*27 + 7, 27, 8}, {48 * 25, 25, 0}, {48*11 + 3, 11, 4}, {47, 0, 48}} {
		const m = 70
		w, blob, l := packRandom(t, quantcfg.TL2, m, c.k, 5)
		mrb := l.RowBlocks()
		if mrb != 3 || l.K3 != 48*c.nb || l.Kp1 != c.kp1 {
			t.Fatalf("layout %+v", l)
		}
		nc := max(1, (c.nb+9)/10)
		for rb := 0; rb < mrb; rb++ {
			stream := ownStream(l, w.Q, rb, tl2Encode)
			for ch := 0; ch < nc; ch++ {
				b0, b1 := ch*c.nb/nc, (ch+1)*c.nb/nc
				if b1-b0 > 10 {
					t.Fatalf("K %d: chunk %d has %d blocks", c.k, ch, b1-b0)
				}
				piece := 320 * (b1 - b0)
				if ch == nc-1 {
					piece += 8 * c.kp1
				}
				off := mrb*320*b0 + rb*piece
				if !bytes.Equal(blob[off:off+piece], stream[320*b0:320*b0+piece]) {
					t.Fatalf("K %d: row block %d's piece of chunk %d is not at %d", c.k, rb, ch, off)
				}
			}
			if got := l.RowBlockData(blob, rb, nil); !bytes.Equal(got, stream) {
				t.Fatalf("K %d: RowBlockData(%d) differs from the stream", c.k, rb)
			}
		}
	}
}

// TestTL1ChunkMajor checks the tl1 blob's chunk-major order against tl1.go's description,
// computed here independently of Layout: each row block's stream, encoded on its own, must
// be found piece by piece at Mrb*32*u0 + rb*32*uc, and one weight is read back by hand.
func TestTL1ChunkMajor(t *testing.T) {
	for _, c := range []struct{ k, nc int }{{2054, 3}, {1024, 1}, {4096, 4}, {3, 1}, {1025, 2}} {
		const m = 70
		w, blob, l := packRandom(t, quantcfg.TL1, m, c.k, 6)
		mrb, nu := l.RowBlocks(), (c.k+3)/4
		if mrb != 3 || l.Chunks() != c.nc || len(blob) != mrb*32*nu {
			t.Fatalf("K %d: layout %+v, %d chunks, %d bytes", c.k, l, l.Chunks(), len(blob))
		}
		for rb := 0; rb < mrb; rb++ {
			stream := ownStream(l, w.Q, rb, tl1Encode)
			for ch := 0; ch < c.nc; ch++ {
				u0, u1 := ch*nu/c.nc, (ch+1)*nu/c.nc
				if u1-u0 > 256 {
					t.Fatalf("K %d: chunk %d has %d units", c.k, ch, u1-u0)
				}
				piece := 32 * (u1 - u0)
				off := mrb*32*u0 + rb*piece
				if !bytes.Equal(blob[off:off+piece], stream[32*u0:32*u0+piece]) {
					t.Fatalf("K %d: row block %d's piece of chunk %d is not at %d", c.k, rb, ch, off)
				}
			}
			if got := l.RowBlockData(blob, rb, nil); !bytes.Equal(got, stream) {
				t.Fatalf("K %d: RowBlockData(%d) differs from the stream", c.k, rb)
			}
		}
		// the last input pair of row m-1, by hand: row block 2, row 5, the last unit
		u := nu - 1
		u0 := (c.nc - 1) * nu / c.nc
		b := blob[mrb*32*u0+2*32*(nu-u0)+32*(u-u0)+(m-1)%32]
		h := (c.k - 1) % 4 / 2 // which pair of the unit holds input K-1
		idx := int(b>>(4*h)) & 15
		k0 := 4*u + 2*h
		if w0, w1 := int8(idx/3-1), int8(idx%3-1); w0 != w.Q[(m-1)*c.k+k0] || (k0+1 < c.k && w1 != w.Q[(m-1)*c.k+k0+1]) {
			t.Fatalf("K %d: row %d inputs %d-%d read back as %d, %d", c.k, m-1, k0, k0+1, w0, w1)
		}
	}
}
