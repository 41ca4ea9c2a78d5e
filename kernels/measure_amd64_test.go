//go:build !noasm

package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"bitgo/quantcfg"
)

func TestMeasureLoops(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	buf := make([]byte, 4096+512)
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
		if got, want := readStreamsAVX2(&buf[0], 4096), readBytesGeneric(buf[:4096]); got != want {
			t.Errorf("readStreamsAVX2 = %#x, want %#x", got, want)
		}
	}
	loops := ReadLoops()
	var names []string
	for _, l := range loops {
		names = append(names, l.Name)
	}
	if want := []string{"prefetch", "streams"}; ISAAvailable(ISAAVX2) && !slices.Equal(names, want) {
		t.Errorf("ReadLoops are %q, want %q", names, want)
	}
	for _, l := range loops {
		for _, n := range []int{0, 255, 256, 1024, 3 * 1024, 4096 + 256, 4096 + 300} {
			if got, want := l.Read(buf[:n]), readBytesGeneric(buf[:n&^255]); got != want {
				t.Errorf("read loop %s of %d bytes = %#x, want %#x", l.Name, n, got, want)
			}
		}
	}
	if ISAAvailable(ISAAVX512) {
		if got, want := vnniPeakAVX512(10), vnniPeakGeneric(10); got != want {
			t.Errorf("vnniPeakAVX512(10) = %d, want %d", got, want)
		}
	}
	if ISAAvailable(ISAAVX2) {
		for _, n := range []int{10, 3000} { // 3000: the int16 sums wrap
			if got, want := int8PeakAVX2(n), int8PeakGeneric(n); got != want {
				t.Errorf("int8PeakAVX2(%d) = %#x, want %#x", n, got, want)
			}
		}
	}
}

func TestPrepareHelpers(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for _, kp := range []int{4, 48, 52, 96, 100, 2560, 14336 + 32} {
		x := make([]int8, kp)
		for i := range x {
			x[i] = int8(rng.IntN(256) - 128) // the whole range: the table builders take -128 too
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
		for _, kind := range []tabKind{tabTL1Z, tabTL1Y, tabTL1M, tabTL2Z, tabTL2Y, tabTL2B} {
			f := lutBuilders[kind]
			if f == nil {
				continue
			}
			tl2 := isTL2Tab(kind)
			format := quantcfg.TL1
			if tl2 {
				format = quantcfg.TL2
			}
			ly, err := NewLayout(format, 32, k)
			if err != nil || ly.Kp > kp {
				continue
			}
			size := lutTabBytes(kind, ly.Kp/4)
			if tl2 {
				size = tripleBytes(kind)*(ly.K3/3) + 16*ly.Kp1
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

// int8PeakGeneric is the reference of int8PeakAVX2's result: the low dword of the sum of 8
// accumulators of 16 int16 lanes, each lane adding 3 x -1 + 3 x -1 per iteration (wrapping);
// the dword holds lanes 0 and 1, equal.
func int8PeakGeneric(n int) uint32 {
	lane := uint16(int16(-6 * 8 * n))
	return uint32(lane) | uint32(lane)<<16
}

// TestActHelpers: the assembly quantizer loops equal act.go's scalar ones, bit for bit,
// including ties, large values, signed zeros and lengths with tails: every set of loops
// this CPU can run (AVX-512, AVX2), each chosen as the kill switches choose it; with both
// paths switched off the scalar loops run.
func TestActHelpers(t *testing.T) {
	if cpu.avx2 && actLoopsBy[ISAAVX2].absBits == nil {
		t.Error("the build took no AVX2 quantizer loops on a CPU with AVX2")
	}
	ran := false
	for _, p := range []ISA{ISAAVX512, ISAAVX2} {
		if actLoopsBy[p].absBits == nil {
			continue
		}
		ran = true
		t.Run(p.String(), func(t *testing.T) {
			defer onlyHelperPath(t, p)()
			if actAsm() != &actLoopsBy[p] {
				t.Fatalf("%s on, yet the quantizer runs other loops", p)
			}
			testActHelpers(t)
		})
	}
	if !ran {
		t.Skip("no AVX2")
	}
	defer disable(ISAAVX512)()
	defer disable(ISAAVX2)()
	if actAsm() != nil || bf16Asm() != nil {
		t.Error("AVX-512 and AVX2 switched off, yet the quantizer or the bf16 conversions run assembly")
	}
	if quantizeFast(make([]float32, 32), 1, make([]int8, 32)) {
		t.Error("AVX-512 and AVX2 switched off, yet quantizeFast ran assembly")
	}
}

// onlyHelperPath switches the paths before p off (disable), so that the helpers of p run
// (helperPath), and returns what switches them back. It skips the test where a kill switch
// or BITD_PUREGO keeps p off.
func onlyHelperPath(t *testing.T, p ISA) (restore func()) {
	t.Helper()
	if purego.Load() || disabled[p].Load() {
		t.Skipf("%s switched off", p)
	}
	var rs []func()
	for q := ISA(0); q < p; q++ {
		rs = append(rs, disable(q))
	}
	restore = func() {
		for _, r := range rs {
			r()
		}
	}
	if got := helperPath(); got != p {
		restore()
		t.Fatalf("helper path %s, want %s", got, p)
	}
	return restore
}

func testActHelpers(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	for _, n := range []int{16, 17, 31, 48, 100, 2560, 14336 + 5} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * 3)
			switch i % 7 {
			case 1:
				x[i] = float32(int(x[i])) + 0.5 // ties
			case 2:
				x[i] = float32(math.Copysign(0, -1))
			}
		}
		var want float32
		for _, v := range x {
			want = max(want, float32(math.Abs(float64(v))))
		}
		if got, ok := absMaxFinite(x); !ok || got != want {
			t.Errorf("n=%d: absMax %v, want %v", n, got, want)
		}
		for _, xs := range []float32{actScale(want), 1, 127 / 0.5, 3.7} {
			got := make([]int8, n)
			if !quantizeFast(x, xs, got) {
				t.Fatal("quantizeFast did not run")
			}
			for i, v := range x {
				if w := QuantizeAct(v, xs); got[i] != w {
					t.Fatalf("n=%d xs=%v: x[%d]=%v -> %d, want %d", n, xs, i, v, got[i], w)
				}
			}
		}
		if i := firstNonFinite(x); i != -1 {
			t.Errorf("n=%d: finite input reported at %d", n, i)
		}
		for _, bad := range []int{0, n / 2, n - 1} {
			y := append([]float32(nil), x...)
			y[bad] = float32(math.Inf(-1))
			if bad > 0 {
				y[bad-1+min(1, n-bad-1)] = float32(math.NaN())
			}
			want := -1
			for i, v := range y {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					want = i
					break
				}
			}
			if got := firstNonFinite(y); got != want {
				t.Errorf("n=%d: first non-finite %d, want %d", n, got, want)
			}
		}
	}
}

// TestPrefetchSpans: the strided prefetch returns for every count, none included (a loop
// that took lines = 0 for 2^64 would hang here), and touches nothing.
func TestPrefetchSpans(t *testing.T) {
	buf := make([]byte, 64<<10)
	for _, c := range []struct{ spans, stride, lines int }{{0, 0, 0}, {3, 4096, 0}, {1, 0, 1}, {8, 8192, 5}, {16, 4096, 64}} {
		prefetchSpansT1(&buf[0], c.spans, c.stride, c.lines)
	}
	for i, v := range buf {
		if v != 0 {
			t.Fatalf("byte %d changed to %d", i, v)
		}
	}
}
