package ipc

import (
	"bytes"
	"math"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"bitgo/internal/mpread"
	"bitgo/paged"
	"bitgo/quantcfg"
)

func seedRequests(f *testing.F) {
	m := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	for _, b := range [][]byte{
		m([]any{1}), m([]any{2}), m([]any{10, map[string]any{}}), m([]any{2, nil}),
		m([]any{3, map[string]any{"name": "q", "format": "int2", "out": 64, "in": 128, "act": "per-group:64", "scale": "group:32", "codebook": []int{-3, -1, 1, 3}, "bias": true}}),
		m([]any{3, map[string]any{"format": "f32", "out": 4, "in": 4, "packed": true, "weights_bytes": 64}}),
		m([]any{4, map[string]any{"upload": 1, "part": "weights", "at": 0, "off": 0, "len": 64}}),
		m([]any{5, map[string]any{"upload": 1}}), m([]any{6, map[string]any{"upload": 1}}),
		m([]any{7, map[string]any{"name": "shared"}}), m([]any{9, map[string]any{"id": 101}}),
		AppendForward(nil, 101, 1, DTypeCodeF32, 0, 64, 64, 64),
		AppendForward(nil, 101, 2, DTypeCodeBF16, 4096, 64, 0, 64),
		m([]any{8, 101, 1, 1, 0, 64, 64, 64}), // compact integers
		{0xdc, 0xff, 0xff}, {0x92, 0x02, 0xdf, 0xff, 0xff, 0xff, 0xff}, {0xc1},
	} {
		f.Add(b)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	seedRequests(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodeRequest(b)
		if err != nil {
			if StatusOf(asBadRequest(err)) == StatusInternal {
				t.Fatalf("decode error without a status: %v", err)
			}
			return
		}
		switch req.op {
		case OpForward:
			f := req.fwd
			again, err := decodeRequest(AppendForward(nil, f.id, uint32(f.n), DTypeCode(f.dt), f.xOff, f.xLen, f.outOff, f.outLen))
			if err != nil || again.fwd != f {
				t.Fatalf("forward %+v does not survive re-encoding: %+v %v", f, again.fwd, err)
			}
		case OpBegin:
			if err := req.begin.spec.Validate(); err != nil {
				t.Fatalf("begin accepted an invalid spec: %v", err)
			}
		}
	})
}

func FuzzDecodeHello(f *testing.F) {
	for _, v := range []any{
		map[string]any{"proto": 1, "name": "w", "region": 1 << 20, "slots": 4, "pid": 7},
		map[string]any{"proto": 2, "future": []any{1, "x", map[string]any{"a": nil}}},
		map[string]any{"name": 1},
	} {
		b, _ := msgpack.Marshal(v)
		f.Add(b)
	}
	f.Add([]byte{0x81, 0xa5, 'p', 'r', 'o', 't', 'o', 0xcf, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHello(b)
		if err == nil && (h.proto != ProtocolVersion || h.slots > MaxSlots || len(h.name) > MaxNameLen) {
			t.Fatalf("accepted %+v", h)
		}
	})
}

func FuzzDecodeResponse(f *testing.F) {
	f.Add(appendForwardOK(nil, 12345))
	e := newRespEncoder()
	f.Add(bytes.Clone(e.encode(StatusNotFound, "layer 7", nil)))
	f.Add(bytes.Clone(e.encode(StatusOK, "", &beginResult{Upload: 1, WeightsBytes: 10})))
	f.Add(bytes.Clone(e.encode(StatusOK, "", &Stats{Engine: map[string]float64{"x": 1}})))
	f.Add(bytes.Clone(e.encode(StatusOK, "", toLayerResult(LayerInfo{ID: 3, Spec: f32Spec("l", 4, 4, true).WithDefaults()}))))
	hr, _ := msgpack.Marshal(&HelloReply{Proto: 1, Region: 1 << 20, Limits: DefaultLimits})
	f.Add(append([]byte{0x93, 0x00, 0xa0}, hr...))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, msg, raw, err := decodeResponse(b)
		if err != nil {
			return
		}
		if len(msg)+len(raw) > len(b) || (st == StatusOK && len(b) < 3) {
			t.Fatal("response fields larger than the response")
		}
		_, _ = forwardOKResult(raw)
		_, _ = decodeStats(raw)
		_, _ = decodeBeginResult(raw)
		_, _ = decodeHelloReply(raw)
		if lr, err := decodeLayerResult(raw); err == nil {
			_, _ = lr.info()
		}
	})
}

// FuzzMsgpackCompat checks that what vmihailenco/msgpack (and so any standard encoder,
// compact or not) writes, the wire's reader (internal/mpread) reads back unchanged.
func FuzzMsgpackCompat(f *testing.F) {
	f.Add(uint64(0), int64(0), "", true, false)
	f.Add(uint64(math.MaxUint64), int64(math.MinInt64), "name.with.dots", false, true)
	f.Add(uint64(1<<32), int64(-33), string(make([]byte, 300)), true, true)
	f.Fuzz(func(t *testing.T, u uint64, i int64, s string, b, compact bool) {
		var buf bytes.Buffer
		enc := msgpack.NewEncoder(&buf)
		enc.UseCompactInts(compact)
		if err := enc.Encode([]any{u, i, s, b, map[string]any{"k": u}}); err != nil {
			t.Fatal(err)
		}
		r := newReader(buf.Bytes())
		n, err := r.ArrayLen(1, mpread.NoLimit)
		if err != nil || n != 5 {
			t.Fatalf("array: %d %v", n, err)
		}
		gu, err := r.Uint()
		if err != nil || gu != u {
			t.Fatalf("uint %d: %d %v", u, gu, err)
		}
		gi, err := r.Int()
		if err != nil || gi != i {
			t.Fatalf("int %d: %d %v", i, gi, err)
		}
		gs, err := r.Str(1 << 20)
		if err != nil || gs != s {
			t.Fatalf("str: %v", err)
		}
		gb, err := r.Bool()
		if err != nil || gb != b {
			t.Fatalf("bool: %v", err)
		}
		args, err := readArgs(r)
		if err != nil {
			t.Fatal(err)
		}
		if v, _, err := args.uint("k", math.MaxUint64, true); err != nil || v != u {
			t.Fatalf("map value: %d %v", v, err)
		}
		if err := r.Done(); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzDispatch runs arbitrary request bytes through a real session (region, handler,
// a registered and a shared layer): no panic, and every answer is a well-formed
// response that fits the slot.
func FuzzDispatch(f *testing.F) {
	seedRequests(f)
	reg, err := paged.NewRegion("fuzz", MinRegionBytes)
	if err != nil {
		f.Fatal(err)
	}
	defer reg.Close()
	g, err := newGeometry(MinRegionBytes, 2)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h := newTestHandler()
		sid := h.addShared(f32Spec("shared", 4, 4, false), randFloats(16, 1))
		srv, err := NewServer(h, ServerOptions{Logger: quietLogger(), Limits: Limits{MaxBytes: 1 << 20, MaxTokens: 8}})
		if err != nil {
			t.Fatal(err)
		}
		x := newSession(srv, 1, helloReq{name: "fuzz"}, nil, reg, g)
		li, err := h.Register(Upload{Spec: f32Spec("own", 16, 16, true).WithDefaults(), Weights: make([]byte, 1024), Bias: make([]float32, 16)})
		if err != nil {
			t.Fatal(err)
		}
		x.layers[li.ID] = &layerEntry{info: li, owned: true}
		x.owned, x.bytes = 1, li.Bytes
		if _, err := x.lookup("shared"); err != nil {
			t.Fatal(err)
		}
		for range 2 { // twice: state left by the first call must not break the second
			resp := x.dispatch(b)
			if len(resp) > SlotRespCap {
				t.Fatalf("response of %d bytes", len(resp))
			}
			st, _, raw, err := decodeResponse(resp)
			if err != nil {
				t.Fatalf("malformed response %x: %v", resp, err)
			}
			if st == StatusInternal {
				t.Fatalf("internal error for a client mistake: %s", resp)
			}
			var v any
			if err := msgpack.Unmarshal(raw, &v); err != nil {
				t.Fatalf("result is not msgpack: %v", err)
			}
		}
		if x.bytes < 0 || x.owned < 0 || len(x.uploads) > srv.opt.Limits.MaxUploads {
			t.Fatalf("session state: bytes %d owned %d uploads %d", x.bytes, x.owned, len(x.uploads))
		}
		for id, u := range x.uploads {
			x.dropUpload(id, u)
		}
		_ = sid
	})
}

// The forward header sits where PROTOCOL.md says, and it is plain msgpack.
func TestForwardHeaderLayout(t *testing.T) {
	b := AppendForward(nil, 0x0102030405060708, 0x11223344, DTypeCodeBF16, 0xa1, 0xa2, 0xa3, 0xa4)
	if len(b) != ForwardHeaderLen {
		t.Fatalf("length %d", len(b))
	}
	want := map[int]byte{0: 0x98, 1: 8, 2: 0xcf, 3: 0x01, 10: 0x08, 11: 0xce, 12: 0x11, 15: 0x44, 16: 2,
		17: 0xcf, 25: 0xa1, 26: 0xcf, 34: 0xa2, 35: 0xcf, 43: 0xa3, 44: 0xcf, 52: 0xa4}
	for off, v := range want {
		if b[off] != v {
			t.Errorf("byte %d = %#x, want %#x", off, b[off], v)
		}
	}
	var v []any
	if err := msgpack.Unmarshal(b, &v); err != nil || len(v) != 8 {
		t.Fatalf("not msgpack: %v %v", v, err)
	}
	ok := appendForwardOK(nil, 99)
	var r []any
	if err := msgpack.Unmarshal(ok, &r); err != nil || len(r) != 3 || !bytes.Equal(ok[:3], []byte{0x93, 0, 0xa0}) {
		t.Fatalf("forward OK response: %x %v", ok, err)
	}
	_ = quantcfg.DTypeF32
}
