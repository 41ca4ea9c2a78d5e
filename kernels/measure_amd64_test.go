//go:build !noasm

package kernels

import (
	"math/rand/v2"
	"testing"
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
