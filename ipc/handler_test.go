package ipc

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bitgo/quantcfg"
)

// testHandler is a small, honest Handler for protocol tests: it dequantizes uploads to
// float32 weights and computes y = x W^T + b in float64 accumulation, refusing
// non-finite activations. Formats: f32, bf16 (logical floats), int8 (scales tensor or
// row), i2s (ternary, tensor scale), and packed f32 (the blob is the row-major floats).
type testHandler struct {
	mu       sync.Mutex
	layers   map[LayerID]*testLayer
	next     LayerID
	inFlight atomic.Int32
	maxIn    atomic.Int32
	forwards atomic.Int64
	// gate, when set, blocks Forward on layers named "slow" until it is closed.
	gate chan struct{}
	// entered receives a value each time a "slow" forward starts.
	entered chan struct{}
}

type testLayer struct {
	info LayerInfo
	w    []float32 // [Out][In]
	bias []float32
}

func newTestHandler() *testHandler {
	return &testHandler{layers: map[LayerID]*testLayer{}, next: 100}
}

// addShared installs a layer as if loaded from a pack file.
func (h *testHandler) addShared(spec quantcfg.LayerSpec, w []float32) LayerID {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	spec = spec.WithDefaults()
	h.layers[h.next] = &testLayer{info: LayerInfo{ID: h.next, Spec: spec, Bytes: int64(4 * len(w)), Shared: true}, w: w}
	return h.next
}

func (h *testHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.layers)
}

func (h *testHandler) PackedSize(spec quantcfg.LayerSpec) (int64, error) {
	if spec.Format != quantcfg.F32 {
		return 0, fmt.Errorf("%w: the test handler packs only f32", ErrUnsupported)
	}
	return int64(spec.Out) * int64(spec.In) * 4, nil
}

func (h *testHandler) Register(u Upload) (LayerInfo, error) {
	s := u.Spec
	w := make([]float32, s.Out*s.In)
	scale := func(m int) float32 {
		switch s.Scale.Kind {
		case quantcfg.ScaleTensor:
			return u.Scales[0]
		case quantcfg.ScaleRow:
			return u.Scales[m]
		}
		return 1
	}
	for _, v := range u.Scales {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return LayerInfo{}, fmt.Errorf("%w: scale %v", ErrNonFinite, v)
		}
	}
	switch {
	case s.Format == quantcfg.F32:
		for i := range w {
			w[i] = math.Float32frombits(binary.LittleEndian.Uint32(u.Weights[4*i:]))
		}
	case s.Format == quantcfg.BF16 && !u.Packed:
		for i := range w {
			w[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(u.Weights[2*i:])) << 16)
		}
	case (s.Format == quantcfg.Int8 || s.Format == quantcfg.I2S) && !u.Packed:
		if s.Scale.Kind == quantcfg.ScaleGroup {
			return LayerInfo{}, fmt.Errorf("%w: the test handler has no group scales", ErrUnsupported)
		}
		for i := range w {
			q := int8(u.Weights[i])
			if s.Format == quantcfg.I2S && (q < -1 || q > 1) {
				return LayerInfo{}, fmt.Errorf("%w: weight [%d][%d] = %d is not ternary", ErrInvalid, i/s.In, i%s.In, q)
			}
			w[i] = float32(q) * scale(i/s.In)
		}
	default:
		return LayerInfo{}, fmt.Errorf("%w: the test handler does not serve %s (packed %v)", ErrUnsupported, s.Format, u.Packed)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	l := &testLayer{info: LayerInfo{ID: h.next, Spec: s, Bytes: int64(len(u.Weights) + 4*len(u.Scales) + 4*len(u.Bias))}, w: w}
	if u.Bias != nil {
		l.bias = append([]float32(nil), u.Bias...)
	}
	h.layers[h.next] = l
	return l.info, nil
}

func (h *testHandler) Lookup(name string) (LayerInfo, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.layers {
		if l.info.Shared && l.info.Spec.Name == name {
			return l.info, nil
		}
	}
	return LayerInfo{}, fmt.Errorf("%w: no layer named %q", ErrNotFound, name)
}

func (h *testHandler) Forward(id LayerID, x []byte, dt quantcfg.DType, n int, out []byte) error {
	h.mu.Lock()
	l := h.layers[id]
	h.mu.Unlock()
	if l == nil {
		return fmt.Errorf("%w: layer %d", ErrNotFound, id)
	}
	c := h.inFlight.Add(1)
	defer h.inFlight.Add(-1)
	for {
		m := h.maxIn.Load()
		if c <= m || h.maxIn.CompareAndSwap(m, c) {
			break
		}
	}
	h.forwards.Add(1)
	if l.info.Spec.Name == "slow" && h.gate != nil {
		if h.entered != nil {
			h.entered <- struct{}{}
		}
		<-h.gate
	}
	s := l.info.Spec
	xf := decodeFloats(x, dt)
	for i, v := range xf {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("%w: x[%d][%d] = %v", ErrNonFinite, i/s.In, i%s.In, v)
		}
	}
	y := refLinear(l.w, l.bias, xf, n, s.Out, s.In)
	encodeFloats(out, y, dt)
	return nil
}

func (h *testHandler) Free(id LayerID) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.layers[id]
	if l == nil || l.info.Shared {
		return fmt.Errorf("%w: layer %d", ErrNotFound, id)
	}
	delete(h.layers, id)
	return nil
}

func (h *testHandler) Stats() map[string]float64 {
	return map[string]float64{"layers": float64(h.count()), "forwards": float64(h.forwards.Load())}
}

// refLinear is the test oracle: y[t][m] = sum_k w[m][k] x[t][k] (+ b[m]).
func refLinear(w, b, x []float32, n, out, in int) []float32 {
	y := make([]float32, n*out)
	for t := 0; t < n; t++ {
		for m := 0; m < out; m++ {
			var acc float64
			for k := 0; k < in; k++ {
				acc += float64(w[m*in+k]) * float64(x[t*in+k])
			}
			if b != nil {
				acc += float64(b[m])
			}
			y[t*out+m] = float32(acc)
		}
	}
	return y
}

func decodeFloats(b []byte, dt quantcfg.DType) []float32 {
	if dt == quantcfg.DTypeBF16 {
		f := make([]float32, len(b)/2)
		for i := range f {
			f[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
		return f
	}
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}

func encodeFloats(b []byte, f []float32, dt quantcfg.DType) {
	for i, v := range f {
		if dt == quantcfg.DTypeBF16 {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(v)>>16)) // truncation is fine for a test oracle
		} else {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
	}
}

func floatBytes(f []float32, dt quantcfg.DType) []byte {
	b := make([]byte, len(f)*dt.Size())
	encodeFloats(b, f, dt)
	return b
}

// Test fixtures.

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startServer runs a server with h on a fresh socket and stops it when the test ends.
func startServer(t testing.TB, h Handler, opt ServerOptions) (*Server, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "ipc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "bitd.sock")
	if opt.Logger == nil {
		opt.Logger = quietLogger()
	}
	s, err := NewServer(h, opt)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := s.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("server close: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return s, path
}

func dial(t testing.TB, path string, opt Options) *Client {
	t.Helper()
	if opt.Name == "" {
		opt.Name = t.Name()
	}
	c, err := Dial(path, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// randFloats returns deterministic pseudo-random values in [-1, 1).
func randFloats(n int, seed uint64) []float32 {
	f := make([]float32, n)
	s := seed*2654435761 + 1
	for i := range f {
		s ^= s << 13
		s ^= s >> 7
		s ^= s << 17
		f[i] = float32(int64(s>>40)-(1<<23)) / (1 << 23)
	}
	return f
}

// waitFor polls cond for up to 5 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
