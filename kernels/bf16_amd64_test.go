//go:build !noasm

package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// bf16Cases are float32 bit patterns where rounding to bfloat16 can go wrong: ties to even
// both ways, one below and above a tie, the carry into the exponent, the largest finite
// values (which round to infinity), denormals, zeros, infinities and NaNs with payloads in
// the top and in only the bottom half (which must stay NaN), of both signs.
var bf16Cases = []uint32{
	0x3f808000, 0x3f818000, 0x3f807fff, 0x3f808001, 0x3f7fffff, 0x3fff8000, 0x7f7fffff,
	0x7f7f7fff, 0x7f7f8000, 0x00000001, 0x00008000, 0x00018000, 0x007fffff, 0x00800000,
	0x00000000, 0x7f800000, 0x7fc00000, 0x7f800001, 0x7fbfffff, 0x7f810000, 0xffffffff,
}

// TestBF16Conversions: both assembly paths (zmm where the CPU has AVX-512, ymm where it has
// AVX2) widen and round every pattern as FromBF16 and BF16 do, bit for bit, over lengths
// with and without tails, at every offset in the 16-value step.
func TestBF16Conversions(t *testing.T) {
	var paths []ISA
	for _, p := range []ISA{ISAAVX512, ISAAVX2} {
		if bf16LoopsBy[p].dec != nil {
			paths = append(paths, p)
		}
	}
	if len(paths) == 0 {
		t.Skip("no AVX2")
	}
	rng := rand.New(rand.NewPCG(16, 16))
	var pats []uint32
	for _, c := range bf16Cases {
		pats = append(pats, c, c|0x80000000)
	}
	for range 4000 {
		pats = append(pats, rng.Uint32())
	}
	src := make([]float32, len(pats))
	for i, b := range pats {
		src[i] = math.Float32frombits(b)
	}
	for _, p := range paths {
		t.Run(p.String(), func(t *testing.T) {
			defer onlyHelperPath(t, p)()
			if bf16Asm() != &bf16LoopsBy[p] {
				t.Fatalf("%s on, yet the bf16 conversions run other loops", p)
			}
			for _, n := range []int{0, 1, 15, 16, 17, 33, 64, 100, len(src)} {
				for off := 0; off+n <= len(src) && off < 16; off += 5 {
					x := src[off : off+n]
					got := make([]byte, 2*n+2)
					got[2*n], got[2*n+1] = 0xAA, 0x55
					EncodeBF16(got, x)
					for i, v := range x {
						if h := binary.LittleEndian.Uint16(got[2*i:]); h != BF16(v) {
							t.Fatalf("%s: encode n=%d: %#08x -> %#04x, want %#04x", p, n, math.Float32bits(v), h, BF16(v))
						}
					}
					if got[2*n] != 0xAA || got[2*n+1] != 0x55 {
						t.Fatalf("%s: encode n=%d wrote past its end", p, n)
					}
					back := make([]float32, n+1)
					back[n] = 7
					DecodeBF16(back[:n], got)
					for i := range x {
						h := binary.LittleEndian.Uint16(got[2*i:])
						if w := FromBF16(h); math.Float32bits(back[i]) != math.Float32bits(w) {
							t.Fatalf("%s: decode n=%d: %#04x -> %#08x, want %#08x", p, n, h, math.Float32bits(back[i]), math.Float32bits(w))
						}
					}
					if back[n] != 7 {
						t.Fatalf("%s: decode n=%d wrote past its end", p, n)
					}
				}
			}
		})
	}
}
