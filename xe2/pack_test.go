package xe2

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"bitgo/quantcfg"
)

func TestPackVNNI16RoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, s := range [][2]int{{1, 1}, {16, 32}, {17, 33}, {37, 100}, {64, 512}, {5, 1000}} {
		m, k := s[0], s[1]
		codes := make([]int8, m*k)
		for i := range codes {
			codes[i] = int8(rng.IntN(4))
		}
		blob := make([]byte, VNNI16Bytes(m, k))
		if err := PackVNNI16(m, k, codes, blob); err != nil {
			t.Fatal(err)
		}
		back, err := UnpackVNNI16(m, k, blob)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(back, codes) {
			t.Fatalf("%dx%d: round trip differs", m, k)
		}
	}
}

// TestPackVNNI16Layout pins the layout with hand-placed weights.
func TestPackVNNI16Layout(t *testing.T) {
	m, k := 20, 70 // 2 row blocks, 3 steps
	codes := make([]int8, m*k)
	for i := range codes {
		codes[i] = 2 // field 0
	}
	codes[17*k+37] = 3 // row 17 = block 1 lane 1; input 37 = step 1, half 0, i = 5; field 1
	codes[3*k+69] = 0  // row 3 = block 0 lane 3; input 69 = step 2, half 0, i = 5; field 2
	codes[0*k+31] = 1  // row 0; input 31 = step 0, half 1, i = 15; field 3
	blob := make([]byte, VNNI16Bytes(m, k))
	if err := PackVNNI16(m, k, codes, blob); err != nil {
		t.Fatal(err)
	}
	if len(blob) != 2*3*128 {
		t.Fatalf("size %d, want %d", len(blob), 2*3*128)
	}
	word := func(blk, s, h, lane int) uint32 {
		return binary.LittleEndian.Uint32(blob[(((blk*3+s)*2+h)*16+lane)*4:])
	}
	for off := 0; off < len(blob); off += 4 {
		w := binary.LittleEndian.Uint32(blob[off:])
		switch off {
		case (((1*3+1)*2+0)*16 + 1) * 4:
			if w != 1<<10 || w != word(1, 1, 0, 1) {
				t.Errorf("row 17 input 37: word %#x, want %#x", w, 1<<10)
			}
		case (((0*3+2)*2+0)*16 + 3) * 4:
			if w != 2<<10 {
				t.Errorf("row 3 input 69: word %#x, want %#x", w, 2<<10)
			}
		case (((0*3+0)*2+1)*16 + 0) * 4:
			if w != 3<<30 {
				t.Errorf("row 0 input 31: word %#x, want %#x", w, uint32(3)<<30)
			}
		default:
			if w != 0 {
				t.Fatalf("word at byte %d is %#x, want 0", off, w)
			}
		}
	}
}

func TestPackVNNI16Errors(t *testing.T) {
	if err := PackVNNI16(2, 2, []int8{0, 1, 2, 4}, make([]byte, VNNI16Bytes(2, 2))); !errors.Is(err, ErrInvalid) {
		t.Errorf("code 4: %v, want ErrInvalid", err)
	}
	if err := PackVNNI16(2, 2, []int8{0, 1, 2}, make([]byte, VNNI16Bytes(2, 2))); !errors.Is(err, ErrShape) {
		t.Errorf("3 codes: %v, want ErrShape", err)
	}
	if err := PackVNNI16(2, 2, []int8{0, 1, 2, 3}, make([]byte, 10)); !errors.Is(err, ErrShape) {
		t.Errorf("short dst: %v, want ErrShape", err)
	}
	if _, err := TernaryCodes([]int8{1, 0, -2}); !errors.Is(err, ErrInvalid) {
		t.Errorf("ternary -2: %v, want ErrInvalid", err)
	}
}

func TestCodebook(t *testing.T) {
	for _, c := range []struct {
		cb     quantcfg.Codebook
		a, b   int
		affine bool
	}{
		{quantcfg.DefaultCodebook, 1, 0, true},
		{quantcfg.Codebook{-3, -1, 1, 3}, 2, 1, true},
		{quantcfg.Codebook{3, 1, -1, -3}, -2, -1, true},
		{quantcfg.Codebook{-4, -1, 0, 2}, 0, 0, false},
	} {
		a, b, ok := codebookAffine(c.cb)
		if ok != c.affine || (ok && (a != c.a || b != c.b)) {
			t.Errorf("%v: affine=%v a=%d b=%d, want %v %d %d", c.cb, ok, a, b, c.affine, c.a, c.b)
		}
		lut := codebookLUT(c.cb)
		for code := 0; code < 4; code++ {
			if got := int8(lut >> (8 * (code ^ 2))); got != c.cb[code] {
				t.Errorf("%v: lut[field of code %d] = %d, want %d", c.cb, code, got, c.cb[code])
			}
		}
	}
}

// TestReferenceByHand pins the reference arithmetic on a case small enough to compute on paper.
func TestReferenceByHand(t *testing.T) {
	spec := quantcfg.LayerSpec{Name: "hand", Format: quantcfg.Int2, Out: 1, In: 64,
		Act: quantcfg.PerToken, Scale: quantcfg.GroupScale(32), Bias: true}
	codes := make([]int8, 64)
	for i := range codes {
		codes[i] = 3 // level +1
	}
	codes[40] = 0 // level -2
	x := make([]float32, 64)
	x[0], x[40] = 127, -63.5 // xs = 1; -63.5 quantizes to -64 (ties to even)
	scales := []float32{0.5, 3}
	y, err := Reference(spec, codes, scales, []float32{0.25}, x, 1)
	if err != nil {
		t.Fatal(err)
	}
	// segment 0: 127*1 = 127 -> 127*0.5/1 = 63.5; segment 1: -64*-2 = 128 -> 128*3/1 = 384.
	if want := float32(63.5 + 384 + 0.25); y[0] != want {
		t.Fatalf("y = %v, want %v", y[0], want)
	}
}
