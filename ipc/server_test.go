package ipc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bitgo/quantcfg"
)

func f32Spec(name string, out, in int, bias bool) quantcfg.LayerSpec {
	return quantcfg.LayerSpec{Name: name, Format: quantcfg.F32, Out: out, In: in, Bias: bias}
}

func registerF32(t testing.TB, c *Client, name string, out, in int, bias bool, seed uint64) (LayerInfo, []float32, []float32) {
	t.Helper()
	w := randFloats(out*in, seed)
	var b []float32
	if bias {
		b = randFloats(out, seed+1)
	}
	li, err := c.Register(f32Spec(name, out, in, bias), Weights{Data: floatBytes(w, quantcfg.DTypeF32), Bias: b})
	if err != nil {
		t.Fatal(err)
	}
	return li, w, b
}

func checkForward(t testing.TB, c *Client, id LayerID, w, b []float32, out, in, n int, dt quantcfg.DType, seed uint64) {
	t.Helper()
	x := randFloats(n*in, seed)
	xb := floatBytes(x, dt)
	got := make([]byte, n*out*dt.Size())
	if err := c.Forward(id, xb, dt, n, got); err != nil {
		t.Fatalf("forward n=%d %s: %v", n, dt, err)
	}
	want := floatBytes(refLinear(w, b, decodeFloats(xb, dt), n, out, in), dt)
	if !bytes.Equal(got, want) {
		t.Fatalf("forward n=%d %s: output differs from the reference", n, dt)
	}
}

func TestRoundTrip(t *testing.T) {
	h := newTestHandler()
	_, path := startServer(t, h, ServerOptions{})
	c := dial(t, path, Options{})
	if err := c.Ping(); err != nil {
		t.Fatal(err)
	}
	li, w, b := registerF32(t, c, "q_proj", 48, 64, true, 1)
	if li.ID == 0 || li.Spec.Out != 48 || li.Spec.In != 64 || li.Spec.Format != quantcfg.F32 || !li.Spec.Bias || li.Shared {
		t.Fatalf("layer info %+v", li)
	}
	for _, dt := range []quantcfg.DType{quantcfg.DTypeF32, quantcfg.DTypeBF16} {
		for _, n := range []int{1, 3, 17} { // decode and prefill
			checkForward(t, c, li.ID, w, b, 48, 64, n, dt, uint64(n))
		}
	}
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Session.Layers != 1 || st.Sessions != 1 || st.Session.Calls < 8 || st.Engine["layers"] != 1 {
		t.Fatalf("stats %+v", st)
	}
	if err := c.Free(li.ID); err != nil {
		t.Fatal(err)
	}
	if h.count() != 0 {
		t.Fatal("layer not freed in the handler")
	}
	err = c.Forward(li.ID, make([]byte, 256), quantcfg.DTypeF32, 1, make([]byte, 192))
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("forward after free: %v", err)
	}
}

func TestIntegerUploadsInChunks(t *testing.T) {
	h := newTestHandler()
	_, path := startServer(t, h, ServerOptions{})
	// A 1 MiB region leaves less than 1 MiB of data area: a 1024 x 2048 int8 layer
	// (2 MiB of logical weights) takes several chunks.
	c := dial(t, path, Options{RegionBytes: MinRegionBytes})
	const out, in = 1024, 2048
	q := make([]byte, out*in)
	for i := range q {
		q[i] = byte(int8(i*7%255 - 127))
	}
	scales := randFloats(out, 9)
	spec := quantcfg.LayerSpec{Name: "up_proj", Format: quantcfg.Int8, Out: out, In: in, Scale: quantcfg.PerRowScale}
	li, err := c.Register(spec, Weights{Data: q, Scales: scales})
	if err != nil {
		t.Fatal(err)
	}
	if len(q) <= c.DataSize() {
		t.Fatalf("data area %d: the layer does not need chunks", c.DataSize())
	}
	w := make([]float32, out*in)
	for i := range w {
		w[i] = float32(int8(q[i])) * scales[i/in]
	}
	checkForward(t, c, li.ID, w, nil, out, in, 2, quantcfg.DTypeF32, 5)

	// Ternary with a per-tensor scale; a non-ternary value is refused by the handler.
	tq := make([]byte, 64*32)
	for i := range tq {
		tq[i] = byte(int8(i%3 - 1))
	}
	ts := quantcfg.LayerSpec{Name: "t", Format: quantcfg.I2S, Out: 64, In: 32}
	if _, err := c.Register(ts, Weights{Data: tq, Scales: []float32{0.5}}); err != nil {
		t.Fatal(err)
	}
	tq[5] = 2
	if _, err := c.Register(ts, Weights{Data: tq, Scales: []float32{0.5}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("non-ternary weights: %v", err)
	}
	if _, err := c.Register(ts, Weights{Data: tq, Scales: []float32{0.5, 1}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("two scales for a per-tensor layer: %v", err)
	}
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Session.Uploads != 0 || st.Session.Layers != 2 {
		t.Fatalf("failed registers left state behind: %+v", st.Session)
	}
}

func TestPackedUpload(t *testing.T) {
	h := newTestHandler()
	_, path := startServer(t, h, ServerOptions{})
	c := dial(t, path, Options{})
	w := randFloats(32*16, 3)
	li, err := c.Register(f32Spec("p", 32, 16, false), Weights{Data: floatBytes(w, quantcfg.DTypeF32), Packed: true})
	if err != nil {
		t.Fatal(err)
	}
	checkForward(t, c, li.ID, w, nil, 32, 16, 4, quantcfg.DTypeF32, 1)
	// A packed blob of the wrong size is refused at begin, before any upload.
	_, err = c.Register(f32Spec("p", 32, 16, false), Weights{Data: make([]byte, 100), Packed: true})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("wrong packed size: %v", err)
	}
	_, err = c.Register(quantcfg.LayerSpec{Format: quantcfg.Int8, Out: 32, In: 32}, Weights{Data: make([]byte, 100), Packed: true, Scales: make([]float32, 32)})
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("packed format the handler cannot size: %v", err)
	}
}

func TestSharedAndPrivateLayers(t *testing.T) {
	h := newTestHandler()
	sw := randFloats(16*8, 4)
	sid := h.addShared(f32Spec("embed.shared", 16, 8, false), sw)
	_, path := startServer(t, h, ServerOptions{})
	a := dial(t, path, Options{Name: "a"})
	b := dial(t, path, Options{Name: "b"})

	// Both sessions can look up and run the shared layer; neither can free it.
	for _, c := range []*Client{a, b} {
		li, err := c.Lookup("embed.shared")
		if err != nil {
			t.Fatal(err)
		}
		if li.ID != sid || !li.Shared {
			t.Fatalf("lookup: %+v", li)
		}
		checkForward(t, c, sid, sw, nil, 16, 8, 2, quantcfg.DTypeF32, 7)
		if err := c.Free(sid); !errors.Is(err, ErrDenied) {
			t.Fatalf("free of a shared layer: %v", err)
		}
	}
	// A shared layer must be looked up before use.
	c := dial(t, path, Options{Name: "c"})
	if err := c.Forward(sid, make([]byte, 32), quantcfg.DTypeF32, 1, make([]byte, 64)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("forward of a shared layer without lookup: %v", err)
	}

	// a's private layer is invisible to b: not usable, not freeable, not found by name.
	li, _, _ := registerF32(t, a, "private", 8, 8, false, 5)
	if err := b.Forward(li.ID, make([]byte, 32), quantcfg.DTypeF32, 1, make([]byte, 32)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("b used a's layer: %v", err)
	}
	if err := b.Free(li.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("b freed a's layer: %v", err)
	}
	if _, err := b.Lookup("private"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("b looked up a's layer: %v", err)
	}
	if _, err := b.Lookup(""); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("empty name: %v", err)
	}
}

// lyingHandler returns private layers from Lookup; the server must not hand them out.
type lyingHandler struct{ *testHandler }

func (h lyingHandler) Lookup(name string) (LayerInfo, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.layers {
		if l.info.Spec.Name == name {
			li := l.info
			li.Shared = true
			return li, nil
		}
	}
	return LayerInfo{}, ErrNotFound
}

func TestLookupNeverLeaksPrivateLayers(t *testing.T) {
	h := lyingHandler{newTestHandler()}
	_, path := startServer(t, h, ServerOptions{})
	a := dial(t, path, Options{Name: "a"})
	b := dial(t, path, Options{Name: "b"})
	registerF32(t, a, "mine", 8, 8, false, 1)
	if _, err := b.Lookup("mine"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("lookup returned another session's layer: %v", err)
	}
}

func TestSessionEndFreesLayers(t *testing.T) {
	h := newTestHandler()
	h.addShared(f32Spec("shared", 4, 4, false), randFloats(16, 1))
	s, path := startServer(t, h, ServerOptions{})
	c, err := Dial(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		registerF32(t, c, "l", 8, 8, false, uint64(i))
	}
	// An upload in progress is dropped too.
	if err := c.control(OpBegin, &beginArgs{Format: "f32", Out: 4, In: 4}, nil); err != nil {
		t.Fatal(err)
	}
	if h.count() != 4 || s.Sessions() != 1 {
		t.Fatalf("handler layers %d, sessions %d", h.count(), s.Sessions())
	}
	c.Close()
	waitFor(t, "the session's layers to be freed", func() bool { return h.count() == 1 && s.Sessions() == 0 })
	if err := c.Ping(); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close: %v", err)
	}
}

func TestConcurrentClients(t *testing.T) {
	h := newTestHandler()
	sw := randFloats(32*64, 8)
	sid := h.addShared(f32Spec("shared", 32, 64, false), sw)
	_, path := startServer(t, h, ServerOptions{})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 4 {
		c := dial(t, path, Options{Name: "worker"})
		li, w, b := registerF32(t, c, "own", 24, 64, true, uint64(i))
		if _, err := c.Lookup("shared"); err != nil {
			t.Fatal(err)
		}
		// Two goroutines per client: calls are serialized by the client.
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range 50 {
					id, ww, bb, out := li.ID, w, b, 24
					if j%2 == g {
						id, ww, bb, out = sid, sw, nil, 32
					}
					x := floatBytes(randFloats(2*64, uint64(j)), quantcfg.DTypeF32)
					got := make([]byte, 2*out*4)
					if err := c.Forward(id, x, quantcfg.DTypeF32, 2, got); err != nil {
						errs <- err
						return
					}
					want := floatBytes(refLinear(ww, bb, decodeFloats(x, quantcfg.DTypeF32), 2, out, 64), quantcfg.DTypeF32)
					if !bytes.Equal(got, want) {
						errs <- errors.New("wrong output under concurrency")
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestNonFiniteActivations(t *testing.T) {
	h := newTestHandler()
	_, path := startServer(t, h, ServerOptions{})
	c := dial(t, path, Options{})
	li, w, b := registerF32(t, c, "l", 8, 8, true, 1)
	x := randFloats(8, 2)
	x[3] = float32(math.NaN())
	err := c.Forward(li.ID, floatBytes(x, quantcfg.DTypeF32), quantcfg.DTypeF32, 1, make([]byte, 32))
	var e *Error
	if !errors.As(err, &e) || e.Status != StatusNonFinite || !errors.Is(err, ErrNonFinite) {
		t.Fatalf("NaN activation: %v", err)
	}
	x[3] = float32(math.Inf(-1))
	if err := c.Forward(li.ID, floatBytes(x, quantcfg.DTypeBF16), quantcfg.DTypeBF16, 1, make([]byte, 16)); !errors.Is(err, ErrNonFinite) {
		t.Fatalf("-Inf activation: %v", err)
	}
	checkForward(t, c, li.ID, w, b, 8, 8, 1, quantcfg.DTypeF32, 3) // the session goes on
}

func TestShutdownDrains(t *testing.T) {
	h := newTestHandler()
	h.gate = make(chan struct{})
	h.entered = make(chan struct{}, 1)
	s, path := startServer(t, h, ServerOptions{})
	a := dial(t, path, Options{Name: "busy"})
	b := dial(t, path, Options{Name: "idle"})
	li, w, _ := registerF32(t, a, "slow", 4, 4, false, 1)
	liB, _, _ := registerF32(t, b, "fast", 4, 4, false, 2)

	x := floatBytes(randFloats(4, 3), quantcfg.DTypeF32)
	got := make([]byte, 16)
	callErr := make(chan error, 1)
	go func() { callErr <- a.Forward(li.ID, x, quantcfg.DTypeF32, 1, got) }()
	<-h.entered // the call is in flight

	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	// New calls are refused while the in-flight one runs.
	waitFor(t, "draining", func() bool { return s.draining.Load() })
	err := b.Forward(liB.ID, x, quantcfg.DTypeF32, 1, make([]byte, 16))
	if !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("new call during drain: %v", err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned before the call in flight finished: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(h.gate)
	if err := <-callErr; err != nil {
		t.Fatalf("the call in flight failed: %v", err)
	}
	if want := floatBytes(refLinear(w, nil, decodeFloats(x, quantcfg.DTypeF32), 1, 4, 4), quantcfg.DTypeF32); !bytes.Equal(got, want) {
		t.Fatal("the call in flight returned a wrong answer")
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if h.count() != 0 || s.Sessions() != 0 {
		t.Fatalf("after shutdown: %d layers, %d sessions", h.count(), s.Sessions())
	}
	// Clients learn why their session ended.
	if err := a.Ping(); !errors.Is(err, ErrShuttingDown) || !errors.Is(err, ErrClosed) {
		t.Fatalf("call after shutdown: %v", err)
	}
	if _, err := Dial(path, Options{DialTimeout: time.Second}); err == nil {
		t.Fatal("dial after shutdown succeeded")
	}
}

func TestCloseInterruptsBlockedCall(t *testing.T) {
	h := newTestHandler()
	h.gate = make(chan struct{})
	h.entered = make(chan struct{}, 1)
	_, path := startServer(t, h, ServerOptions{})
	defer close(h.gate)
	c := dial(t, path, Options{})
	li, _, _ := registerF32(t, c, "slow", 4, 4, false, 1)
	errc := make(chan error, 1)
	go func() { errc <- c.Forward(li.ID, make([]byte, 16), quantcfg.DTypeF32, 1, make([]byte, 16)) }()
	<-h.entered
	start := time.Now()
	go c.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("blocked call after Close: %v", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("Close took %v to interrupt the call", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not interrupt the blocked call")
	}
}

func TestCallTimeout(t *testing.T) {
	h := newTestHandler()
	h.gate = make(chan struct{})
	_, path := startServer(t, h, ServerOptions{})
	defer close(h.gate)
	c := dial(t, path, Options{CallTimeout: 200 * time.Millisecond})
	li, _, _ := registerF32(t, c, "slow", 4, 4, false, 1)
	err := c.Forward(li.ID, make([]byte, 16), quantcfg.DTypeF32, 1, make([]byte, 16))
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("slow call: %v", err)
	}
	if err := c.Ping(); !errors.Is(err, ErrTimeout) {
		t.Fatalf("a timed-out client must stay closed: %v", err)
	}
}

// Several requests in flight at once (the ring): the daemon answers them in order, each
// in its own slot.
func TestPipelinedRequests(t *testing.T) {
	h := newTestHandler()
	_, path := startServer(t, h, ServerOptions{})
	c := dial(t, path, Options{Slots: 4})
	li, w, _ := registerF32(t, c, "l", 8, 16, false, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.r.data()
	var xs [][]float32
	for i := range 3 { // three forwards with their own data ranges, then a ping
		x := randFloats(16, uint64(i))
		xs = append(xs, x)
		copy(d[i*4096:], floatBytes(x, quantcfg.DTypeF32))
		req := AppendForward(nil, li.ID, 1, DTypeCodeF32, uint64(i*4096), 64, uint64(i*4096+1024), 32)
		slot := c.r.slot(c.seq + uint32(i))
		copy(slot[slotReqOff:], req)
		binary.LittleEndian.PutUint32(slot[slotReqLen:], uint32(len(req)))
	}
	ping := []byte{0x91, 0x02}
	slot := c.r.slot(c.seq + 3)
	copy(slot[slotReqOff:], ping)
	binary.LittleEndian.PutUint32(slot[slotReqLen:], uint32(len(ping)))
	publish(c.r.reqSeq(), c.r.serverWait(), c.seq+4)
	for seq := c.seq; seq != c.seq+4; seq++ {
		if err := waitChange(c.r.respSeq(), c.r.clientWait(), seq, &c.spin, clientSlice, time.Now(), c.check); err != nil {
			t.Fatal(err)
		}
	}
	if got := atomic.LoadUint32(c.r.respSeq()); got != c.seq+4 {
		t.Fatalf("resp_seq %d, want %d", got, c.seq+4)
	}
	for i := range 4 {
		slot := c.r.slot(c.seq + uint32(i))
		n := binary.LittleEndian.Uint32(slot[slotRespLen:])
		st, msg, _, err := decodeResponse(slot[slotRespOff : slotRespOff+n])
		if err != nil || st != StatusOK {
			t.Fatalf("request %d: %v %v %q", i, err, st, msg)
		}
		if i < 3 {
			want := floatBytes(refLinear(w, nil, xs[i], 1, 8, 16), quantcfg.DTypeF32)
			if !bytes.Equal(d[i*4096+1024:i*4096+1024+32], want) {
				t.Fatalf("forward %d: wrong output", i)
			}
		}
	}
	c.seq += 4
}
