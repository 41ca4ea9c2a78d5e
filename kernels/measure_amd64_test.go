//go:build !noasm

package kernels

import (
	"math/rand/v2"
	"testing"

	"bitgo/quantcfg"
)

func TestMeasureLoops(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	buf := make([]byte, 4096+256)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	want := readBytesGeneric(buf)
	if got := ReadBytes(buf); got != want {
		t.Errorf("ReadBytes = %#x, want %#x", got, want)
	}
	if ISAAvailable(ISAAVX2) {
		if got := readBytesAVX2(&buf[0], len(buf)); got != want {
			t.Errorf("readBytesAVX2 = %#x, want %#x", got, want)
		}
	}
	if ISAAvailable(ISAAVX512) {
		if got, want := vnniPeakAVX512(10), vnniPeakGeneric(10); got != want {
			t.Errorf("vnniPeakAVX512(10) = %d, want %d", got, want)
		}
	}
}

func TestPrepareHelpers(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for _, kp := range []int{4, 48, 52, 96, 100, 2560, 14336 + 32} {
		x := make([]int8, kp)
		for i := range x {
			x[i] = int8(rng.IntN(255) - 127)
		}
		if kp%32 == 0 && sumInt8Fast != nil {
			if got, want := sumInt8AVX2(&x[0], kp), sumInt8Generic(x); got != want {
				t.Errorf("sumInt8AVX2(%d) = %d, want %d", kp, got, want)
			}
		}
		if got, want := sumInt8(x[:kp-1]), sumInt8Generic(x[:kp-1]); got != want {
			t.Errorf("sumInt8(%d) = %d, want %d", kp-1, got, want)
		}
		k := kp
		for _, kind := range []tabKind{tabTL1Z, tabTL1Y, tabTL2Z, tabTL2Y} {
			f := lutBuilders[kind]
			if f == nil {
				continue
			}
			format := quantcfg.TL1
			if kind >= tabTL2Z {
				format = quantcfg.TL2
			}
			ly, err := NewLayout(format, 32, k)
			if err != nil || ly.Kp > kp {
				continue
			}
			size := 16 * ly.Kp
			if kind == tabTL2Z {
				size = 64*(ly.K3/3) + 16*ly.Kp1
			} else if kind == tabTL2Y {
				size = 32*(ly.K3/3) + 16*ly.Kp1
			}
			want, got := make([]byte, size), make([]byte, size)
			buildLUT(kind, ly, x, want)
			buildLUTWith(f, kind, ly, x, got)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("table kind %d, K=%d: byte %d = %#x, want %#x", kind, k, i, got[i], want[i])
				}
			}
		}
	}
}

// vnniPeakGeneric is the reference of vnniPeakAVX512's result: 24 accumulators of 16
// dwords, each dword gaining 4*(3*-1) per iteration; the sum of dwords 0, 4, 8 and 12 of
// all accumulators.
func vnniPeakGeneric(n int) uint32 { return uint32(int32(-24 * 4 * 12 * n)) }
