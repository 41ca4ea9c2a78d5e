package xe2

import (
	"math/rand/v2"
	"slices"
	"testing"

	"bitgo/quantcfg"
)

// FuzzForward: random shapes, modes, code books and activations through Forward's own
// tile choice, bit for bit against the reference.
func FuzzForward(f *testing.F) {
	f.Add(uint64(1), uint8(37), uint16(100), uint8(1), uint8(0))
	f.Add(uint64(2), uint8(16), uint16(32), uint8(3), uint8(5))
	f.Add(uint64(3), uint8(1), uint16(700), uint8(9), uint8(10))
	f.Add(uint64(4), uint8(200), uint16(65), uint8(8), uint8(7))
	f.Fuzz(func(t *testing.T, seed uint64, m8 uint8, k16 uint16, n8 uint8, mode uint8) {
		d := testDevice(t, "")
		m, k, n := int(m8)%96+1, int(k16)%512+1, int(n8)%24+1
		acts := []quantcfg.ActMode{quantcfg.PerToken, quantcfg.PerTensor, quantcfg.PerGroup(32), quantcfg.PerGroup(64)}
		scales := []quantcfg.ScaleGran{quantcfg.PerRowScale, quantcfg.PerTensorScale, quantcfg.GroupScale(32), quantcfg.GroupScale(128)}
		books := []quantcfg.Codebook{quantcfg.DefaultCodebook, {-3, -1, 1, 3}, {1, -7, 0, 9}}
		spec := quantcfg.LayerSpec{Name: "fuzz", Format: quantcfg.Int2, Out: m, In: k,
			Act: acts[mode%4], Scale: scales[(mode/4)%4], Codebook: books[(mode/16)%3], Bias: mode&64 != 0}
		if spec.WithDefaults().Validate() != nil {
			return
		}
		rng := rand.New(rand.NewPCG(seed, 99))
		codes, sc, bias := RandomLayer(rng, spec)
		l, err := d.Register(spec, codes, sc, bias)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Free()
		x := RandomActs(rng, n, k)
		want, err := Reference(spec, codes, sc, bias, x, n)
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.ForwardF32(x, n)
		if err != nil {
			t.Fatal(err)
		}
		if i := firstDiff(got, want); i >= 0 {
			t.Fatalf("%+v n=%d tile %s: output %d: got %g, want %g", spec, n, l.defaultTile(n), i, got[i], want[i])
		}
	})
}

// FuzzPackVNNI16: the layout round-trips for any shape.
func FuzzPackVNNI16(f *testing.F) {
	f.Add(uint64(1), uint8(17), uint16(33))
	f.Fuzz(func(t *testing.T, seed uint64, m8 uint8, k16 uint16) {
		m, k := int(m8)+1, int(k16)%2048+1
		rng := rand.New(rand.NewPCG(seed, 1))
		codes := make([]int8, m*k)
		for i := range codes {
			codes[i] = int8(rng.IntN(4))
		}
		blob := make([]byte, VNNI16Bytes(m, k))
		if err := PackVNNI16(m, k, codes, blob); err != nil {
			t.Fatal(err)
		}
		back, err := UnpackVNNI16(m, k, blob)
		if err != nil || !slices.Equal(back, codes) {
			t.Fatalf("%dx%d: round trip failed: %v", m, k, err)
		}
	})
}
