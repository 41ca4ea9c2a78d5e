package ipc

import (
	"errors"
	"fmt"

	"bitgo/quantcfg"
)

// Status is the code every response carries (PROTOCOL.md, "Status codes"). The numbers
// are part of the wire protocol and never change meaning.
type Status uint16

// Status codes.
const (
	StatusOK           Status = 0  // success
	StatusBadRequest   Status = 1  // malformed msgpack, missing or mistyped field
	StatusUnknownOp    Status = 2  // op code not known to this daemon
	StatusVersion      Status = 3  // protocol version not spoken by this daemon
	StatusOutOfRange   Status = 4  // an offset or length outside the data area, or misaligned
	StatusNotFound     Status = 5  // no such layer (in this session) or upload
	StatusDenied       Status = 6  // peer refused, or the layer may not be changed by this session
	StatusLimit        Status = 7  // a per-client or daemon limit would be exceeded
	StatusInvalid      Status = 8  // a layer description with a bad format, mode or shape
	StatusShape        Status = 9  // a forward whose sizes do not match the layer
	StatusNonFinite    Status = 10 // NaN or ±Inf in activations (or weights, scales, bias)
	StatusUpload       Status = 11 // a chunk out of order, overlapping, out of range, or a commit before all bytes arrived
	StatusShuttingDown Status = 12 // the daemon is draining: no new calls
	StatusUnsupported  Status = 13 // well formed but not served (format, dtype, backend)
	StatusInternal     Status = 14 // a daemon-side failure; the message says what
)

// Sentinel errors, one per non-OK status, plus the client-side ones. Errors returned by
// this package wrap them; test with errors.Is.
var (
	ErrBadRequest   = errors.New("bad request")
	ErrUnknownOp    = errors.New("unknown op")
	ErrVersion      = errors.New("protocol version mismatch")
	ErrOutOfRange   = errors.New("offset or length out of range")
	ErrNotFound     = errors.New("not found")
	ErrDenied       = errors.New("denied")
	ErrLimit        = errors.New("limit exceeded")
	ErrInvalid      = errors.New("invalid layer")
	ErrShape        = errors.New("shape mismatch")
	ErrNonFinite    = errors.New("non-finite values")
	ErrUpload       = errors.New("bad upload")
	ErrShuttingDown = errors.New("daemon shutting down")
	ErrUnsupported  = errors.New("unsupported")
	ErrInternal     = errors.New("internal daemon error")

	// ErrClosed: the client (or the session) is closed; dial again.
	ErrClosed = errors.New("ipc connection closed")
	// ErrPeerGone: the other process closed the socket or died while a call waited.
	ErrPeerGone = errors.New("peer gone")
	// ErrTimeout: a call exceeded the client's CallTimeout; the client is closed.
	ErrTimeout = errors.New("call timed out")
	// ErrProtocol: the peer broke the protocol (bad region header, ring overrun, bytes
	// on the socket after the handshake); the connection is closed.
	ErrProtocol = errors.New("protocol violation")
)

var statusTable = []struct {
	st   Status
	name string
	err  error
}{
	{StatusOK, "ok", nil},
	{StatusBadRequest, "bad_request", ErrBadRequest},
	{StatusUnknownOp, "unknown_op", ErrUnknownOp},
	{StatusVersion, "version", ErrVersion},
	{StatusOutOfRange, "out_of_range", ErrOutOfRange},
	{StatusNotFound, "not_found", ErrNotFound},
	{StatusDenied, "denied", ErrDenied},
	{StatusLimit, "limit", ErrLimit},
	{StatusInvalid, "invalid", ErrInvalid},
	{StatusShape, "shape", ErrShape},
	{StatusNonFinite, "non_finite", ErrNonFinite},
	{StatusUpload, "upload", ErrUpload},
	{StatusShuttingDown, "shutting_down", ErrShuttingDown},
	{StatusUnsupported, "unsupported", ErrUnsupported},
	{StatusInternal, "internal", ErrInternal},
}

// String is the status's name as metrics label it ("ok", "not_found", ...).
func (s Status) String() string {
	if int(s) < len(statusTable) {
		return statusTable[s].name
	}
	return fmt.Sprintf("status_%d", uint16(s))
}

// Err is the sentinel error of a status (nil for StatusOK, ErrInternal for an unknown code).
func (s Status) Err() error {
	if s == StatusOK {
		return nil
	}
	if int(s) < len(statusTable) {
		return statusTable[s].err
	}
	return ErrInternal
}

// StatusOf classifies an error returned by a Handler: the first of this package's
// sentinels it wraps, then quantcfg's (ErrInvalid, ErrUnsupported, ErrShape), else
// StatusInternal. A Handler maps its own errors by wrapping these sentinels.
func StatusOf(err error) Status {
	if err == nil {
		return StatusOK
	}
	for _, e := range statusTable[1:] {
		if errors.Is(err, e.err) {
			return e.st
		}
	}
	switch {
	case errors.Is(err, quantcfg.ErrShape), errors.Is(err, quantcfg.ErrInvalid):
		return StatusInvalid
	case errors.Is(err, quantcfg.ErrUnsupported):
		return StatusUnsupported
	}
	return StatusInternal
}

// Error is a non-OK response as the client sees it. It wraps the status's sentinel, so
// errors.Is(err, ipc.ErrNotFound) works on both sides of the wire.
type Error struct {
	Op     Op
	Status Status
	Msg    string
}

func (e *Error) Error() string {
	return fmt.Sprintf("bitd %s: %s (status %d %s)", e.Op, e.Msg, uint16(e.Status), e.Status)
}

// Unwrap returns the status's sentinel.
func (e *Error) Unwrap() error { return e.Status.Err() }
