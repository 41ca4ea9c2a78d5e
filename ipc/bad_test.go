package ipc

import (
	"encoding/binary"
	"errors"
	"math"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"bitgo/paged"
	"bitgo/quantcfg"
)

// rawCall sends request bytes as they are and returns the status and message.
func rawCall(t *testing.T, c *Client, req []byte) (Status, string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	st, msg, _, err := c.call(req)
	if err != nil {
		t.Fatalf("transport failure on a bad request (the session must go on): %v", err)
	}
	return st, msg
}

func mp(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fwd(id LayerID, n uint32, code byte, xOff, xLen, outOff, outLen uint64) []byte {
	return AppendForward(nil, id, n, code, xOff, xLen, outOff, outLen)
}

func TestBadRequestsKeepTheSession(t *testing.T) {
	h := newTestHandler()
	_, path := startServer(t, h, ServerOptions{Limits: Limits{MaxTokens: 64}})
	c := dial(t, path, Options{RegionBytes: MinRegionBytes})
	other := dial(t, path, Options{Name: "bystander"})
	li, w, b := registerF32(t, c, "l", 8, 16, true, 1)
	lo, wo, _ := registerF32(t, other, "o", 4, 4, false, 2)
	ds := uint64(c.DataSize())
	id := li.ID
	type tc struct {
		name string
		req  []byte
		want Status
		msg  string // a fragment the message must contain
	}
	cases := []tc{
		{"reserved byte", []byte{0xc1}, StatusBadRequest, "array"},
		{"empty", []byte{}, StatusBadRequest, "ends early"},
		{"empty array", []byte{0x90}, StatusBadRequest, "no op"},
		{"map", mp(t, map[string]int{"op": 2}), StatusBadRequest, "want an array"},
		{"op is a string", mp(t, []any{"ping"}), StatusBadRequest, "integer"},
		{"unknown op", mp(t, []any{42}), StatusUnknownOp, "op 42"},
		{"op zero", mp(t, []any{0}), StatusUnknownOp, "op 0"},
		{"negative op", mp(t, []any{-1}), StatusBadRequest, "negative"},
		{"array claims 65535", []byte{0xdc, 0xff, 0xff, 0x02}, StatusBadRequest, "65535 elements"},
		{"map claims 2^32-1", []byte{0x92, 0x02, 0xdf, 0xff, 0xff, 0xff, 0xff}, StatusBadRequest, "entries"},
		{"string claims 4 GB", []byte{0x92, 0x07, 0x81, 0xa4, 'n', 'a', 'm', 'e', 0xdb, 0xff, 0xff, 0xff, 0xff}, StatusBadRequest, "bytes"},
		{"deep nesting", append(append([]byte{0x92, 0x02, 0x81, 0xa1, 'x'}, []byte(strings.Repeat("\x91", 20))...), 0x01), StatusBadRequest, "nested"},
		{"trailing bytes", append(mp(t, []any{2}), 0x00), StatusBadRequest, "trailing"},
		{"unknown argument", mp(t, []any{2, map[string]any{"verbose": true}}), StatusBadRequest, "verbose"},
		{"duplicate key", []byte{0x92, 0x09, 0x82, 0xa2, 'i', 'd', 0x01, 0xa2, 'i', 'd', 0x02}, StatusBadRequest, "twice"},
		{"three elements", mp(t, []any{2, nil, nil}), StatusBadRequest, "array of 3"},
		{"lookup without name", mp(t, []any{7, map[string]any{}}), StatusBadRequest, "missing"},
		{"free with string id", mp(t, []any{9, map[string]any{"id": "7"}}), StatusBadRequest, "integer"},
		{"free unknown id", mp(t, []any{9, map[string]any{"id": 999999}}), StatusNotFound, "999999"},
		{"free another session's layer", mp(t, []any{9, map[string]any{"id": lo.ID}}), StatusNotFound, "not registered"},

		{"forward 7 elements", mp(t, []any{8, id, 1, 1, 0, 64, 64}), StatusBadRequest, "array of 8"},
		{"forward negative id", mp(t, []any{8, -3, 1, 1, 0, 64, 64, 32}), StatusBadRequest, "negative"},
		{"forward dtype 3", fwd(id, 1, 3, 0, 64, 64, 32), StatusBadRequest, "dtype code 3"},
		{"forward unknown layer", fwd(12345, 1, 1, 0, 64, 64, 32), StatusNotFound, "12345"},
		{"forward another session's layer", fwd(lo.ID, 1, 1, 0, 16, 64, 16), StatusNotFound, "not registered"},
		{"forward n 0", fwd(id, 0, 1, 0, 0, 64, 0), StatusShape, "n = 0"},
		{"forward n over limit", fwd(id, 65, 1, 0, 65*64, 8192, 65*32), StatusShape, "n = 65"},
		{"forward short x", fwd(id, 1, 1, 0, 60, 64, 32), StatusShape, "x_len 60"},
		{"forward x as bf16 size", fwd(id, 1, 1, 0, 32, 64, 32), StatusShape, "x_len 32"},
		{"forward long out", fwd(id, 1, 2, 0, 32, 64, 32), StatusShape, "out_len 32"},
		{"forward x past the end", fwd(id, 1, 1, ds-32, 64, 0, 32), StatusOutOfRange, "outside the data area"},
		{"forward out past the end", fwd(id, 1, 1, 0, 64, ds, 32), StatusOutOfRange, "outside the data area"},
		{"forward offset overflow", fwd(id, 1, 1, math.MaxInt64, 64, 0, 32), StatusOutOfRange, "outside"},
		{"forward offset 2^63", mp(t, []any{8, id, 1, 1, uint64(1) << 63, 64, 64, 32}), StatusBadRequest, "at most"},
		{"forward misaligned", fwd(id, 1, 1, 4, 64, 128, 32), StatusOutOfRange, "multiples of 8"},
		{"forward overlap", fwd(id, 1, 1, 0, 64, 32, 32), StatusOutOfRange, "overlap"},
		{"forward trailing", append(fwd(id, 1, 1, 0, 64, 64, 32), 0xc0), StatusBadRequest, "trailing"},

		{"begin bad format", mp(t, []any{3, map[string]any{"format": "int3", "out": 4, "in": 4}}), StatusInvalid, "int3"},
		{"begin out 0", mp(t, []any{3, map[string]any{"format": "f32", "out": 0, "in": 4}}), StatusInvalid, "out_features"},
		{"begin in too big", mp(t, []any{3, map[string]any{"format": "f32", "out": 4, "in": 1 << 21}}), StatusBadRequest, "at most"},
		{"begin K over int8's limit", mp(t, []any{3, map[string]any{"format": "int8", "out": 4, "in": 1<<16 + 32}}), StatusInvalid, "split the layer"},
		{"begin out as string", mp(t, []any{3, map[string]any{"format": "f32", "out": "4", "in": 4}}), StatusBadRequest, "out"},
		{"begin without format", mp(t, []any{3, map[string]any{"out": 4, "in": 4}}), StatusBadRequest, "format"},
		{"begin act for a lookup format", mp(t, []any{3, map[string]any{"format": "tl1", "out": 4, "in": 4, "act": "per-group:128"}}), StatusUnsupported, "per-group"},
		{"begin bad scale", mp(t, []any{3, map[string]any{"format": "int8", "out": 4, "in": 4, "scale": "group:33"}}), StatusInvalid, "33"},
		{"begin codebook on int8", mp(t, []any{3, map[string]any{"format": "int8", "out": 4, "in": 4, "codebook": []int{-2, -1, 0, 1}}}), StatusInvalid, "code book"},
		{"begin codebook of 3", mp(t, []any{3, map[string]any{"format": "int2", "out": 4, "in": 4, "codebook": []int{-2, -1, 0}}}), StatusBadRequest, "4 levels"},
		{"begin codebook repeated level", mp(t, []any{3, map[string]any{"format": "int2", "out": 4, "in": 4, "codebook": []int{1, 1, 0, 2}}}), StatusInvalid, "distinct"},
		{"begin codebook level 200", mp(t, []any{3, map[string]any{"format": "int2", "out": 4, "in": 4, "codebook": []int{200, 1, 0, 2}}}), StatusInvalid, "int8"},
		{"begin wrong weights_bytes", mp(t, []any{3, map[string]any{"format": "f32", "out": 4, "in": 4, "weights_bytes": 63}}), StatusInvalid, "63"},
		{"begin packed without size", mp(t, []any{3, map[string]any{"format": "f32", "out": 4, "in": 4, "packed": true}}), StatusBadRequest, "weights_bytes"},
		{"name not UTF-8", mp(t, []any{7, map[string]any{"name": "\xff\xfe"}}), StatusBadRequest, "UTF-8"},
		{"name too long", mp(t, []any{7, map[string]any{"name": strings.Repeat("n", MaxNameLen+1)}}), StatusBadRequest, "longer than"},
	}
	for _, k := range cases {
		st, msg := rawCall(t, c, k.req)
		if st != k.want || !strings.Contains(msg, k.msg) {
			t.Errorf("%s: status %v %q, want %v containing %q", k.name, st, msg, k.want, k.msg)
		}
	}

	// A request length word beyond the request area.
	c.mu.Lock()
	slot := c.r.slot(c.seq)
	req := mp(t, []any{2})
	copy(slot[slotReqOff:], req)
	binary.LittleEndian.PutUint32(slot[slotReqLen:], SlotReqCap+1)
	atomic.StoreUint32(c.r.reqSeq(), c.seq+1)
	futexWake(c.r.reqSeq())
	err := waitChange(c.r.respSeq(), c.r.clientWait(), c.seq, &c.spin, clientSlice, time.Now(), c.check)
	c.seq++
	n := binary.LittleEndian.Uint32(slot[slotRespLen:])
	st, msg, _, derr := decodeResponse(slot[slotRespOff : slotRespOff+n])
	c.mu.Unlock()
	if err != nil || derr != nil || st != StatusBadRequest || !strings.Contains(msg, "exceeds") {
		t.Errorf("oversized length word: %v %v %v %q", err, derr, st, msg)
	}

	// Both sessions still work, with correct answers.
	checkForward(t, c, id, w, b, 8, 16, 3, quantcfg.DTypeF32, 4)
	checkForward(t, other, lo.ID, wo, nil, 4, 4, 1, quantcfg.DTypeBF16, 5)
	st2, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st2.Session.Errors < uint64(len(cases)) {
		t.Errorf("errors counted %d, want at least %d", st2.Session.Errors, len(cases))
	}
}

func TestUploadErrors(t *testing.T) {
	h := newTestHandler()
	_, path := startServer(t, h, ServerOptions{})
	c := dial(t, path, Options{RegionBytes: MinRegionBytes})
	ds := c.DataSize()
	var br beginResult
	if err := c.control(OpBegin, &beginArgs{Name: "u", Format: "f32", Out: 8, In: 8, WeightsBytes: 256}, beginInto(&br)); err != nil {
		t.Fatal(err)
	}
	if br.WeightsBytes != 256 || br.Scales != 0 || br.Bias != 0 {
		t.Fatalf("begin result %+v", br)
	}
	w := randFloats(64, 1)
	copy(c.r.data(), floatBytes(w, quantcfg.DTypeF32))
	chunk := func(upload uint32, part string, at, off, n int) []byte {
		return mp(t, []any{4, map[string]any{"upload": upload, "part": part, "at": at, "off": off, "len": n}})
	}
	u := br.Upload
	steps := []struct {
		name string
		req  []byte
		want Status
		msg  string
	}{
		{"unknown upload", chunk(u+1, "weights", 0, 0, 64), StatusNotFound, "not in progress"},
		{"unknown part", chunk(u, "zeros", 0, 0, 64), StatusBadRequest, "zeros"},
		{"no bias in this layer", chunk(u, "bias", 0, 0, 4), StatusUpload, "runs past the end"},
		{"empty chunk", chunk(u, "weights", 0, 0, 0), StatusUpload, "empty"},
		{"gap", chunk(u, "weights", 64, 64, 64), StatusUpload, "gap"},
		{"past the end", chunk(u, "weights", 0, 0, 300), StatusUpload, "runs past the end"},
		{"data offset out of range", chunk(u, "weights", 0, ds-8, 64), StatusOutOfRange, "outside the data area"},
		{"first half", chunk(u, "weights", 0, 0, 128), StatusOK, ""},
		{"overlap", chunk(u, "weights", 64, 64, 128), StatusUpload, "overlaps"},
		{"commit truncated", mp(t, []any{5, map[string]any{"upload": u}}), StatusUpload, "128 of 256"},
		{"second half", chunk(u, "weights", 128, 128, 128), StatusOK, ""},
	}
	for _, s := range steps {
		st, msg := rawCall(t, c, s.req)
		if st != s.want || !strings.Contains(msg, s.msg) {
			t.Fatalf("%s: status %v %q, want %v containing %q", s.name, st, msg, s.want, s.msg)
		}
	}
	var lr layerResult
	if err := c.control(OpCommit, map[string]any{"upload": u}, layerInto(&lr)); err != nil {
		t.Fatal(err)
	}
	checkForward(t, c, LayerID(lr.ID), w, nil, 8, 8, 2, quantcfg.DTypeF32, 3)
	if st, msg := rawCall(t, c, mp(t, []any{5, map[string]any{"upload": u}})); st != StatusNotFound {
		t.Fatalf("second commit: %v %q", st, msg)
	}
	if st, _ := rawCall(t, c, mp(t, []any{6, map[string]any{"upload": 77}})); st != StatusNotFound {
		t.Fatalf("abort of an unknown upload: %v", st)
	}
	// Abort drops an upload and its bytes.
	if err := c.control(OpBegin, &beginArgs{Format: "f32", Out: 8, In: 8}, beginInto(&br)); err != nil {
		t.Fatal(err)
	}
	if err := c.control(OpAbort, map[string]any{"upload": br.Upload}, nil); err != nil {
		t.Fatal(err)
	}
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Session.Uploads != 0 || st.Session.Bytes != 256 {
		t.Fatalf("after abort: %+v", st.Session)
	}
}

func TestLimits(t *testing.T) {
	h := newTestHandler()
	lim := Limits{MaxRegion: 4 << 20, MaxBytes: 3 * 1024, MaxLayers: 2, MaxUploads: 1, MaxTokens: 4}
	_, path := startServer(t, h, ServerOptions{Limits: lim, MaxSessions: 2})
	_, err := Dial(path, Options{RegionBytes: 8 << 20})
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "limit is 4194304") {
		t.Fatalf("region over the limit: %v", err)
	}
	c := dial(t, path, Options{})
	if got := c.Info().Limits; got != lim {
		t.Fatalf("limits reported %+v, want %+v", got, lim)
	}
	if c.Info().Region != 4<<20 {
		t.Fatalf("default region %d with max 4 MiB", c.Info().Region)
	}
	l1, _, _ := registerF32(t, c, "a", 16, 16, false, 1) // 1 KiB
	registerF32(t, c, "b", 16, 16, false, 2)
	if _, err := c.Register(f32Spec("c", 4, 4, false), Weights{Data: make([]byte, 64)}); !errors.Is(err, ErrLimit) {
		t.Fatalf("third layer: %v", err)
	}
	if err := c.Free(l1.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(f32Spec("big", 36, 16, false), Weights{Data: make([]byte, 2304)}); !errors.Is(err, ErrLimit) {
		t.Fatalf("bytes over the limit: %v", err)
	}
	if err := c.control(OpBegin, &beginArgs{Format: "f32", Out: 2, In: 2}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.control(OpBegin, &beginArgs{Format: "f32", Out: 2, In: 2}, nil); !errors.Is(err, ErrLimit) {
		t.Fatalf("second upload in progress: %v", err)
	}
	c2 := dial(t, path, Options{})
	_ = c2
	if _, err := Dial(path, Options{}); !errors.Is(err, ErrLimit) {
		t.Fatalf("third session: %v", err)
	}
}

// rawHandshake sends one hello frame and returns the reply.
func rawHandshake(t *testing.T, path string, frame []byte) (HelloReply, error) {
	t.Helper()
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	conn := nc.(*net.UnixConn)
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if err := writeFrame(conn, frame, -1); err != nil {
		return HelloReply{}, err
	}
	body, fds, err := readFrame(conn, maxFrameSize)
	closeFDs(fds)
	if err != nil {
		return HelloReply{}, err
	}
	var rep HelloReply
	err = msgpack.Unmarshal(body, &rep)
	return rep, err
}

func TestHandshakeErrors(t *testing.T) {
	h := newTestHandler()
	_, path := startServer(t, h, ServerOptions{HandshakeTimeout: 300 * time.Millisecond})
	keep := dial(t, path, Options{Name: "bystander"})

	rep, err := rawHandshake(t, path, mp(t, map[string]any{"proto": 2, "name": "future", "newfield": []int{1}}))
	if err != nil || rep.Status != StatusVersion || !strings.Contains(rep.Msg, "speaks 1") {
		t.Fatalf("version 2: %+v %v", rep, err)
	}
	rep, err = rawHandshake(t, path, []byte{0xc1, 0x00})
	if err != nil || rep.Status != StatusBadRequest {
		t.Fatalf("garbage hello: %+v %v", rep, err)
	}
	rep, err = rawHandshake(t, path, mp(t, map[string]any{"name": "x"}))
	if err != nil || rep.Status != StatusBadRequest || !strings.Contains(rep.Msg, "proto") {
		t.Fatalf("hello without proto: %+v %v", rep, err)
	}
	rep, err = rawHandshake(t, path, mp(t, map[string]any{"proto": 1, "slots": 65}))
	if err != nil || rep.Status != StatusBadRequest {
		t.Fatalf("65 slots: %+v %v", rep, err)
	}

	// A frame longer than the limit: the daemon hangs up without reading it.
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var hdr [4]byte
	binary.LittleEndian.PutUint32(hdr[:], 1<<30)
	nc.Write(hdr[:])
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := nc.Read(make([]byte, 16)); n != 0 || err == nil {
		t.Fatalf("oversized frame: read %d, %v", n, err)
	}
	nc.Close()

	// A client that says nothing is dropped after the handshake timeout.
	nc, err = net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := nc.Read(make([]byte, 16)); n != 0 || err == nil || time.Since(start) > 3*time.Second {
		t.Fatalf("silent client: read %d, %v after %v", n, err, time.Since(start))
	}
	nc.Close()

	if err := keep.Ping(); err != nil {
		t.Fatalf("bystander: %v", err)
	}
	// Slots asked for are granted.
	c := dial(t, path, Options{Slots: 3})
	if c.Info().NSlots != 3 {
		t.Fatalf("slots %d", c.Info().NSlots)
	}
	for range 10 { // wraps the ring
		if err := c.Ping(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestProtocolViolationsCloseTheSession(t *testing.T) {
	h := newTestHandler()
	s, path := startServer(t, h, ServerOptions{})
	keep := dial(t, path, Options{Name: "bystander"})
	kl, kw, _ := registerF32(t, keep, "k", 4, 4, false, 1)

	// The ring sequence jumps past the slots.
	c := dial(t, path, Options{})
	registerF32(t, c, "x", 4, 4, false, 2)
	publish(c.r.reqSeq(), c.r.serverWait(), c.seq+100)
	waitFor(t, "the session to close", func() bool { return s.Sessions() == 1 })
	err := c.Ping()
	if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "jumped") {
		t.Fatalf("after a ring overrun: %v", err)
	}
	waitFor(t, "its layer to be freed", func() bool { return h.count() == 1 })

	// Bytes on the socket after the handshake.
	c = dial(t, path, Options{})
	c.conn.Write([]byte("hello again"))
	waitFor(t, "the session to close", func() bool { return s.Sessions() == 1 })
	if err := c.Ping(); !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "wrote to the socket") {
		t.Fatalf("after socket bytes: %v", err)
	}
	checkForward(t, keep, kl.ID, kw, nil, 4, 4, 1, quantcfg.DTypeF32, 1)
}

// fakeDaemon completes the handshake and then never answers, closing the socket after
// delay: a daemon killed in the middle of a call, as the client sees it.
func fakeDaemon(t *testing.T, delay time.Duration) string {
	t.Helper()
	h := newTestHandler()
	s, err := NewServer(h, ServerOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := dir + "/fake.sock"
	ln, err := s.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		body, fds, _ := readFrame(c, maxFrameSize)
		closeFDs(fds)
		hello, _ := decodeHello(body)
		g, _ := newGeometry(MinRegionBytes, 2)
		reg, err := paged.NewRegion("fake", MinRegionBytes)
		if err != nil {
			c.Close()
			return
		}
		x := newSession(s, 1, hello, c, reg, g)
		b, _ := msgpack.Marshal(x.helloReply())
		writeFrame(c, b, reg.FD())
		time.Sleep(delay)
		c.Close()
		reg.Close()
	}()
	return path
}

func TestDaemonDeathEndsBlockedCall(t *testing.T) {
	path := fakeDaemon(t, 300*time.Millisecond)
	c, err := Dial(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	err = c.Ping()
	d := time.Since(start)
	if !errors.Is(err, ErrPeerGone) || !errors.Is(err, ErrClosed) {
		t.Fatalf("call to a dead daemon: %v", err)
	}
	if d > 300*time.Millisecond+time.Second {
		t.Fatalf("noticed the death after %v", d)
	}
	if err := c.Ping(); !errors.Is(err, ErrClosed) {
		t.Fatalf("later call: %v", err)
	}
}
