package ipc

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"

	"bitgo/internal/mpread"
	"bitgo/quantcfg"
)

// Field limits of control messages.
const (
	MaxNameLen   = 512 // layer and client names, bytes
	maxKeyLen    = 32
	maxSpellLen  = 64 // format, act, scale, part spellings
	maxFrameSize = 64 << 10
	maxMsgLen    = SlotRespCap - 64 // error messages are cut to fit a response
)

// forwardReq is a decoded forward request.
type forwardReq struct {
	id             LayerID
	n              int
	dt             quantcfg.DType
	xOff, xLen     uint64
	outOff, outLen uint64
}

// ForwardHeaderLen is the size of the fixed-shape forward request (PROTOCOL.md,
// "forward"). The fields sit at these byte offsets of the request area, big-endian as
// msgpack encodes them: id u64 at 3, n u32 at 12, dtype code at 16, x_off u64 at 18,
// x_len u64 at 27, out_off u64 at 36, out_len u64 at 45.
const ForwardHeaderLen = 53

// AppendForward appends the fixed-shape forward request: a msgpack array of 8 with
// fixed-width integers, so a client can keep one per layer and patch n and the
// offsets in place.
func AppendForward(b []byte, id LayerID, n uint32, dtCode byte, xOff, xLen, outOff, outLen uint64) []byte {
	b = append(b, 0x98, byte(OpForward))
	b = appendU64(b, uint64(id))
	b = appendU32(b, n)
	b = append(b, dtCode)
	b = appendU64(b, xOff)
	b = appendU64(b, xLen)
	b = appendU64(b, outOff)
	return appendU64(b, outLen)
}

func dtypeOf(code uint64) (quantcfg.DType, bool) {
	switch code {
	case DTypeCodeF32:
		return quantcfg.DTypeF32, true
	case DTypeCodeBF16:
		return quantcfg.DTypeBF16, true
	}
	return "", false
}

// DTypeCode is the forward header's code for a dtype (0 for an unknown one).
func DTypeCode(dt quantcfg.DType) byte {
	switch dt {
	case quantcfg.DTypeF32:
		return DTypeCodeF32
	case quantcfg.DTypeBF16:
		return DTypeCodeBF16
	}
	return 0
}

// Upload parts.
const (
	partWeights = iota
	partScales
	partBias
	numParts
)

var partNames = [numParts]string{"weights", "scales", "bias"}

type beginReq struct {
	spec         quantcfg.LayerSpec
	packed       bool
	layout       string // packed: the blob's layout revision ("": not given)
	weightsBytes int64  // 0: not given
}

type chunkReq struct {
	upload  uint64
	part    int
	at      uint64
	off, ln uint64
}

// request is one decoded slot request.
type request struct {
	op     Op
	fwd    forwardReq
	begin  beginReq
	chunk  chunkReq
	upload uint64 // commit, abort
	id     LayerID
	name   string
}

// decodeRequest decodes and checks the syntax of one slot request. It never reads
// outside b and allocates at most a few strings no longer than b. Every error carries a
// status (ErrBadRequest when nothing more specific applies).
func decodeRequest(b []byte) (req request, err error) {
	defer func() { err = asBadRequest(err) }()
	r := newReader(b)
	n, err := r.ArrayLen(1, mpread.NoLimit)
	if err != nil {
		return request{}, fmt.Errorf("request: %w", err)
	}
	if n < 1 {
		return request{}, fmt.Errorf("%w: request: an empty array has no op", ErrBadRequest)
	}
	opv, err := r.Uint()
	if err != nil {
		return request{}, fmt.Errorf("request op: %w", err)
	}
	if opv < uint64(OpHello) || opv > uint64(OpStats) {
		return request{}, fmt.Errorf("%w: op %d: known ops are %d (hello) to %d (stats)", ErrUnknownOp, opv, OpHello, OpStats)
	}
	req = request{op: Op(opv)}
	if req.op == OpForward {
		req.fwd, err = decodeForwardBody(r, n)
		return req, err
	}
	if n > 2 {
		return req, fmt.Errorf("%w: %s request: want [op] or [op, {args}], got an array of %d", ErrBadRequest, req.op, n)
	}
	var args argMap
	if n == 2 {
		if r.Nil() {
			args = argMap{}
		} else if args, err = readArgs(r); err != nil {
			return req, fmt.Errorf("%s request: %w", req.op, err)
		}
	}
	if err := r.Done(); err != nil {
		return req, fmt.Errorf("%s request: %w", req.op, err)
	}
	if err := req.fill(args); err != nil {
		return req, fmt.Errorf("%s request: %w", req.op, err)
	}
	return req, nil
}

func decodeForwardBody(r *mpread.Reader, n int) (forwardReq, error) {
	var f forwardReq
	if n != 8 {
		return f, fmt.Errorf("%w: forward request: want an array of 8 [op, id, n, dtype, x_off, x_len, out_off, out_len], got %d elements", ErrBadRequest, n)
	}
	id, err := r.Uint()
	if err != nil {
		return f, fmt.Errorf("forward id: %w", err)
	}
	f.id = LayerID(id)
	tokens, err := r.UintMax("forward n", math.MaxInt32)
	if err != nil {
		return f, err
	}
	f.n = int(tokens)
	code, err := r.Uint()
	if err != nil {
		return f, fmt.Errorf("forward dtype: %w", err)
	}
	var ok bool
	if f.dt, ok = dtypeOf(code); !ok {
		return f, fmt.Errorf("%w: forward dtype code %d: allowed %d (f32), %d (bf16)", ErrBadRequest, code, DTypeCodeF32, DTypeCodeBF16)
	}
	if f.xOff, err = r.UintMax("forward x_off", math.MaxInt64); err != nil {
		return f, err
	}
	if f.xLen, err = r.UintMax("forward x_len", math.MaxInt64); err != nil {
		return f, err
	}
	if f.outOff, err = r.UintMax("forward out_off", math.MaxInt64); err != nil {
		return f, err
	}
	if f.outLen, err = r.UintMax("forward out_len", math.MaxInt64); err != nil {
		return f, err
	}
	if err := r.Done(); err != nil {
		return f, fmt.Errorf("forward request: %w", err)
	}
	return f, nil
}

// argMap holds the raw values of a request's argument map, keyed by name; the values
// stay undecoded until the op says what type each key must have.
type argMap map[string][]byte

func readArgs(r *mpread.Reader) (argMap, error) {
	args := argMap{}
	err := r.Fields("arguments", nil, func(k string) (bool, error) {
		v, err := r.Raw()
		args[k] = v
		return true, err
	})
	if err != nil {
		return nil, err
	}
	return args, nil
}

// take removes key from the map and returns a reader over its value.
func (a argMap) take(key string) (*mpread.Reader, bool) {
	v, ok := a[key]
	if !ok {
		return nil, false
	}
	delete(a, key)
	return newReader(v), true
}

func (a argMap) leftover(op Op) error {
	for k := range a {
		return fmt.Errorf("%w: unknown argument %q for %s", ErrBadRequest, k, op)
	}
	return nil
}

func (a argMap) uint(key string, max uint64, required bool) (uint64, bool, error) {
	r, ok := a.take(key)
	if !ok {
		if required {
			return 0, false, fmt.Errorf("%w: argument %q is missing", ErrBadRequest, key)
		}
		return 0, false, nil
	}
	v, err := r.UintMax(key, max)
	return v, true, err
}

func (a argMap) str(key string, max int, required bool) (string, error) {
	r, ok := a.take(key)
	if !ok {
		if required {
			return "", fmt.Errorf("%w: argument %q is missing", ErrBadRequest, key)
		}
		return "", nil
	}
	s, err := r.Str(max)
	if err != nil {
		return "", fmt.Errorf("argument %q: %w", key, err)
	}
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("%w: argument %q is not valid UTF-8", ErrBadRequest, key)
	}
	return s, nil
}

func (a argMap) bool(key string) (bool, error) {
	r, ok := a.take(key)
	if !ok {
		return false, nil
	}
	v, err := r.Bool()
	if err != nil {
		return false, fmt.Errorf("argument %q: %w", key, err)
	}
	return v, nil
}

func (req *request) fill(a argMap) error {
	var err error
	switch req.op {
	case OpHello, OpPing, OpStats:
	case OpBegin:
		req.begin, err = decodeBegin(a)
	case OpUpload:
		req.chunk, err = decodeChunk(a)
	case OpCommit, OpAbort:
		req.upload, _, err = a.uint("upload", math.MaxUint32, true)
	case OpLookup:
		req.name, err = a.str("name", MaxNameLen, true)
		if err == nil && req.name == "" {
			err = fmt.Errorf("%w: argument \"name\" is empty", ErrBadRequest)
		}
	case OpFree:
		var id uint64
		id, _, err = a.uint("id", math.MaxUint64, true)
		req.id = LayerID(id)
	}
	if err != nil {
		return err
	}
	return a.leftover(req.op)
}

func decodeBegin(a argMap) (beginReq, error) {
	var b beginReq
	var s quantcfg.LayerSpec
	var err error
	if s.Name, err = a.str("name", MaxNameLen, false); err != nil {
		return b, err
	}
	f, err := a.str("format", maxSpellLen, true)
	if err != nil {
		return b, err
	}
	if s.Format, err = quantcfg.ParseFormat(f); err != nil {
		return b, err
	}
	out, _, err := a.uint("out", quantcfg.MaxDim, true)
	if err != nil {
		return b, err
	}
	in, _, err := a.uint("in", quantcfg.MaxDim, true)
	if err != nil {
		return b, err
	}
	s.Out, s.In = int(out), int(in)
	act, err := a.str("act", maxSpellLen, false)
	if err != nil {
		return b, err
	}
	if s.Act, err = quantcfg.ParseActMode(act); err != nil {
		return b, err
	}
	scale, err := a.str("scale", maxSpellLen, false)
	if err != nil {
		return b, err
	}
	if s.Scale, err = quantcfg.ParseScaleGran(scale); err != nil {
		return b, err
	}
	if r, ok := a.take("codebook"); ok {
		if s.Format != quantcfg.Int2 {
			return b, fmt.Errorf("%w: codebook given for format %s: only int2 uses a code book", quantcfg.ErrInvalid, s.Format)
		}
		n, err := r.ArrayLen(1, mpread.NoLimit)
		if err != nil {
			return b, fmt.Errorf("argument \"codebook\": %w", err)
		}
		if n != 4 {
			return b, fmt.Errorf("%w: argument \"codebook\": want 4 levels, got %d", ErrBadRequest, n)
		}
		for i := range s.Codebook {
			v, err := r.Int()
			if err != nil {
				return b, fmt.Errorf("argument \"codebook\"[%d]: %w", i, err)
			}
			if v < math.MinInt8 || v > math.MaxInt8 {
				return b, fmt.Errorf("%w: codebook[%d] = %d: levels are int8, in [-128, 127]", quantcfg.ErrInvalid, i, v)
			}
			s.Codebook[i] = int8(v)
		}
		if err := r.Done(); err != nil {
			return b, fmt.Errorf("argument \"codebook\": %w", err)
		}
	}
	if s.Bias, err = a.bool("bias"); err != nil {
		return b, err
	}
	if b.packed, err = a.bool("packed"); err != nil {
		return b, err
	}
	wb, given, err := a.uint("weights_bytes", math.MaxInt64, false)
	if err != nil {
		return b, err
	}
	if b.packed && !given {
		return b, fmt.Errorf("%w: argument \"weights_bytes\" is required for a packed upload", ErrBadRequest)
	}
	if b.layout, err = a.str("layout", maxSpellLen, false); err != nil {
		return b, err
	}
	if b.layout != "" && !b.packed {
		return b, fmt.Errorf("%w: argument \"layout\" %q is for packed uploads (\"packed\" is false)", ErrBadRequest, b.layout)
	}
	b.weightsBytes = int64(wb)
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		return b, err
	}
	b.spec = s
	return b, nil
}

func decodeChunk(a argMap) (chunkReq, error) {
	var c chunkReq
	var err error
	if c.upload, _, err = a.uint("upload", math.MaxUint32, true); err != nil {
		return c, err
	}
	part, err := a.str("part", maxSpellLen, true)
	if err != nil {
		return c, err
	}
	c.part = -1
	for i, p := range partNames {
		if p == part {
			c.part = i
		}
	}
	if c.part < 0 {
		return c, fmt.Errorf("%w: argument \"part\" = %q: allowed: weights, scales, bias", ErrBadRequest, part)
	}
	if c.at, _, err = a.uint("at", math.MaxInt64, true); err != nil {
		return c, err
	}
	if c.off, _, err = a.uint("off", math.MaxInt64, true); err != nil {
		return c, err
	}
	if c.ln, _, err = a.uint("len", math.MaxInt64, true); err != nil {
		return c, err
	}
	return c, nil
}

// The handshake (PROTOCOL.md, "Handshake").

type helloReq struct {
	proto  uint64
	name   string
	region uint64 // 0: the daemon's default
	slots  uint64 // 0: the daemon's default
	pid    uint64
}

// decodeHello reads the client's handshake. Unknown keys are ignored so that a newer
// client gets a clean version error rather than a complaint about its new fields. Every
// error carries a status (ErrBadRequest when nothing more specific applies).
func decodeHello(b []byte) (h helloReq, err error) {
	defer func() { err = asBadRequest(err) }()
	r := newReader(b)
	args, err := readArgs(r)
	if err != nil {
		return h, fmt.Errorf("hello: %w", err)
	}
	if err := r.Done(); err != nil {
		return h, fmt.Errorf("hello: %w", err)
	}
	var given bool
	if h.proto, given, err = args.uint("proto", math.MaxUint32, false); err != nil {
		return h, fmt.Errorf("hello: %w", err)
	}
	if !given {
		return h, fmt.Errorf("%w: hello: \"proto\" is missing", ErrBadRequest)
	}
	if h.proto != ProtocolVersion {
		return h, fmt.Errorf("%w: the client speaks protocol %d, this daemon speaks %d", ErrVersion, h.proto, ProtocolVersion)
	}
	if h.name, err = args.str("name", MaxNameLen, false); err != nil {
		return h, fmt.Errorf("hello: %w", err)
	}
	if h.region, _, err = args.uint("region", math.MaxInt64, false); err != nil {
		return h, fmt.Errorf("hello: %w", err)
	}
	if h.slots, _, err = args.uint("slots", MaxSlots, false); err != nil {
		return h, fmt.Errorf("hello: %w", err)
	}
	if h.pid, _, err = args.uint("pid", math.MaxUint32, false); err != nil {
		return h, fmt.Errorf("hello: %w", err)
	}
	return h, nil
}

// Limits are the per-client limits in force, as the handshake reply reports them.
type Limits struct {
	MaxRegion  int64 `msgpack:"max_region"`  // largest region a client may ask for, bytes
	MaxBytes   int64 `msgpack:"max_bytes"`   // registered weight bytes per session (uploads in progress count)
	MaxLayers  int   `msgpack:"max_layers"`  // layers owned per session (uploads in progress count)
	MaxUploads int   `msgpack:"max_uploads"` // uploads in progress per session
	MaxTokens  int   `msgpack:"max_tokens"`  // n of one forward
}

// HelloReply is the daemon's handshake answer.
type HelloReply struct {
	Proto     int    `msgpack:"proto"`
	Status    Status `msgpack:"status"`
	Msg       string `msgpack:"msg"`
	Session   uint32 `msgpack:"session"`
	Server    string `msgpack:"server"`
	ServerPID int    `msgpack:"server_pid"`
	Region    int    `msgpack:"region"`
	NSlots    int    `msgpack:"nslots"`
	SlotSize  int    `msgpack:"slot_size"`
	DataOff   int    `msgpack:"data_off"`
	DataSize  int    `msgpack:"data_size"`
	Limits    Limits `msgpack:"limits"`
}

// Results of the control ops.

type beginResult struct {
	Upload       uint32 `msgpack:"upload"`
	WeightsBytes int64  `msgpack:"weights_bytes"`
	Scales       int    `msgpack:"scales"`
	Bias         int    `msgpack:"bias"`
}

type layerResult struct {
	ID     uint64 `msgpack:"id"`
	Name   string `msgpack:"name"`
	Format string `msgpack:"format"`
	Out    int    `msgpack:"out"`
	In     int    `msgpack:"in"`
	Act    string `msgpack:"act"`
	Scale  string `msgpack:"scale"`
	Bias   bool   `msgpack:"bias"`
	Bytes  int64  `msgpack:"bytes"`
	Shared bool   `msgpack:"shared"`
}

func toLayerResult(li LayerInfo) layerResult {
	s := li.Spec
	return layerResult{ID: uint64(li.ID), Name: s.Name, Format: string(s.Format), Out: s.Out, In: s.In,
		Act: s.Act.String(), Scale: s.Scale.String(), Bias: s.Bias, Bytes: li.Bytes, Shared: li.Shared}
}

// SessionStats are one session's figures.
type SessionStats struct {
	ID      uint32 `msgpack:"id"`
	Layers  int    `msgpack:"layers"`  // owned
	Shared  int    `msgpack:"shared"`  // looked up
	Bytes   int64  `msgpack:"bytes"`   // registered bytes (owned layers + uploads in progress)
	Uploads int    `msgpack:"uploads"` // in progress
	Calls   uint64 `msgpack:"calls"`
	Errors  uint64 `msgpack:"errors"`
}

// Stats is the stats op's result.
type Stats struct {
	Session  SessionStats       `msgpack:"session"`
	Sessions int                `msgpack:"sessions"`
	Engine   map[string]float64 `msgpack:"engine"`
}

// respEncoder writes [status, msg, result] responses into a slot.
type respEncoder struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

func newRespEncoder() *respEncoder {
	e := &respEncoder{}
	e.enc = msgpack.NewEncoder(&e.buf)
	e.enc.UseCompactInts(true)
	return e
}

// encode returns the response bytes; a result that does not fit is replaced by an
// internal error (which always fits: messages are cut to maxMsgLen).
func (e *respEncoder) encode(st Status, msg string, result any) []byte {
	e.buf.Reset()
	msg = cutMsg(msg)
	err := e.enc.EncodeArrayLen(3)
	if err == nil {
		err = e.enc.EncodeUint(uint64(st))
	}
	if err == nil {
		err = e.enc.EncodeString(msg)
	}
	if err == nil {
		err = e.enc.Encode(result)
	}
	if err != nil || e.buf.Len() > SlotRespCap {
		e.buf.Reset()
		b := []byte{0x93, byte(StatusInternal)}
		b = appendStr(b, cutMsg(fmt.Sprintf("response of %d bytes does not fit the slot (%v)", e.buf.Len(), err)))
		return append(b, 0xc0)
	}
	return e.buf.Bytes()
}

func cutMsg(s string) string {
	if len(s) <= maxMsgLen {
		return s
	}
	s = s[:maxMsgLen-3]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "..."
}

// appendForwardOK appends the fixed forward success response [0, "", handler_ns].
func appendForwardOK(b []byte, ns uint64) []byte {
	b = append(b, 0x93, 0x00, 0xa0)
	return appendU64(b, ns)
}

// decodeResponse reads [status, msg, result] (client side). The result's raw bytes are
// returned for the caller to decode into its type.
func decodeResponse(b []byte) (Status, string, []byte, error) {
	r := newReader(b)
	n, err := r.ArrayLen(1, mpread.NoLimit)
	if err != nil {
		return 0, "", nil, err
	}
	if n != 3 {
		return 0, "", nil, fmt.Errorf("%w: response is an array of %d, want 3", ErrProtocol, n)
	}
	st, err := r.UintMax("status", math.MaxUint16)
	if err != nil {
		return 0, "", nil, err
	}
	msg, err := r.Str(SlotRespCap)
	if err != nil {
		return 0, "", nil, err
	}
	return Status(st), msg, r.Rest(), nil
}

// forwardOKResult reads the handler time of a fixed forward success response.
func forwardOKResult(raw []byte) (uint64, error) {
	r := newReader(raw)
	if r.Nil() {
		return 0, nil
	}
	v, err := r.Uint()
	if err != nil {
		return 0, err
	}
	return v, r.Done()
}

// asBadRequest wraps a decoder error that carries no status of its own.
func asBadRequest(err error) error {
	if StatusOf(err) == StatusInternal && !errors.Is(err, ErrInternal) {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return err
}

// Client-side decoders of the daemon's answers. They use mpread too: the client checks
// what a buggy or hostile daemon sends as carefully as the daemon checks clients.

func decodeWhole(b []byte, what string, known map[string]func(*mpread.Reader) error) error {
	r := newReader(b)
	err := fields(r, known)
	if err == nil {
		err = r.Done()
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrProtocol, what, err)
	}
	return nil
}

func (l *Limits) fields() map[string]func(*mpread.Reader) error {
	return map[string]func(*mpread.Reader) error{
		"max_region": intField(&l.MaxRegion), "max_bytes": intField(&l.MaxBytes), "max_layers": intField(&l.MaxLayers),
		"max_uploads": intField(&l.MaxUploads), "max_tokens": intField(&l.MaxTokens),
	}
}

func decodeHelloReply(b []byte) (HelloReply, error) {
	var h HelloReply
	err := decodeWhole(b, "handshake reply", map[string]func(*mpread.Reader) error{
		"proto": intField(&h.Proto), "status": intField(&h.Status), "msg": strField(&h.Msg, maxFrameSize),
		"session": intField(&h.Session), "server": strField(&h.Server, MaxNameLen), "server_pid": intField(&h.ServerPID),
		"region": intField(&h.Region), "nslots": intField(&h.NSlots), "slot_size": intField(&h.SlotSize),
		"data_off": intField(&h.DataOff), "data_size": intField(&h.DataSize),
		"limits": func(r *mpread.Reader) error { return fields(r, h.Limits.fields()) },
	})
	return h, err
}

func decodeBeginResult(b []byte) (beginResult, error) {
	var x beginResult
	err := decodeWhole(b, "begin result", map[string]func(*mpread.Reader) error{
		"upload": intField(&x.Upload), "weights_bytes": intField(&x.WeightsBytes), "scales": intField(&x.Scales), "bias": intField(&x.Bias),
	})
	return x, err
}

func decodeLayerResult(b []byte) (layerResult, error) {
	var x layerResult
	err := decodeWhole(b, "layer result", map[string]func(*mpread.Reader) error{
		"id": uint64Field(&x.ID), "name": strField(&x.Name, MaxNameLen), "format": strField(&x.Format, maxSpellLen),
		"out": intField(&x.Out), "in": intField(&x.In), "act": strField(&x.Act, maxSpellLen), "scale": strField(&x.Scale, maxSpellLen),
		"bias": boolField(&x.Bias), "bytes": intField(&x.Bytes), "shared": boolField(&x.Shared),
	})
	return x, err
}

func decodeStats(b []byte) (Stats, error) {
	var s Stats
	ss := &s.Session
	err := decodeWhole(b, "stats", map[string]func(*mpread.Reader) error{
		"sessions": intField(&s.Sessions),
		"session": func(r *mpread.Reader) error {
			return fields(r, map[string]func(*mpread.Reader) error{
				"id": intField(&ss.ID), "layers": intField(&ss.Layers), "shared": intField(&ss.Shared), "bytes": intField(&ss.Bytes),
				"uploads": intField(&ss.Uploads), "calls": uint64Field(&ss.Calls), "errors": uint64Field(&ss.Errors),
			})
		},
		"engine": func(r *mpread.Reader) error {
			if r.Nil() {
				return nil
			}
			n, err := r.MapLen(mpread.NoLimit)
			if err != nil {
				return err
			}
			s.Engine = make(map[string]float64, n)
			for i := 0; i < n; i++ {
				k, err := r.Str(MaxNameLen)
				if err != nil {
					return err
				}
				if s.Engine[k], err = r.Float64(); err != nil {
					return err
				}
			}
			return nil
		},
	})
	return s, err
}
