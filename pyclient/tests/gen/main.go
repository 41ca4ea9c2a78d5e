// Command gen writes test vectors from Go's kernels package for the Python reference
// (pyclient/bitgo/reference.py): logical weights, packed blobs, scales, activations and
// reference outputs for every format, setting and a range of ragged shapes, plus the
// weight recipes (Ternarize, TernarizeRows, QuantizeWeights). pyclient/tests runs it with
// `go run ./pyclient/tests/gen -out DIR` and checks that Python reproduces every byte and bit.
//
// DIR receives manifest.json (the cases, each array as [offset, length, dtype] into data.bin)
// and data.bin (the arrays, little-endian).
package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"bitgo/kernels"
	"bitgo/quantcfg"
)

// array locates one array in data.bin: byte offset, element count, dtype name.
type array [3]any

type writer struct{ buf bytes.Buffer }

func (w *writer) add(dtype string, v any, n int) array {
	off := w.buf.Len()
	if err := binary.Write(&w.buf, binary.LittleEndian, v); err != nil {
		panic(err) // only fixed-size slices are written here
	}
	return array{off, n, dtype}
}

func (w *writer) f32(v []float32) array { return w.add("f32", v, len(v)) }
func (w *writer) i8(v []int8) array     { return w.add("i8", v, len(v)) }
func (w *writer) u8(v []byte) array     { return w.add("u8", v, len(v)) }
func (w *writer) u16(v []uint16) array  { return w.add("u16", v, len(v)) }

type linearCase struct {
	Kind     string           `json:"kind"` // "linear"
	Name     string           `json:"name"`
	Format   string           `json:"format"`
	Act      string           `json:"act"`
	Scale    string           `json:"scale"`
	Codebook []int            `json:"codebook,omitempty"`
	M        int              `json:"m"`
	K        int              `json:"k"`
	N        int              `json:"n"`
	Bias     bool             `json:"bias"`
	Arrays   map[string]array `json:"arrays"`
}

type recipeCase struct {
	Kind     string           `json:"kind"` // "recipe"
	Name     string           `json:"name"`
	Format   string           `json:"format"`
	Scale    string           `json:"scale"`
	Codebook []int            `json:"codebook,omitempty"`
	M        int              `json:"m"`
	K        int              `json:"k"`
	Arrays   map[string]array `json:"arrays"`
}

type setting struct {
	act, scale string
	cb         *quantcfg.Codebook
}

func settings(f quantcfg.Format) []setting {
	var acts, scales []string
	var cbs []*quantcfg.Codebook
	switch f {
	case quantcfg.I2S:
		acts, scales = []string{"per-token", "per-tensor", "per-group:128", "per-group:256"}, []string{"tensor", "row"}
	case quantcfg.TL1, quantcfg.TL2:
		acts, scales = []string{"per-token", "per-tensor"}, []string{"tensor", "row"}
	case quantcfg.Int2, quantcfg.Int1, quantcfg.Int8:
		acts = []string{"per-token", "per-tensor", "per-group:32", "per-group:64"}
		scales = []string{"row", "tensor", "group:32", "group:64", "group:128"}
	default:
		acts, scales = []string{"none"}, []string{"none"}
	}
	cbs = []*quantcfg.Codebook{nil}
	if f == quantcfg.Int2 {
		cbs = []*quantcfg.Codebook{nil, {-3, -1, 1, 3}, {1, -3, 3, -1}}
	}
	var out []setting
	for _, a := range acts {
		for _, s := range scales {
			for _, cb := range cbs {
				out = append(out, setting{a, s, cb})
			}
		}
	}
	return out
}

// shapes are ragged on purpose: M around the 32-row block, K around every format's padding
// unit (4, 32, 48, 128).
var shapes = [][2]int{
	{1, 1}, {3, 5}, {31, 47}, {33, 48}, {32, 96}, {40, 100}, {65, 129}, {7, 200},
	{70, 257}, {16, 300}, {2, 130}, {64, 64}, {5, 385}, {40, 700},
}

// chunkedShape is the first case of the chunk-major formats: K = 2054 is three tl1 chunks
// (171, 171 and 172 units) and four tl2 chunks (42 blocks) with a 38-input tail.
var chunkedShape = [2]int{35, 2054}

// panelShape is tl2's second case, a blob in panels of kernels.TL2Panel row blocks
// (kernels.TL2PanelMinBlocks blocks or more and kernels.TL2TwoPanelRowBlocks row blocks or
// more), of an M x K that layouts before kernels/6 laid out chunk-major: M = 3880 is 122 row
// blocks, three panels of 32 and one of 26; K = 2600 is 54 blocks and an 8-input tail.
var panelShape = [2]int{3880, 2600}

// twoPanelShape is tl2's third case, a blob of two panels (kernels.TL2PanelMinBlocks blocks
// or more, and kernels.TL2PanelMinRowBlocks row blocks or more but fewer than
// kernels.TL2TwoPanelRowBlocks), which layouts before kernels/7 laid out chunk-major: M =
// 2400 is 75 row blocks, panels of 38 and 37; K = 2600 is 54 blocks and an 8-input tail.
var twoPanelShape = [2]int{2400, 2600}

// shortPanelShape is tl2's fourth case (its second setting's first), a blob of two panels
// of a K of fewer than 53 blocks (but kernels.TL2PanelMinBlocks or more), which layouts
// before kernels/8 laid out chunk-major: M = 2400 is 75 row blocks, panels of 38 and 37;
// K = 1240 is 25 blocks and a 40-input tail.
var shortPanelShape = [2]int{2400, 1240}

// int1TwoPanelShape is int1's first case: an int1 blob is panel-major (kernels/9 on), in 2n
// panels of ceil(Mrb/(2n)) row blocks, n = ceil(Mrb/64), so in two up to 64 row blocks:
// M = 1100 is 35 row blocks, panels of 18 and 17; K = 300 is 10 blocks of 32 inputs, the
// last with 20 padding inputs.
var int1TwoPanelShape = [2]int{1100, 300}

// int1PanelShape is int1's second case, a blob of more than two panels (of at most
// kernels.Int1Panel row blocks) with a short last one: M = 3880 is 122 row blocks, n = 2,
// three panels of 31 and a short one of 29; K = 40 is 2 blocks, the last with 24 padding
// inputs (a small K keeps the case fast).
var int1PanelShape = [2]int{3880, 40}

var tokenCounts = []int{1, 3, 7, 2, 5}

// randLogical: random logical weights; float weights are not rounded to bfloat16 (the
// vectors check that Pack rounds them).
func randLogical(rng *rand.Rand, f quantcfg.Format, m, k int) kernels.Weights {
	if f.IsFloat() {
		f = quantcfg.F32
	}
	return kernels.RandomWeights(rng, f, m, k, 1)
}

// activations: random, plus edge tokens: all zeros (amax floored at 1e-5), exact ties for
// round-half-even (127 at the start of every 32 inputs makes xs = 1 per token and per group,
// the rest are k+0.5), and a token below the 1e-5 floor.
func activations(rng *rand.Rand, n, k int) []float32 {
	x := make([]float32, n*k)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 3)
	}
	for t := 1; t < n && t <= 3; t++ {
		row := x[t*k : (t+1)*k]
		for i := range row {
			switch t {
			case 1:
				row[i] = 0
			case 2:
				if i%32 == 0 {
					row[i] = 127
				} else {
					row[i] = float32(i%9-4) + 0.5
				}
			case 3:
				row[i] = float32(rng.NormFloat64() * 1e-6)
			}
		}
	}
	return x
}

func u16s(f []float32) []uint16 {
	out := make([]uint16, len(f))
	for i, v := range f {
		out[i] = kernels.BF16(v)
	}
	return out
}

func mustAct(s string) quantcfg.ActMode {
	a, err := quantcfg.ParseActMode(s)
	if err != nil {
		panic(err)
	}
	return a
}

func mustScale(s string) quantcfg.ScaleGran {
	g, err := quantcfg.ParseScaleGran(s)
	if err != nil {
		panic(err)
	}
	return g
}

func cbInts(cb *quantcfg.Codebook) []int {
	if cb == nil {
		return nil
	}
	return []int{int(cb[0]), int(cb[1]), int(cb[2]), int(cb[3])}
}

func linearCases(rng *rand.Rand, w *writer) ([]linearCase, error) {
	var out []linearCase
	si := 0
	for _, fi := range quantcfg.Formats() {
		f := fi.Format
		for sti, st := range settings(f) {
			for rep := 0; rep < 3; rep++ {
				sh := shapes[si%len(shapes)]
				if sti == 0 && rep == 0 && (f == quantcfg.TL1 || f == quantcfg.TL2) {
					sh = chunkedShape
				}
				if sti == 0 && rep == 1 && f == quantcfg.TL2 {
					sh = panelShape
				}
				if sti == 0 && rep == 2 && f == quantcfg.TL2 {
					sh = twoPanelShape
				}
				if sti == 1 && rep == 0 && f == quantcfg.TL2 {
					sh = shortPanelShape
				}
				if sti == 0 && rep == 0 && f == quantcfg.Int1 {
					sh = int1TwoPanelShape
				}
				if sti == 0 && rep == 1 && f == quantcfg.Int1 {
					sh = int1PanelShape
				}
				n := tokenCounts[si%len(tokenCounts)]
				bias := si%2 == 0
				si++
				m, k := sh[0], sh[1]
				spec := quantcfg.LayerSpec{
					Name: fmt.Sprintf("%s_%s_%s_%dx%d", f, st.act, st.scale, m, k), Format: f,
					Out: m, In: k, Act: mustAct(st.act), Scale: mustScale(st.scale), Bias: bias,
				}
				if st.cb != nil {
					spec.Codebook = *st.cb
				}
				spec = spec.WithDefaults()
				lw := randLogical(rng, f, m, k)
				blob, err := kernels.PackNew(f, m, k, lw)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", spec.Name, err)
				}
				scales := make([]float32, spec.NumScales())
				for i := range scales {
					scales[i] = float32(0.001 + rng.Float64())
				}
				var b []float32
				if bias {
					b = make([]float32, m)
					for i := range b {
						b[i] = float32(rng.NormFloat64())
					}
				}
				l, err := kernels.NewLayer(spec, blob, scales, b)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", spec.Name, err)
				}
				x := activations(rng, n, k)
				y, err := kernels.Reference(l, x, n)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", spec.Name, err)
				}
				xb := make([]float32, len(x))
				for i, v := range x {
					xb[i] = kernels.RoundBF16(v)
				}
				yb, err := kernels.Reference(l, xb, n)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", spec.Name, err)
				}
				arrays := map[string]array{
					"blob": w.u8(blob), "x": w.f32(x), "y": w.f32(y),
					"x_bf16": w.u16(u16s(xb)), "y_bf16": w.u16(u16s(yb)),
				}
				if f.IsFloat() {
					arrays["w"] = w.f32(lw.F)
				} else {
					arrays["w"] = w.i8(lw.Q)
					arrays["scales"] = w.f32(scales)
				}
				if bias {
					arrays["bias"] = w.f32(b)
				}
				out = append(out, linearCase{
					Kind: "linear", Name: spec.Name, Format: string(f), Act: spec.Act.String(),
					Scale: spec.Scale.String(), Codebook: cbInts(st.cb), M: m, K: k, N: n,
					Bias: bias, Arrays: arrays,
				})
			}
		}
	}
	return out, nil
}

// recipeWeights: a wide dynamic range (so a float64 sum's order matters), or a half-integer
// grid (so round-half-even and the int2 nearest-level ties are exercised).
func recipeWeights(rng *rand.Rand, m, k int, grid bool) []float32 {
	w := make([]float32, m*k)
	for i := range w {
		if grid {
			w[i] = float32(rng.IntN(9)-4) / 2
			continue
		}
		w[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(12)-8)))
	}
	return w
}

func recipeCases(rng *rand.Rand, w *writer) ([]recipeCase, error) {
	var out []recipeCase
	rshapes := [][2]int{{5, 70}, {33, 100}, {3, 1000}, {1, 1}, {40, 33}}
	i := 0
	for _, fi := range quantcfg.Formats() {
		f := fi.Format
		if f.IsFloat() {
			continue
		}
		var grans []string
		var cbs []*quantcfg.Codebook
		if f.IsTernary() {
			grans = []string{"tensor", "row"}
		} else {
			grans = []string{"tensor", "row", "group:32", "group:64"}
		}
		cbs = []*quantcfg.Codebook{nil}
		if f == quantcfg.Int2 {
			cbs = append(cbs, &quantcfg.Codebook{-3, -1, 1, 3}, &quantcfg.Codebook{1, -3, 3, -1})
		}
		for _, g := range grans {
			for _, cb := range cbs {
				for rep := 0; rep < 3; rep++ {
					sh := rshapes[i%len(rshapes)]
					grid := rep == 2
					i++
					m, k := sh[0], sh[1]
					wf := recipeWeights(rng, m, k, grid)
					var q []int8
					var s []float32
					var err error
					switch {
					case f.IsTernary() && g == "tensor":
						var s0 float32
						q, s0, err = kernels.Ternarize(wf)
						s = []float32{s0}
					case f.IsTernary():
						q, s, err = kernels.TernarizeRows(wf, m, k)
					default:
						c := quantcfg.DefaultCodebook
						if cb != nil {
							c = *cb
						}
						q, s, err = kernels.QuantizeWeights(f, wf, m, k, mustScale(g), c)
					}
					if err != nil {
						return nil, fmt.Errorf("recipe %s %s: %w", f, g, err)
					}
					out = append(out, recipeCase{
						Kind: "recipe", Name: fmt.Sprintf("%s_%s_%dx%d_grid=%v", f, g, m, k, grid),
						Format: string(f), Scale: g, Codebook: cbInts(cb), M: m, K: k,
						Arrays: map[string]array{"wf": w.f32(wf), "q": w.i8(q), "s": w.f32(s)},
					})
				}
			}
		}
	}
	return out, nil
}

func run(dir string, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 7))
	var w writer
	lin, err := linearCases(rng, &w)
	if err != nil {
		return err
	}
	rec, err := recipeCases(rng, &w)
	if err != nil {
		return err
	}
	cases := make([]any, 0, len(lin)+len(rec))
	for _, c := range lin {
		cases = append(cases, c)
	}
	for _, c := range rec {
		cases = append(cases, c)
	}
	man, err := json.Marshal(map[string]any{"seed": seed, "cases": cases})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "data.bin"), w.buf.Bytes(), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "manifest.json"), man, 0o644)
}

func main() {
	dir := flag.String("out", "", "directory to write manifest.json and data.bin into (must exist)")
	seed := flag.Uint64("seed", 1, "random seed")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "gen: -out DIR is required")
		os.Exit(2)
	}
	if err := run(*dir, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
