package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"bitgo/kernels"
	"bitgo/quantcfg"
	"bitgo/sched"
)

func randLayer(rng *rand.Rand, name string, f quantcfg.Format, m, k int, bias bool) Spec {
	s := Spec{LayerSpec: quantcfg.LayerSpec{Name: name, Format: f, Out: m, In: k, Bias: bias}.WithDefaults()}
	w := kernels.RandomWeights(rng, f, m, k, 1)
	s.Weights = &w
	s.Scales = make([]float32, s.NumScales())
	for i := range s.Scales {
		s.Scales[i] = float32(0.01 + rng.Float64())
	}
	if bias {
		s.Bias = make([]float32, m)
		for i := range s.Bias {
			s.Bias[i] = float32(rng.NormFloat64())
		}
	}
	return s
}

// reference computes what Forward must return, through package kernels' reference.
func reference(t testing.TB, s Spec, x []float32, n int) []float32 {
	t.Helper()
	blob, err := kernels.PackNew(s.Format, s.Out, s.In, *s.Weights)
	if err != nil {
		t.Fatal(err)
	}
	l, err := kernels.NewLayer(s.LayerSpec, blob, s.Scales, s.Bias)
	if err != nil {
		t.Fatal(err)
	}
	y, err := kernels.Reference(l, x, n)
	if err != nil {
		t.Fatal(err)
	}
	return y
}

func f32bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func TestForwardMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	e, err := New(Config{Threads: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, fi := range quantcfg.Formats() {
		for _, sh := range [][2]int{{70, 130}, {257, 96}, {1, 1}} {
			s := randLayer(rng, fmt.Sprintf("%s-%dx%d", fi.Format, sh[0], sh[1]), fi.Format, sh[0], sh[1], sh[0]%2 == 0)
			id, err := e.Register(s)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range []int{1, 3, 17} {
				x := make([]float32, n*s.In)
				for i := range x {
					x[i] = float32(rng.NormFloat64())
				}
				want := reference(t, s, x, n)
				// f32 through bytes, with an unaligned buffer (as shared memory may give)
				xb := append([]byte{0}, f32bytes(x)...)[1:]
				out := make([]byte, 4*n*s.Out+1)[1:]
				if err := e.Forward(id, xb, quantcfg.DTypeF32, n, out); err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:])); math.Float32bits(got) != math.Float32bits(want[i]) {
						t.Fatalf("%s n=%d: out[%d] = %v, want %v", s.Name, n, i, got, want[i])
					}
				}
				// bf16 in and out: input widened exactly, output rounded to nearest even
				xh := make([]byte, 2*len(x))
				xw := make([]float32, len(x))
				for i, v := range x {
					h := kernels.BF16(v)
					binary.LittleEndian.PutUint16(xh[2*i:], h)
					xw[i] = kernels.FromBF16(h)
				}
				wantH := reference(t, s, xw, n)
				outH := make([]byte, 2*n*s.Out)
				if err := e.Forward(id, xh, quantcfg.DTypeBF16, n, outH); err != nil {
					t.Fatal(err)
				}
				for i := range wantH {
					if got := binary.LittleEndian.Uint16(outH[2*i:]); got != kernels.BF16(wantH[i]) {
						t.Fatalf("%s bf16 n=%d: out[%d] = %#x, want %#x", s.Name, n, i, got, kernels.BF16(wantH[i]))
					}
				}
				// the float32 API
				outF := make([]float32, n*s.Out)
				if err := e.ForwardF32(id, x, n, outF); err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if math.Float32bits(outF[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s ForwardF32: out[%d] = %v, want %v", s.Name, i, outF[i], want[i])
					}
				}
			}
		}
	}
}

func TestErrorsNameLayerAndMismatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	e, _ := New(Config{Threads: 2})
	defer e.Close()
	s := randLayer(rng, "q_proj", quantcfg.I2S, 64, 128, false)
	id, err := e.Register(s)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]byte, 4*2*128)
	for _, c := range []struct {
		err  error
		want []string
	}{
		{e.Forward(id, x[:4*127], quantcfg.DTypeF32, 1, make([]byte, 4*64)), []string{"q_proj", "input has 508 bytes", "128 in_features"}},
		{e.Forward(id, x, quantcfg.DTypeF32, 2, make([]byte, 4*63)), []string{"q_proj", "output has 252 bytes", "64 out_features"}},
		{e.Forward(id, x, "f16", 2, make([]byte, 4*128)), []string{"q_proj", "dtype \"f16\""}},
		{e.Forward(id, x, quantcfg.DTypeF32, 0, nil), []string{"q_proj", "0 tokens"}},
		{e.Forward(id+100, x, quantcfg.DTypeF32, 2, nil), []string{"no such layer"}},
	} {
		if c.err == nil {
			t.Errorf("no error, want %q", c.want)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(c.err.Error(), w) {
				t.Errorf("error %q lacks %q", c.err, w)
			}
		}
	}
	nan := f32bytes([]float32{float32(math.NaN())})
	xx := append(make([]byte, 4*130), nan...)
	xx = append(xx, make([]byte, 4*125)...)
	if err := e.Forward(id, xx, quantcfg.DTypeF32, 2, make([]byte, 4*128)); !errors.Is(err, kernels.ErrNonFinite) || !strings.Contains(err.Error(), "q_proj") || !strings.Contains(err.Error(), "token 1, input 2") {
		t.Errorf("NaN: %v", err)
	}
	if _, err := e.Register(s); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate name: %v", err)
	}
	bad := s
	bad.Name, bad.Scales = "k_proj", nil
	if _, err := e.Register(bad); !errors.Is(err, kernels.ErrShape) || !strings.Contains(err.Error(), "k_proj") {
		t.Errorf("missing scales: %v", err)
	}
	// a packed blob from a client is checked
	lay, _ := kernels.NewLayout(quantcfg.I2S, 64, 128)
	blob := make([]byte, lay.Bytes())
	blob[5] = 0xff // code 3
	ps := Spec{LayerSpec: s.LayerSpec, Packed: blob, Scales: s.Scales}
	ps.Name = "v_proj"
	if _, err := e.Register(ps); !errors.Is(err, kernels.ErrWeights) || !strings.Contains(err.Error(), "v_proj") {
		t.Errorf("bad packed blob: %v", err)
	}
	if st := e.Stats(); st.Errors != 5 || st.Layers != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestConcurrentCallers: many goroutines forward on shared and private layers while others
// register and free; results stay exact (run with -race).
func TestConcurrentCallers(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	e, _ := New(Config{Threads: 2})
	defer e.Close()
	shared := randLayer(rng, "shared", quantcfg.Int2, 96, 256, true)
	sid, err := e.Register(shared)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 2*256)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	want := reference(t, shared, x, 2)
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			own := randLayer(rng, fmt.Sprintf("own%d", g), quantcfg.TL2, 40, 100, false)
			oid, err := e.Register(own)
			if err != nil {
				errc <- err
				return
			}
			ox := make([]float32, 100)
			ownWant := reference(t, own, ox, 1)
			out := make([]float32, 2*96)
			oout := make([]float32, 40)
			for i := 0; i < 50; i++ {
				if err := e.ForwardF32(sid, x, 2, out); err != nil {
					errc <- err
					return
				}
				for j := range want {
					if out[j] != want[j] {
						errc <- fmt.Errorf("goroutine %d: shared out[%d] = %v, want %v", g, j, out[j], want[j])
						return
					}
				}
				if err := e.ForwardF32(oid, ox, 1, oout); err != nil {
					errc <- err
					return
				}
				for j := range ownWant {
					if oout[j] != ownWant[j] {
						errc <- fmt.Errorf("goroutine %d: own out[%d]", g, j)
						return
					}
				}
			}
			if err := e.Free(oid); err != nil {
				errc <- err
			}
		}(g)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if st := e.Stats(); st.Layers != 1 || st.Calls != 800 {
		t.Errorf("stats after: %+v", st)
	}
}

// TestFreeDuringCall: a layer freed while a call runs is released only after the call.
func TestFreeDuringCall(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	released := make(chan struct{})
	block := make(chan struct{})
	started := make(chan struct{}, 1)
	e, _ := New(Config{Runner: blockingRunner{goRunner{1}, started, block}})
	defer e.Close()
	s := randLayer(rng, "", quantcfg.I2S, 32, 128, false)
	lay, _ := kernels.NewLayout(s.Format, s.Out, s.In)
	blob := make([]byte, lay.Bytes())
	if err := kernels.Pack(s.Format, s.Out, s.In, *s.Weights, blob); err != nil {
		t.Fatal(err)
	}
	s.Weights, s.Packed, s.Borrow, s.Trusted = nil, blob, true, true
	s.Release = func() { close(released) }
	id, err := e.Register(s)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- e.ForwardF32(id, make([]float32, 128), 1, make([]float32, 32)) }()
	<-started
	if err := e.Free(id); err != nil {
		t.Fatal(err)
	}
	select {
	case <-released:
		t.Fatal("released while a call was in flight")
	default:
	}
	close(block)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-released
	if err := e.Free(id); !errors.Is(err, ErrNoLayer) {
		t.Fatalf("double free: %v", err)
	}
}

type blockingRunner struct {
	goRunner
	started chan struct{}
	block   chan struct{}
}

func (b blockingRunner) Split(class string, blocks int, fn func(w, lo, hi int)) {
	b.started <- struct{}{}
	<-b.block
	b.goRunner.Split(class, blocks, fn)
}

// TestKernelPanicIsAnError: a runner (or kernel) that panics gives ErrInternal naming the
// layer, and the engine keeps working.
func TestKernelPanicIsAnError(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	e, _ := New(Config{Runner: panicRunner{}})
	defer e.Close()
	s := randLayer(rng, "boom", quantcfg.I2S, 32, 128, false)
	id, err := e.Register(s)
	if err != nil {
		t.Fatal(err)
	}
	err = e.ForwardF32(id, make([]float32, 128), 1, make([]float32, 32))
	if !errors.Is(err, ErrInternal) || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "worker exploded") {
		t.Fatalf("got %v", err)
	}
	if st := e.Stats(); st.Errors != 1 || st.Layers != 1 {
		t.Fatalf("stats %+v", st)
	}
}

type panicRunner struct{ goRunner }

func (panicRunner) Split(string, int, func(w, lo, hi int)) { panic("worker exploded") }

// onceLogRunner is a goRunner that logs which of Split and SplitOnce each call used.
type onceLogRunner struct {
	goRunner
	mu  sync.Mutex
	log []string
}

func (r *onceLogRunner) Split(class string, blocks int, fn func(w, lo, hi int)) {
	r.mu.Lock()
	r.log = append(r.log, "Split "+class)
	r.mu.Unlock()
	r.goRunner.Split(class, blocks, fn)
}

func (r *onceLogRunner) SplitOnce(class string, blocks int, fn func(w, lo, hi int)) {
	r.mu.Lock()
	r.log = append(r.log, "SplitOnce "+class)
	r.mu.Unlock()
	r.goRunner.Split(class, blocks, fn)
}

// TestLUTCallsSplitOnce: a runner that can split without stealing (sched.Runner) is asked
// to for the lookup-table formats, whose calls build tables of all of K, and not for the
// others; the results are the reference's.
func TestLUTCallsSplitOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	r := &onceLogRunner{goRunner: goRunner{2}}
	e, err := New(Config{Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, f := range []quantcfg.Format{quantcfg.TL2, quantcfg.TL1, quantcfg.I2S} {
		s := randLayer(rng, "l_"+string(f), f, 200, 1100, true)
		id, err := e.Register(s)
		if err != nil {
			t.Fatal(err)
		}
		x := make([]float32, 1100)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		out := make([]float32, 200)
		r.log = nil
		if err := e.ForwardF32(id, x, 1, out); err != nil {
			t.Fatal(err)
		}
		want := reference(t, s, x, 1)
		for i := range out {
			if math.Float32bits(out[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: row %d: %v, want %v", f, i, out[i], want[i])
			}
		}
		kern := ""
		if len(r.log) == 1 {
			_, kern, _ = strings.Cut(r.log[0], " ")
		}
		wantLog := "Split " + kern
		if f != quantcfg.I2S && !strings.HasPrefix(kern, "ref") {
			wantLog = "SplitOnce " + kern
		}
		if len(r.log) != 1 || r.log[0] != wantLog {
			t.Errorf("%s: runner calls %q, want [%q]", f, r.log, wantLog)
		}
	}
}

// classRunner is the daemon's runner counting the splits of one class.
type classRunner struct {
	sched.Runner
	class string
	n     *atomic.Int64
}

func (r classRunner) Split(class string, blocks int, fn func(worker, lo, hi int)) {
	if class == r.class {
		r.n.Add(1)
	}
	r.Runner.Split(class, blocks, fn)
}

// TestForwardLargeConversions: a call large enough to split its bf16 conversions over the
// workers (parallelMin values in and out) returns the reference's outputs bit for bit, and
// ForwardF32 may take one buffer as input and output.
func TestForwardLargeConversions(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	pool, err := sched.New(sched.Config{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	var splits atomic.Int64
	e, err := New(Config{Runner: classRunner{sched.Runner{Pool: pool}, "convert", &splits}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	const n, m, k = 80, 900, 1000 // n*m and n*k > parallelMin
	for _, f := range []quantcfg.Format{quantcfg.I2S, quantcfg.BF16} {
		s := randLayer(rng, string(f), f, m, k, true)
		id, err := e.Register(s)
		if err != nil {
			t.Fatal(err)
		}
		x := make([]float32, n*k)
		xh := make([]byte, 2*n*k+1)[1:] // unaligned, as shared memory may be
		for i := range x {
			h := kernels.BF16(float32(rng.NormFloat64()))
			binary.LittleEndian.PutUint16(xh[2*i:], h)
			x[i] = kernels.FromBF16(h)
		}
		want := reference(t, s, x, n)
		before := splits.Load()
		outH := make([]byte, 2*n*m+1)[1:]
		if err := e.Forward(id, xh, quantcfg.DTypeBF16, n, outH); err != nil {
			t.Fatal(err)
		}
		if got := splits.Load() - before; got != 2 {
			t.Errorf("%s: %d conversions split over the workers, want 2 (decode, encode)", f, got)
		}
		for i := range want {
			if got := binary.LittleEndian.Uint16(outH[2*i:]); got != kernels.BF16(want[i]) {
				t.Fatalf("%s: out[%d] = %#x, want %#x", f, i, got, kernels.BF16(want[i]))
			}
		}
		sq := randLayer(rng, string(f)+"-square", f, k, k, false)
		id, err = e.Register(sq)
		if err != nil {
			t.Fatal(err)
		}
		want = reference(t, sq, x, n)
		buf := append([]float32(nil), x...)
		if err := e.ForwardF32(id, buf, n, buf); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if math.Float32bits(buf[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: ForwardF32 in place: out[%d] = %v, want %v", f, i, buf[i], want[i])
			}
		}
	}
}

// poolLogRunner is the daemon's pool runner, logging the classes it is asked to split.
type poolLogRunner struct {
	sched.Runner
	mu  sync.Mutex
	log []string
}

func (r *poolLogRunner) Split(class string, blocks int, fn func(w, lo, hi int)) {
	r.mu.Lock()
	r.log = append(r.log, class)
	r.mu.Unlock()
	r.Runner.Split(class, blocks, fn)
}

func (r *poolLogRunner) SplitOnce(class string, blocks int, fn func(w, lo, hi int)) {
	r.mu.Lock()
	r.log = append(r.log, class)
	r.mu.Unlock()
	r.Runner.SplitOnce(class, blocks, fn)
}

// TestPanelMajorSplits: panel-major tl2 and int1 layers through the daemon's pool give the
// reference's outputs bit for bit, a call split by whole panels where they share out among
// the workers (tl2: 4096 rows' four panels on two) and in parts of the blob where they do
// not (four on three; 4100 rows' five on two, which a split by panels cuts 96 and 33 row
// blocks), for one and three tokens; six tokens (more than a kernel pass) in parts only
// where whole panels would leave workers idle (2560 rows' two panels on three workers or
// four). tl2's 2560 x 2560's two panels of 40 row blocks one on each of two workers, in
// parts on three. int1's 2560 rows are four panels of 20 row blocks: by rows on two workers
// and four, in parts on three and eight (more workers than panels); 6144 rows' six panels
// in parts on four; int1 any count of tokens alike.
func TestPanelMajorSplits(t *testing.T) {
	if testing.Short() {
		t.Skip("16M-weight layers")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(8, runtime.GOMAXPROCS(0)))) // (up to eight workers on two CPUs)
	rng := rand.New(rand.NewPCG(8, 8))
	for _, c := range []struct {
		f               quantcfg.Format
		m, k, threads   int
		parts, manyPart bool // in parts with one and three tokens; with six
	}{
		{quantcfg.TL2, 4096, 4080, 2, false, false}, {quantcfg.TL2, 4096, 4080, 3, true, false},
		{quantcfg.TL2, 4100, 4100, 2, true, false}, {quantcfg.TL2, 2560, 2560, 2, false, false},
		{quantcfg.TL2, 2560, 2560, 3, true, true}, {quantcfg.TL2, 2560, 2560, 4, true, true},
		{quantcfg.Int1, 2560, 2560, 2, false, false}, {quantcfg.Int1, 2560, 2560, 4, false, false},
		{quantcfg.Int1, 2560, 2560, 3, true, true}, {quantcfg.Int1, 2560, 2560, 8, true, true},
		{quantcfg.Int1, 6144, 2048, 4, true, true},
	} {
		pool, err := sched.New(sched.Config{Threads: c.threads})
		if err != nil {
			t.Fatal(err)
		}
		r := &poolLogRunner{Runner: sched.Runner{Pool: pool}}
		e, err := New(Config{Runner: r})
		if err != nil {
			t.Fatal(err)
		}
		s := randLayer(rng, fmt.Sprintf("%s-%dx%d", c.f, c.m, c.k), c.f, c.m, c.k, true)
		id, err := e.Register(s)
		if err != nil {
			t.Fatal(err)
		}
		ns := []int{1, 3, 6}
		if raceEnabled {
			ns = []int{1, 6}
		}
		for _, n := range ns {
			what := fmt.Sprintf("%s %dx%d on %d threads, n=%d", c.f, c.m, c.k, c.threads, n)
			x := make([]float32, n*c.k)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			out := make([]float32, n*c.m)
			r.log = nil
			if err := e.ForwardF32(id, x, n, out); err != nil {
				t.Fatal(err)
			}
			want := reference(t, s, x, n)
			for i := range out {
				if math.Float32bits(out[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s: out[%d] = %v, want %v", what, i, out[i], want[i])
				}
			}
			// (the assembly kernels only: the generic and reference ones split by rows)
			if len(r.log) > 0 && strings.HasPrefix(r.log[0], "avx512") {
				want := c.parts
				if n > 4 {
					want = c.manyPart
				}
				if got := strings.HasSuffix(r.log[0], "/parts"); got != want {
					t.Errorf("%s: splits %q, want in parts %t", what, r.log, want)
				}
			}
		}
		e.Close()
		pool.Close()
	}
}
