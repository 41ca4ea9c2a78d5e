package xe2

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"bitgo/kernels"
	"bitgo/quantcfg"
)

// layerCase is a layer configuration the exactness tests run every tile on.
type layerCase struct {
	name string
	spec quantcfg.LayerSpec
}

func layerCases() []layerCase {
	cb31 := quantcfg.Codebook{-3, -1, 1, 3} // affine with an offset: DPAS + sum(x) correction
	cbNA := quantcfg.Codebook{-4, -1, 0, 2} // not affine: always the conversion path
	mk := func(name string, m, k int, act quantcfg.ActMode, sc quantcfg.ScaleGran, cb quantcfg.Codebook, bias bool) layerCase {
		return layerCase{name, quantcfg.LayerSpec{Name: name, Format: quantcfg.Int2, Out: m, In: k, Act: act, Scale: sc, Codebook: cb, Bias: bias}}
	}
	return []layerCase{
		// ragged M (not a multiple of 16 or of any work-group's rows), K not a multiple of 32
		mk("token-row", 37, 100, quantcfg.PerToken, quantcfg.PerRowScale, quantcfg.Codebook{}, true),
		// several segments: per-group scales, K with a short last group
		mk("token-group64", 83, 288, quantcfg.PerToken, quantcfg.GroupScale(64), cb31, false),
		// activation groups finer than the scale groups, non-affine code book
		mk("actgroup32-group96", 50, 200, quantcfg.PerGroup(32), quantcfg.GroupScale(96), cbNA, true),
		// activation groups coarser than the scale groups
		mk("actgroup128-group32", 16, 300, quantcfg.PerGroup(128), quantcfg.GroupScale(32), quantcfg.Codebook{}, false),
		// per-tensor activations and scale
		mk("tensor-tensor", 70, 64, quantcfg.PerTensor, quantcfg.PerTensorScale, cb31, true),
		// a single K step
		mk("k1", 19, 1, quantcfg.PerToken, quantcfg.PerRowScale, quantcfg.Codebook{}, false),
	}
}

type builtLayer struct {
	lc     layerCase
	l      *Layer
	codes  []int8
	scales []float32
	bias   []float32
}

func registerCases(t *testing.T, d *Device, rng *rand.Rand) []builtLayer {
	t.Helper()
	var out []builtLayer
	for _, lc := range layerCases() {
		codes, scales, bias := RandomLayer(rng, lc.spec)
		l, err := d.Register(lc.spec, codes, scales, bias)
		if err != nil {
			t.Fatalf("%s: %v", lc.name, err)
		}
		t.Cleanup(func() { l.Free() })
		out = append(out, builtLayer{lc, l, codes, scales, bias})
	}
	return out
}

// checkTile runs tile on every layer case with n tokens in f32 and bf16 and compares
// with the reference bit for bit.
func checkTile(t *testing.T, layers []builtLayer, tile Tile, n int, rng *rand.Rand) {
	t.Helper()
	for _, bl := range layers {
		spec := bl.lc.spec
		x := RandomActs(rng, n, spec.In)
		for _, dt := range []quantcfg.DType{quantcfg.DTypeF32, quantcfg.DTypeBF16} {
			xin := x
			var xb []byte
			if dt == quantcfg.DTypeBF16 {
				xin = make([]float32, len(x))
				xb = make([]byte, 2*len(x))
				for i, v := range x {
					h := kernels.BF16(v)
					xin[i] = math.Float32frombits(uint32(h) << 16)
					binary.LittleEndian.PutUint16(xb[2*i:], h)
				}
			} else {
				xb = f32bytes(x)
			}
			want, err := Reference(spec, bl.codes, bl.scales, bl.bias, xin, n)
			if err != nil {
				t.Fatal(err)
			}
			out := make([]byte, n*spec.Out*dt.Size())
			if _, err := bl.l.ForwardTile(tile, dt, xb, n, out, false); err != nil {
				t.Fatalf("%s %s n=%d %s: %v", bl.lc.name, tile, n, dt, err)
			}
			for i := range want {
				var got, exp uint32
				if dt == quantcfg.DTypeF32 {
					got, exp = binary.LittleEndian.Uint32(out[4*i:]), math.Float32bits(want[i])
				} else {
					got, exp = uint32(binary.LittleEndian.Uint16(out[2*i:])), uint32(kernels.BF16(want[i]))
				}
				if got != exp {
					t.Fatalf("%s (dpas=%v) tile %s n=%d %s: output token %d row %d: got %#x, reference %#x (%g)",
						bl.lc.name, bl.l.DPAS(), tile, n, dt, i/spec.Out, i%spec.Out, got, exp, want[i])
				}
			}
		}
	}
}

// exactTiles covers every kernel variant: decode with each DPAS height, row blocks per
// sub-group and sub-groups per work-group, split-K factors that divide K's steps or
// segments and ones that do not, fused and separate activation passes, and prefill with
// one and several token tiles per sub-group.
var exactTiles = []struct {
	tile Tile
	ns   []int
}{
	{Tile{TN: 1, SGN: 1, SGM: 1, WGS: 1, Split: 1, Fused: true}, []int{1}},
	{Tile{TN: 1, SGN: 1, SGM: 2, WGS: 2, Split: 3, Fused: true}, []int{1}},
	{Tile{TN: 1, SGN: 1, SGM: 4, WGS: 1, Split: 2, Fused: false}, []int{1}},
	{Tile{TN: 4, SGN: 1, SGM: 1, WGS: 3, Split: 5, Fused: true}, []int{3}},
	{Tile{TN: 4, SGN: 1, SGM: 2, WGS: 1, Split: 1, Fused: false}, []int{3}},
	{Tile{TN: 8, SGN: 1, SGM: 2, WGS: 2, Split: 4, Fused: false}, []int{8}},
	{Tile{TN: 8, SGN: 1, SGM: 1, WGS: 1, Split: 1, Fused: true}, []int{8}},
	{Tile{Prefill: true, TN: 8, SGN: 1, SGM: 2, WGS: 2, Split: 1, Fused: false}, []int{64}},
	{Tile{Prefill: true, TN: 8, SGN: 2, SGM: 1, WGS: 1, Split: 3, Fused: true}, []int{64, 3}},
	{Tile{Prefill: true, TN: 2, SGN: 3, SGM: 1, WGS: 2, Split: 2, Fused: false}, []int{64}},
}

func TestKernelsExact(t *testing.T) {
	for _, variant := range []string{"", "nodpas"} {
		d := testDevice(t, variant)
		t.Run(fmt.Sprintf("path=%s", d.Info.Path), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, uint64(len(variant))))
			layers := registerCases(t, d, rng)
			for _, c := range exactTiles {
				for _, n := range c.ns {
					t.Run(fmt.Sprintf("%s/n%d", c.tile, n), func(t *testing.T) {
						checkTile(t, layers, c.tile, n, rng)
					})
				}
			}
		})
	}
}

// TestDefaultTilesExact runs Forward's own tile choice for n = 1, 3, 8, 64.
func TestDefaultTilesExact(t *testing.T) {
	d := testDevice(t, "")
	rng := rand.New(rand.NewPCG(5, 5))
	for _, bl := range registerCases(t, d, rng) {
		for _, n := range []int{1, 3, 8, 64} {
			x := RandomActs(rng, n, bl.lc.spec.In)
			want, err := Reference(bl.lc.spec, bl.codes, bl.scales, bl.bias, x, n)
			if err != nil {
				t.Fatal(err)
			}
			got, err := bl.l.ForwardF32(x, n)
			if err != nil {
				t.Fatalf("%s n=%d: %v", bl.lc.name, n, err)
			}
			if i := firstDiff(got, want); i >= 0 {
				t.Fatalf("%s n=%d (tile %s): output %d: got %g, reference %g", bl.lc.name, n, bl.l.defaultTile(n), i, got[i], want[i])
			}
		}
	}
}
