package ipc

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"bitgo/paged"
	"bitgo/quantcfg"
)

// Options configure a client.
type Options struct {
	// Name appears in the daemon's logs ("vllm-worker-0").
	Name string
	// RegionBytes is the shared region wanted (0: the daemon's default). Activations,
	// outputs and upload chunks go through its data area.
	RegionBytes int64
	// Slots is the ring length wanted (0: the daemon's default).
	Slots int
	// DialTimeout bounds connecting and the handshake (default 5 s).
	DialTimeout time.Duration
	// CallTimeout bounds one call (0: wait as long as the daemon is alive). A call that
	// times out closes the client, whose ring state is then unknown.
	CallTimeout time.Duration
}

// Client is a connection to bitd. It is safe for concurrent use: calls are
// serialized (one in flight per client); open several clients for parallel calls.
type Client struct {
	mu      sync.Mutex
	conn    *net.UnixConn
	reg     *paged.Region
	r       region
	info    HelloReply
	opt     Options
	seq     uint32
	spin    spinner
	err     error // sticky: once set, every call returns it
	closing atomic.Bool

	req      []byte
	resp     [SlotRespCap]byte
	deadline time.Time
}

// Dial connects to the daemon's socket at path and maps the session's region.
func Dial(path string, opt Options) (*Client, error) {
	if opt.DialTimeout == 0 {
		opt.DialTimeout = 5 * time.Second
	}
	if opt.RegionBytes < 0 || opt.Slots < 0 || opt.Slots > MaxSlots {
		return nil, fmt.Errorf("ipc: Dial options: region %d, slots %d: want region >= 0 and slots in [0, %d]", opt.RegionBytes, opt.Slots, MaxSlots)
	}
	nc, err := net.DialTimeout("unix", path, opt.DialTimeout)
	if err != nil {
		return nil, fmt.Errorf("ipc: connecting to bitd at %s: %w (is `bitd serve` running, and is this the socket it serves?)", path, err)
	}
	conn := nc.(*net.UnixConn)
	c, err := handshake(conn, opt)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("ipc: handshake with bitd at %s: %w", path, err)
	}
	return c, nil
}

func handshake(conn *net.UnixConn, opt Options) (*Client, error) {
	_ = conn.SetDeadline(time.Now().Add(opt.DialTimeout))
	hello := map[string]any{"proto": ProtocolVersion, "name": opt.Name, "region": opt.RegionBytes, "slots": opt.Slots, "pid": os.Getpid()}
	b, err := msgpack.Marshal(hello)
	if err != nil {
		return nil, err
	}
	if err := writeFrame(conn, b, -1); err != nil {
		return nil, err
	}
	body, fds, err := readFrame(conn, maxFrameSize)
	if err != nil {
		closeFDs(fds)
		return nil, err
	}
	rep, err := decodeHelloReply(body)
	if err != nil {
		closeFDs(fds)
		return nil, err
	}
	if rep.Status != StatusOK {
		closeFDs(fds)
		return nil, &Error{Op: OpHello, Status: rep.Status, Msg: rep.Msg}
	}
	if len(fds) != 1 {
		closeFDs(fds)
		return nil, fmt.Errorf("%w: handshake reply carried %d descriptors, want 1", ErrProtocol, len(fds))
	}
	if rep.Region <= 0 || rep.Region > 1<<40 {
		closeFDs(fds)
		return nil, fmt.Errorf("%w: handshake reply: region size %d", ErrProtocol, rep.Region)
	}
	reg, err := paged.MapRegion(fds[0], rep.Region)
	if err != nil {
		return nil, err
	}
	c := &Client{conn: conn, reg: reg, info: rep, opt: opt,
		r:    region{b: reg.Bytes(), g: geometry{Size: rep.Region, NSlots: rep.NSlots, SlotsOff: HeaderSize, DataOff: rep.DataOff, DataSize: rep.DataSize}},
		spin: newSpinner(clientSpinFloor, clientSpinCeil)}
	if err := c.r.checkHeader(); err != nil {
		reg.Close()
		return nil, err
	}
	if atomic.LoadUint32(c.r.reqSeq()) != 0 || atomic.LoadUint32(c.r.respSeq()) != 0 {
		reg.Close()
		return nil, fmt.Errorf("%w: a fresh region has non-zero sequence words", ErrProtocol)
	}
	_ = conn.SetDeadline(time.Time{})
	return c, nil
}

// Info is the daemon's handshake reply: session id, region geometry, limits.
func (c *Client) Info() HelloReply { return c.info }

// DataSize is the size of the data area: the largest activation plus output (or
// upload chunk) one call can move.
func (c *Client) DataSize() int { return c.r.g.DataSize }

// Close ends the session (the daemon frees its layers). A call blocked in another
// goroutine returns ErrClosed within a wait slice.
func (c *Client) Close() error {
	c.closing.Store(true)
	futexWake(c.r.respSeq())
	c.mu.Lock()
	defer c.mu.Unlock()
	c.shut(fmt.Errorf("%w: Close was called", ErrClosed))
	return nil
}

// shut closes the connection and unmaps the region; later calls return err.
func (c *Client) shut(err error) {
	if c.err != nil && c.reg == nil {
		return
	}
	if c.err == nil {
		c.err = err
	}
	c.conn.Close()
	if c.reg != nil {
		c.reg.Close()
		c.reg = nil
	}
}

// check runs after every wait slice that saw no response.
func (c *Client) check() error {
	if c.closing.Load() {
		return fmt.Errorf("%w: Close was called during the call", ErrClosed)
	}
	if !c.deadline.IsZero() && time.Now().After(c.deadline) {
		return fmt.Errorf("%w: no answer within %v", ErrTimeout, c.opt.CallTimeout)
	}
	alive, data := peerState(c.conn)
	if data {
		return c.goodbye()
	}
	if !alive || atomic.LoadUint32(c.r.state()) == StateClosed {
		return fmt.Errorf("%w: %w: bitd (pid %d) closed the connection or died", ErrClosed, ErrPeerGone, c.info.ServerPID)
	}
	return nil
}

// goodbye reads the daemon's last frame, which says why it closed the session.
func (c *Client) goodbye() error {
	_ = c.conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	body, fds, err := readFrame(c.conn, maxFrameSize)
	closeFDs(fds)
	var rep HelloReply
	if err == nil {
		rep, err = decodeHelloReply(body)
	}
	if err != nil || rep.Status == StatusOK {
		return fmt.Errorf("%w: %w: bitd (pid %d) sent an unexpected message and closed the session (%v)", ErrClosed, ErrProtocol, c.info.ServerPID, err)
	}
	return fmt.Errorf("%w: %w", ErrClosed, &Error{Op: OpHello, Status: rep.Status, Msg: rep.Msg})
}

// call runs one request (already encoded) and returns the status, message and the raw
// result. Transport failures close the client.
func (c *Client) call(req []byte) (Status, string, []byte, error) {
	if c.err != nil {
		return 0, "", nil, c.err
	}
	if len(req) > SlotReqCap {
		return 0, "", nil, fmt.Errorf("%w: request of %d bytes exceeds the slot's %d", ErrBadRequest, len(req), SlotReqCap)
	}
	seq := c.seq
	slot := c.r.slot(seq)
	copy(slot[slotReqOff:], req)
	binary.LittleEndian.PutUint32(slot[slotReqLen:], uint32(len(req)))
	start := time.Now()
	if c.opt.CallTimeout > 0 {
		c.deadline = start.Add(c.opt.CallTimeout)
	}
	publish(c.r.reqSeq(), c.r.serverWait(), seq+1)
	if err := waitChange(c.r.respSeq(), c.r.clientWait(), seq, &c.spin, clientSlice, start, c.check); err != nil {
		c.shut(err)
		return 0, "", nil, err
	}
	if got := atomic.LoadUint32(c.r.respSeq()); got != seq+1 {
		err := fmt.Errorf("%w: response sequence %d after request %d", ErrProtocol, got, seq+1)
		c.shut(err)
		return 0, "", nil, err
	}
	c.seq = seq + 1
	n := binary.LittleEndian.Uint32(slot[slotRespLen:])
	if n > SlotRespCap {
		err := fmt.Errorf("%w: response length %d exceeds the slot's %d", ErrProtocol, n, SlotRespCap)
		c.shut(err)
		return 0, "", nil, err
	}
	resp := c.resp[:n]
	copy(resp, slot[slotRespOff:])
	st, msg, raw, err := decodeResponse(resp)
	if err != nil {
		err = fmt.Errorf("%w: response: %v", ErrProtocol, err)
		c.shut(err)
		return 0, "", nil, err
	}
	return st, msg, raw, nil
}

// control runs a control op with optional arguments and hands the raw result to
// decode (when not nil) before the next call can reuse the buffer.
func (c *Client) control(op Op, args any, decode func([]byte) error) error {
	var req []any
	if args == nil {
		req = []any{uint8(op)}
	} else {
		req = []any{uint8(op), args}
	}
	b, err := msgpack.Marshal(req)
	if err != nil {
		return fmt.Errorf("ipc: encoding %s: %w", op, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st, msg, raw, err := c.call(b)
	if err != nil {
		return err
	}
	if st != StatusOK {
		return &Error{Op: op, Status: st, Msg: msg}
	}
	if decode != nil {
		return decode(raw)
	}
	return nil
}

// Ping checks the daemon answers.
func (c *Client) Ping() error { return c.control(OpPing, nil, nil) }

// Stats returns the session's and the daemon's figures.
func (c *Client) Stats() (Stats, error) {
	var s Stats
	err := c.control(OpStats, nil, func(b []byte) (err error) { s, err = decodeStats(b); return err })
	return s, err
}

// Lookup finds a layer the daemon loaded from a pack file.
func (c *Client) Lookup(name string) (LayerInfo, error) {
	var r layerResult
	if err := c.control(OpLookup, map[string]any{"name": name}, layerInto(&r)); err != nil {
		return LayerInfo{}, err
	}
	return r.info()
}

// Free drops a layer this session registered.
func (c *Client) Free(id LayerID) error {
	return c.control(OpFree, map[string]any{"id": uint64(id)}, nil)
}

func (r layerResult) info() (LayerInfo, error) {
	li := LayerInfo{ID: LayerID(r.ID), Bytes: r.Bytes, Shared: r.Shared}
	f, err := quantcfg.ParseFormat(r.Format)
	if err != nil {
		return li, fmt.Errorf("%w: layer result: %v", ErrProtocol, err)
	}
	act, err := quantcfg.ParseActMode(r.Act)
	if err != nil {
		return li, fmt.Errorf("%w: layer result: %v", ErrProtocol, err)
	}
	scale, err := quantcfg.ParseScaleGran(r.Scale)
	if err != nil {
		return li, fmt.Errorf("%w: layer result: %v", ErrProtocol, err)
	}
	li.Spec = quantcfg.LayerSpec{Name: r.Name, Format: f, Out: r.Out, In: r.In, Act: act, Scale: scale, Bias: r.Bias}
	return li, nil
}

// Weights is what Register uploads.
type Weights struct {
	// Data: logical weights (see Upload.Weights for the element type per format), or
	// with Packed, a blob in the kernels layout of revision Layout (kernels.LayoutRevision
	// for blobs this build packs; a daemon refuses a packed tl1 or tl2 blob without it).
	Data   []byte
	Packed bool
	Layout string
	// Scales: spec.NumScales() values; Bias: spec.Out values when spec.Bias.
	Scales []float32
	Bias   []float32
}

type beginArgs struct {
	Name         string `msgpack:"name,omitempty"`
	Format       string `msgpack:"format"`
	Out          int    `msgpack:"out"`
	In           int    `msgpack:"in"`
	Act          string `msgpack:"act,omitempty"`
	Scale        string `msgpack:"scale,omitempty"`
	Codebook     []int  `msgpack:"codebook,omitempty"`
	Bias         bool   `msgpack:"bias,omitempty"`
	Packed       bool   `msgpack:"packed,omitempty"`
	Layout       string `msgpack:"layout,omitempty"`
	WeightsBytes int64  `msgpack:"weights_bytes"`
}

// Register uploads a layer in chunks through the data area and returns it. The layer
// belongs to this client's session: it is freed by Free or when the client closes.
func (c *Client) Register(spec quantcfg.LayerSpec, w Weights) (LayerInfo, error) {
	a := beginArgs{Name: spec.Name, Format: string(spec.Format), Out: spec.Out, In: spec.In,
		Act: spec.Act.String(), Scale: spec.Scale.String(), Bias: spec.Bias, Packed: w.Packed, Layout: w.Layout, WeightsBytes: int64(len(w.Data))}
	if spec.Format == quantcfg.Int2 && spec.Codebook != (quantcfg.Codebook{}) {
		for _, v := range spec.Codebook {
			a.Codebook = append(a.Codebook, int(v))
		}
	}
	var br beginResult
	if err := c.control(OpBegin, &a, beginInto(&br)); err != nil {
		return LayerInfo{}, err
	}
	li, err := c.upload(br, spec, w)
	if err != nil {
		if ab := c.control(OpAbort, map[string]any{"upload": br.Upload}, nil); ab != nil && c.err == nil {
			return LayerInfo{}, fmt.Errorf("%w (and aborting the upload failed: %v)", err, ab)
		}
		return LayerInfo{}, err
	}
	return li, nil
}

func (c *Client) upload(br beginResult, spec quantcfg.LayerSpec, w Weights) (LayerInfo, error) {
	if len(w.Scales) != br.Scales {
		return LayerInfo{}, fmt.Errorf("%w: layer %s: %d scales given, the layer has %d", ErrInvalid, spec.Name, len(w.Scales), br.Scales)
	}
	if len(w.Bias) != br.Bias {
		return LayerInfo{}, fmt.Errorf("%w: layer %s: %d bias values given, the layer has %d", ErrInvalid, spec.Name, len(w.Bias), br.Bias)
	}
	parts := [numParts][]byte{w.Data, f32bytes(w.Scales), f32bytes(w.Bias)}
	for p, b := range parts {
		for at := 0; at < len(b); {
			n := min(len(b)-at, c.DataSize())
			if err := c.chunk(br.Upload, p, at, b[at:at+n]); err != nil {
				return LayerInfo{}, err
			}
			at += n
		}
	}
	var r layerResult
	if err := c.control(OpCommit, map[string]any{"upload": br.Upload}, layerInto(&r)); err != nil {
		return LayerInfo{}, err
	}
	return r.info()
}

func (c *Client) chunk(upload uint32, part, at int, b []byte) error {
	req, err := msgpack.Marshal([]any{uint8(OpUpload), map[string]any{"upload": upload, "part": partNames[part], "at": at, "off": 0, "len": len(b)}})
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	copy(c.r.data(), b)
	st, msg, _, err := c.call(req)
	if err != nil {
		return err
	}
	if st != StatusOK {
		return &Error{Op: OpUpload, Status: st, Msg: msg}
	}
	return nil
}

// Forward runs layer id on n tokens: x is [n][In] and out is [n][Out] values of dtype
// dt, row-major, little-endian.
func (c *Client) Forward(id LayerID, x []byte, dt quantcfg.DType, n int, out []byte) error {
	_, err := c.ForwardTimed(id, x, dt, n, out)
	return err
}

// ForwardTimed is Forward that also returns the time the daemon's handler took.
func (c *Client) ForwardTimed(id LayerID, x []byte, dt quantcfg.DType, n int, out []byte) (time.Duration, error) {
	code := DTypeCode(dt)
	if code == 0 {
		return 0, fmt.Errorf("%w: dtype %q: allowed f32, bf16", ErrInvalid, dt)
	}
	if n < 1 || n > 1<<31-1 {
		return 0, fmt.Errorf("%w: n = %d tokens", ErrShape, n)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	outOff := alignUp(len(x), 64)
	if outOff+len(out) > c.r.g.DataSize {
		return 0, fmt.Errorf("%w: x (%d bytes) and out (%d bytes) do not fit the data area of %d bytes; dial with a larger RegionBytes or split the call", ErrLimit, len(x), len(out), c.r.g.DataSize)
	}
	d := c.r.data()
	copy(d, x)
	c.req = AppendForward(c.req[:0], id, uint32(n), code, 0, uint64(len(x)), uint64(outOff), uint64(len(out)))
	st, msg, raw, err := c.call(c.req)
	if err != nil {
		return 0, err
	}
	if st != StatusOK {
		return 0, &Error{Op: OpForward, Status: st, Msg: msg}
	}
	copy(out, d[outOff:outOff+len(out)])
	ns, err := forwardOKResult(raw)
	if err != nil {
		return 0, fmt.Errorf("%w: forward result: %v", ErrProtocol, err)
	}
	return time.Duration(ns), nil
}

func layerInto(p *layerResult) func([]byte) error {
	return func(b []byte) (err error) { *p, err = decodeLayerResult(b); return err }
}

func beginInto(p *beginResult) func([]byte) error {
	return func(b []byte) (err error) { *p, err = decodeBeginResult(b); return err }
}
