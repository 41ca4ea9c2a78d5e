package ipc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
	"golang.org/x/sys/unix"

	"bitgo/paged"
	"bitgo/quantcfg"
)

// layerEntry is a layer this session may use: its own (owned) or a looked-up shared one.
type layerEntry struct {
	info  LayerInfo
	owned bool
}

// session is one client: its region, its layers and uploads, served by one goroutine
// locked to an OS thread. Only that goroutine touches the fields below mu-free; stop and
// inCall are read by the server.
type session struct {
	srv    *Server
	h      Handler
	id     uint32
	client string
	pid    uint64
	conn   *net.UnixConn
	reg    *paged.Region
	r      region
	limits Limits

	layers     map[LayerID]*layerEntry
	owned      int
	bytes      int64 // owned layers' resident bytes + uploads' staging
	uploads    map[uint32]*upload
	nextUpload uint32
	calls      atomic.Uint64
	errs       atomic.Uint64

	enc    *respEncoder
	reqBuf [SlotReqCap]byte
	fast   []byte
	spin   spinner
	// the last call's event, recorded after its answer is published (the Observer's
	// metrics are not on the caller's critical path)
	ev     CallEvent
	evDone bool

	inCall   atomic.Bool
	stopOnce sync.Once
	stopped  atomic.Bool
	stopErr  error
}

func newSession(s *Server, id uint32, h helloReq, c *net.UnixConn, reg *paged.Region, g geometry) *session {
	x := &session{srv: s, h: s.h, id: id, client: h.name, pid: h.pid, conn: c, reg: reg,
		r: region{b: reg.Bytes(), g: g}, limits: s.opt.Limits,
		layers: map[LayerID]*layerEntry{}, uploads: map[uint32]*upload{},
		enc: newRespEncoder(), fast: make([]byte, 0, 64),
		spin: newSpinner(serverSpinFloor, serverSpinCeil)}
	x.r.writeHeader(uint32(s.pid), id)
	return x
}

func (x *session) helloReply() HelloReply {
	return HelloReply{Proto: ProtocolVersion, Status: StatusOK, Session: x.id, Server: x.srv.opt.Name,
		ServerPID: x.srv.pid, Region: x.r.g.Size, NSlots: x.r.g.NSlots, SlotSize: SlotSize,
		DataOff: x.r.g.DataOff, DataSize: x.r.g.DataSize, Limits: x.limits}
}

func (x *session) owner() string { return fmt.Sprintf("session %d (%s)", x.id, x.client) }

// stopWith asks the session's thread to end (it wakes it if it sleeps).
func (x *session) stopWith(err error) {
	x.stopOnce.Do(func() {
		x.stopErr = err
		x.stopped.Store(true)
		futexWake(x.r.reqSeq())
	})
}

var errClientClosed = errors.New("the client closed the connection")

// check runs after every futex slice: is the client still there, and should we stop?
func (x *session) check() error {
	if x.stopped.Load() {
		return x.stopErr
	}
	alive, data := peerState(x.conn)
	if data {
		return fmt.Errorf("%w: the client wrote to the socket after the handshake", ErrProtocol)
	}
	if !alive {
		return errClientClosed
	}
	return nil
}

// watch blocks on the socket (in the netpoller, at no cost) and stops the session as
// soon as the client closes it, dies, or breaks the protocol by writing to it. It
// returns when cleanup closes the socket.
func (x *session) watch() {
	var b [1]byte
	n, _ := x.conn.Read(b[:])
	if n > 0 {
		x.stopWith(fmt.Errorf("%w: the client wrote to the socket after the handshake", ErrProtocol))
		return
	}
	x.stopWith(errClientClosed)
}

// run serves requests until the client goes, breaks the protocol, or the server stops.
func (x *session) run() {
	if o := x.srv.opt.Observer; o != nil {
		o.Session(+1, 0, 0)
	}
	go x.watch()
	err := x.serve()
	x.cleanup(err, true)
}

func (x *session) serve() error {
	var done uint32
	nslots := uint32(x.r.g.NSlots)
	for {
		if x.stopped.Load() {
			return x.stopErr
		}
		req := atomic.LoadUint32(x.r.reqSeq())
		if req == done {
			if err := waitChange(x.r.reqSeq(), x.r.serverWait(), done, &x.spin, serverSlice, time.Now(), x.check); err != nil {
				return err
			}
			continue
		}
		if req-done > nslots {
			return fmt.Errorf("%w: request sequence jumped from %d to %d, more than the %d slots", ErrProtocol, done, req, nslots)
		}
		for done != req && !x.stopped.Load() {
			x.handle(done)
			done++
			publish(x.r.respSeq(), x.r.clientWait(), done)
			if x.evDone {
				x.evDone = false
				x.srv.opt.Observer.Call(x.ev)
			}
		}
	}
}

// handle answers the request in the slot of sequence number seq.
func (x *session) handle(seq uint32) {
	slot := x.r.slot(seq)
	n := binary.LittleEndian.Uint32(slot[slotReqLen:])
	var resp []byte
	if n > SlotReqCap {
		resp = x.enc.encode(StatusBadRequest, fmt.Sprintf("request length word %d exceeds the request area of %d bytes", n, SlotReqCap), nil)
		x.errs.Add(1)
	} else {
		// Copy the request out of shared memory first: the client could change it
		// between our checks and our use.
		buf := x.reqBuf[:n]
		copy(buf, slot[slotReqOff:slotReqOff+n])
		resp = x.dispatch(buf)
	}
	copy(slot[slotRespOff:slotRespOff+SlotRespCap], resp)
	binary.LittleEndian.PutUint32(slot[slotRespLen:], uint32(len(resp)))
}

func (x *session) dispatch(buf []byte) []byte {
	x.inCall.Store(true)
	defer x.inCall.Store(false)
	x.calls.Add(1)
	start := time.Now()
	ev := CallEvent{}
	if x.srv.draining.Load() {
		// Only this thread writes the region (Shutdown must not: the region is unmapped
		// when the session ends, which can happen at any moment).
		atomic.StoreUint32(x.r.state(), StateDraining)
		ev.Status = StatusShuttingDown
		x.errs.Add(1)
		return x.fail(ev, start, fmt.Errorf("%w: the daemon is draining; no new calls", ErrShuttingDown))
	}
	req, err := decodeRequest(buf)
	ev.Op = req.op
	if err != nil {
		return x.fail(ev, start, asBadRequest(err))
	}
	if req.op == OpForward {
		return x.forward(req.fwd, ev, start)
	}
	var result any
	switch req.op {
	case OpHello:
		h := x.helloReply()
		result = &h
	case OpPing:
	case OpStats:
		result = x.stats()
	case OpBegin:
		result, err = x.begin(req.begin)
	case OpUpload:
		ev.Bytes = int64(req.chunk.ln)
		err = x.chunk(req.chunk)
	case OpCommit:
		var li LayerInfo
		li, err = x.commit(uint32(req.upload), &ev)
		result = toLayerResult(li)
	case OpAbort:
		err = x.abort(uint32(req.upload))
	case OpLookup:
		var li LayerInfo
		li, err = x.lookup(req.name)
		ev.Format = li.Spec.Format
		result = toLayerResult(li)
	case OpFree:
		err = x.free(req.id, &ev)
	}
	if err != nil {
		return x.fail(ev, start, err)
	}
	ev.Duration = time.Since(start)
	x.observe(ev)
	return x.enc.encode(StatusOK, "", result)
}

func (x *session) fail(ev CallEvent, start time.Time, err error) []byte {
	ev.Status = StatusOf(err)
	ev.Duration = time.Since(start)
	x.errs.Add(1)
	x.observe(ev)
	return x.enc.encode(ev.Status, err.Error(), nil)
}

// observe keeps the event of the call being answered for the Observer, which serve calls
// once the answer is published.
func (x *session) observe(ev CallEvent) {
	if x.srv.opt.Observer != nil {
		x.ev, x.evDone = ev, true
	}
}

// checkRange checks that [off, off+n) lies in the data area.
func (x *session) checkRange(what string, off, n uint64) error {
	size := uint64(x.r.g.DataSize)
	if off > size || n > size-off {
		return fmt.Errorf("%w: %s [%d, %d) is outside the data area of %d bytes", ErrOutOfRange, what, off, off+n, size)
	}
	return nil
}

func (x *session) forward(f forwardReq, ev CallEvent, start time.Time) []byte {
	ev.DType, ev.Tokens = f.dt, f.n
	e, ok := x.layers[f.id]
	if !ok {
		return x.fail(ev, start, fmt.Errorf("%w: layer id %d is not registered or looked up in this session", ErrNotFound, f.id))
	}
	s := e.info.Spec
	ev.Format, ev.Bytes = s.Format, e.info.Bytes
	if f.n < 1 || f.n > x.limits.MaxTokens {
		return x.fail(ev, start, fmt.Errorf("%w: layer %s: n = %d tokens: must be in [1, %d]", ErrShape, s.Name, f.n, x.limits.MaxTokens))
	}
	es := uint64(f.dt.Size())
	wantX, wantOut := uint64(f.n)*uint64(s.In)*es, uint64(f.n)*uint64(s.Out)*es
	if f.xLen != wantX {
		return x.fail(ev, start, fmt.Errorf("%w: layer %s: x_len %d bytes, want n %d x in %d x %d (%s) = %d", ErrShape, s.Name, f.xLen, f.n, s.In, es, f.dt, wantX))
	}
	if f.outLen != wantOut {
		return x.fail(ev, start, fmt.Errorf("%w: layer %s: out_len %d bytes, want n %d x out %d x %d (%s) = %d", ErrShape, s.Name, f.outLen, f.n, s.Out, es, f.dt, wantOut))
	}
	if err := x.checkRange("x", f.xOff, f.xLen); err != nil {
		return x.fail(ev, start, err)
	}
	if err := x.checkRange("out", f.outOff, f.outLen); err != nil {
		return x.fail(ev, start, err)
	}
	if f.xOff%ForwardAlign != 0 || f.outOff%ForwardAlign != 0 {
		return x.fail(ev, start, fmt.Errorf("%w: x_off %d and out_off %d must be multiples of %d", ErrOutOfRange, f.xOff, f.outOff, ForwardAlign))
	}
	if f.xOff < f.outOff+f.outLen && f.outOff < f.xOff+f.xLen {
		return x.fail(ev, start, fmt.Errorf("%w: x [%d, %d) and out [%d, %d) overlap", ErrOutOfRange, f.xOff, f.xOff+f.xLen, f.outOff, f.outOff+f.outLen))
	}
	d := x.r.data()
	t0 := time.Now()
	err := x.h.Forward(f.id, d[f.xOff:f.xOff+f.xLen], f.dt, f.n, d[f.outOff:f.outOff+f.outLen])
	ev.Handler = time.Since(t0)
	if err != nil {
		return x.fail(ev, start, fmt.Errorf("layer %s: %w", s.Name, err))
	}
	ev.Duration = time.Since(start)
	x.observe(ev)
	x.fast = appendForwardOK(x.fast[:0], uint64(ev.Handler))
	return x.fast
}

func (x *session) stats() *Stats {
	st := &Stats{Session: SessionStats{ID: x.id, Layers: x.owned, Shared: len(x.layers) - x.owned, Bytes: x.bytes,
		Uploads: len(x.uploads), Calls: x.calls.Load(), Errors: x.errs.Load()}}
	st.Sessions = x.srv.Sessions()
	st.Engine = x.h.Stats()
	return st
}

// Uploads.

// upload is a layer being uploaded: staging buffers filled strictly in order.
type upload struct {
	spec   quantcfg.LayerSpec
	packed bool
	mapped []byte // weights staging, from mmap
	scales []float32
	bias   []float32
	parts  [numParts][]byte
	got    [numParts]uint64
	bytes  int64
}

func (u *upload) release() {
	if u.mapped != nil {
		_ = unix.Munmap(u.mapped)
		u.mapped = nil
	}
}

func f32bytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
}

// logicalElem is the byte size of one logical weight of a format.
func logicalElem(f quantcfg.Format) int64 {
	switch f {
	case quantcfg.F32:
		return 4
	case quantcfg.BF16:
		return 2
	}
	return 1
}

func (x *session) begin(b beginReq) (*beginResult, error) {
	s := b.spec
	if len(x.uploads) >= x.limits.MaxUploads {
		return nil, fmt.Errorf("%w: %d uploads are in progress, the limit; commit or abort one", ErrLimit, len(x.uploads))
	}
	if x.owned+len(x.uploads) >= x.limits.MaxLayers {
		return nil, fmt.Errorf("%w: this session has %d layers (and %d uploads); the limit is %d", ErrLimit, x.owned, len(x.uploads), x.limits.MaxLayers)
	}
	var wb int64
	if b.packed {
		wb = b.weightsBytes
		if pl, ok := x.h.(PackedLayouts); ok {
			if err := pl.PackedLayout(b.layout, s); err != nil {
				return nil, fmt.Errorf("%w: layer %s: %v", ErrInvalid, s.Name, err)
			}
		}
		if ps, ok := x.h.(PackedSizer); ok {
			want, err := ps.PackedSize(s)
			if err != nil {
				return nil, fmt.Errorf("layer %s: %w", s.Name, err)
			}
			if want != wb {
				return nil, fmt.Errorf("%w: layer %s: packed %s blob of %d x %d is %d bytes, weights_bytes says %d", ErrInvalid, s.Name, s.Format, s.Out, s.In, want, wb)
			}
		}
		if wb < 1 {
			return nil, fmt.Errorf("%w: layer %s: weights_bytes %d: a packed blob has at least one byte", ErrInvalid, s.Name, wb)
		}
	} else {
		wb = int64(s.Out) * int64(s.In) * logicalElem(s.Format)
		if b.weightsBytes != 0 && b.weightsBytes != wb {
			return nil, fmt.Errorf("%w: layer %s: logical %s weights of %d x %d are %d bytes, weights_bytes says %d", ErrInvalid, s.Name, s.Format, s.Out, s.In, wb, b.weightsBytes)
		}
	}
	ns, nb := s.NumScales(), 0
	if s.Bias {
		nb = s.Out
	}
	total := wb + 4*int64(ns) + 4*int64(nb)
	if x.bytes+total > x.limits.MaxBytes {
		return nil, fmt.Errorf("%w: layer %s needs %d bytes; this session holds %d of its %d", ErrLimit, s.Name, total, x.bytes, x.limits.MaxBytes)
	}
	m, err := unix.Mmap(-1, 0, int(wb), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("%w: layer %s: staging %d bytes: %w", ErrLimit, s.Name, wb, os.NewSyscallError("mmap", err))
	}
	u := &upload{spec: s, packed: b.packed, mapped: m, scales: make([]float32, ns), bytes: total}
	if nb > 0 {
		u.bias = make([]float32, nb)
	}
	u.parts = [numParts][]byte{m, f32bytes(u.scales), f32bytes(u.bias)}
	x.nextUpload++
	if x.nextUpload == 0 {
		x.nextUpload = 1
	}
	x.uploads[x.nextUpload] = u
	x.bytes += total
	return &beginResult{Upload: x.nextUpload, WeightsBytes: wb, Scales: ns, Bias: nb}, nil
}

func (x *session) chunk(c chunkReq) error {
	u, ok := x.uploads[uint32(c.upload)]
	if !ok {
		return fmt.Errorf("%w: upload %d is not in progress in this session", ErrNotFound, c.upload)
	}
	name := partNames[c.part]
	dst := u.parts[c.part]
	size, got := uint64(len(dst)), u.got[c.part]
	switch {
	case c.ln == 0:
		return fmt.Errorf("%w: upload %d: empty %s chunk", ErrUpload, c.upload, name)
	case c.at < got:
		return fmt.Errorf("%w: upload %d: %s chunk at byte %d overlaps the bytes already received [0, %d); send chunks in order", ErrUpload, c.upload, name, c.at, got)
	case c.at > got:
		return fmt.Errorf("%w: upload %d: %s chunk at byte %d leaves a gap: bytes [%d, %d) were not sent; send chunks in order", ErrUpload, c.upload, name, c.at, got, c.at)
	case c.ln > size-c.at:
		return fmt.Errorf("%w: upload %d: %s chunk [%d, %d) runs past the end of the %d bytes of %s", ErrUpload, c.upload, name, c.at, c.at+c.ln, size, name)
	}
	if err := x.checkRange(name+" chunk", c.off, c.ln); err != nil {
		return err
	}
	copy(dst[c.at:c.at+c.ln], x.r.data()[c.off:c.off+c.ln])
	u.got[c.part] += c.ln
	return nil
}

func (x *session) dropUpload(id uint32, u *upload) {
	u.release()
	x.bytes -= u.bytes
	delete(x.uploads, id)
}

func (x *session) commit(id uint32, ev *CallEvent) (LayerInfo, error) {
	u, ok := x.uploads[id]
	if !ok {
		return LayerInfo{}, fmt.Errorf("%w: upload %d is not in progress in this session", ErrNotFound, id)
	}
	ev.Format = u.spec.Format
	for p := range numParts {
		if want := uint64(len(u.parts[p])); u.got[p] != want {
			return LayerInfo{}, fmt.Errorf("%w: upload %d (layer %s): %s truncated: %d of %d bytes received; send the rest, then commit", ErrUpload, id, u.spec.Name, partNames[p], u.got[p], want)
		}
	}
	t0 := time.Now()
	li, err := x.h.Register(Upload{Spec: u.spec, Packed: u.packed, Weights: u.mapped, Scales: u.scales, Bias: u.bias, Session: x.id, Owner: x.owner()})
	ev.Handler = time.Since(t0)
	x.dropUpload(id, u)
	if err != nil {
		return LayerInfo{}, fmt.Errorf("layer %s (upload %d, now dropped): %w", u.spec.Name, id, err)
	}
	li.Shared = false
	if li.Bytes <= 0 {
		li.Bytes = u.bytes
	}
	if li.Spec.Format == "" {
		li.Spec = u.spec
	}
	if x.bytes+li.Bytes > x.limits.MaxBytes {
		x.freeHandler(li.ID)
		return LayerInfo{}, fmt.Errorf("%w: layer %s takes %d bytes resident; this session holds %d of its %d", ErrLimit, u.spec.Name, li.Bytes, x.bytes, x.limits.MaxBytes)
	}
	s := x.srv
	s.mu.Lock()
	if other, taken := s.owned[li.ID]; taken || x.layers[li.ID] != nil {
		s.mu.Unlock()
		return LayerInfo{}, fmt.Errorf("%w: the handler returned layer id %d, which is already in use (session %d)", ErrInternal, li.ID, other)
	}
	s.owned[li.ID] = x.id
	s.mu.Unlock()
	x.layers[li.ID] = &layerEntry{info: li, owned: true}
	x.owned++
	x.bytes += li.Bytes
	return li, nil
}

func (x *session) abort(id uint32) error {
	u, ok := x.uploads[id]
	if !ok {
		return fmt.Errorf("%w: upload %d is not in progress in this session", ErrNotFound, id)
	}
	x.dropUpload(id, u)
	return nil
}

func (x *session) lookup(name string) (LayerInfo, error) {
	li, err := x.h.Lookup(name)
	if err != nil {
		return LayerInfo{}, fmt.Errorf("layer %q: %w", name, err)
	}
	x.srv.mu.Lock()
	_, private := x.srv.owned[li.ID]
	x.srv.mu.Unlock()
	if private || li.ID == 0 || !li.Shared {
		return LayerInfo{}, fmt.Errorf("%w: no shared layer named %q", ErrNotFound, name)
	}
	if e := x.layers[li.ID]; e == nil {
		x.layers[li.ID] = &layerEntry{info: li}
	}
	return li, nil
}

func (x *session) freeHandler(id LayerID) {
	if err := x.h.Free(id); err != nil {
		x.srv.log.Error("ipc: freeing a layer failed", "session", x.id, "layer", id, "err", err)
	}
}

func (x *session) free(id LayerID, ev *CallEvent) error {
	e, ok := x.layers[id]
	if !ok {
		return fmt.Errorf("%w: layer id %d is not registered in this session", ErrNotFound, id)
	}
	ev.Format = e.info.Spec.Format
	if !e.owned {
		return fmt.Errorf("%w: layer %s (id %d) is shared (loaded by the daemon); a session cannot free it", ErrDenied, e.info.Spec.Name, id)
	}
	if err := x.h.Free(id); err != nil {
		return fmt.Errorf("layer %s (id %d): %w", e.info.Spec.Name, id, err)
	}
	x.forget(id, e)
	return nil
}

func (x *session) forget(id LayerID, e *layerEntry) {
	delete(x.layers, id)
	x.owned--
	x.bytes -= e.info.Bytes
	x.srv.mu.Lock()
	delete(x.srv.owned, id)
	x.srv.mu.Unlock()
}

// cleanup ends the session: it says why on the socket (best effort), drops uploads,
// frees the layers the session owned, unmaps the region and closes the socket.
func (x *session) cleanup(reason error, started bool) {
	atomic.StoreUint32(x.r.state(), StateClosed)
	layers, bytes := x.owned, x.bytes
	if reason != nil && !errors.Is(reason, errClientClosed) {
		st := StatusOf(reason)
		if errors.Is(reason, ErrProtocol) {
			st = StatusBadRequest
		}
		b, _ := msgpack.Marshal(&HelloReply{Proto: ProtocolVersion, Status: st, Msg: cutMsg("session closed: " + reason.Error()), Session: x.id, Server: x.srv.opt.Name, ServerPID: x.srv.pid})
		_ = x.conn.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_ = writeFrame(x.conn, b, -1)
	}
	for id, u := range x.uploads {
		x.dropUpload(id, u)
	}
	for id, e := range x.layers {
		if e.owned {
			x.freeHandler(id)
			x.forget(id, e)
		}
	}
	x.srv.mu.Lock()
	delete(x.srv.sessions, x.id)
	x.srv.mu.Unlock()
	if err := x.reg.Close(); err != nil {
		x.srv.log.Error("ipc: closing a session region", "session", x.id, "err", err)
	}
	x.conn.Close()
	if started {
		if o := x.srv.opt.Observer; o != nil {
			o.Session(-1, layers, bytes)
		}
		lvl := "ipc: session ended"
		if reason != nil && !errors.Is(reason, errClientClosed) && !errors.Is(reason, ErrShuttingDown) {
			x.srv.log.Warn(lvl, "session", x.id, "client", x.client, "calls", x.calls.Load(), "errors", x.errs.Load(), "freed_layers", layers, "reason", reason)
			return
		}
		x.srv.log.Info(lvl, "session", x.id, "client", x.client, "calls", x.calls.Load(), "errors", x.errs.Load(), "freed_layers", layers, "reason", reason)
	}
}
