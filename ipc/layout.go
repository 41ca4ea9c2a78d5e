package ipc

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// ProtocolVersion is the version this package speaks (handshake "proto" and region
// header "version").
const ProtocolVersion = 1

// Region layout, version 1 (PROTOCOL.md, "The region"). All multi-byte fields of the
// header and slots are little-endian; every atomic word is a uint32 at an 8-byte-aligned
// offset, alone in its 8-byte cell.
const (
	Magic = 0x4350494f47544942 // the bytes "BITGOIPC" read as a little-endian uint64

	offMagic      = 0   // u64 Magic
	offVersion    = 8   // u32 ProtocolVersion
	offHeaderSize = 12  // u32 HeaderSize
	offRegionSize = 16  // u64 region size in bytes
	offNSlots     = 24  // u32 number of slots
	offSlotSize   = 28  // u32 SlotSize
	offSlotsOff   = 32  // u64 offset of slot 0
	offDataOff    = 40  // u64 offset of the data area
	offDataSize   = 48  // u64 size of the data area
	offServerPID  = 56  // u32 daemon pid
	offSessionID  = 60  // u32 session id (as in the handshake reply)
	offReqSeq     = 64  // u32 atomic, written by the client: requests published
	offClientWait = 72  // u32 atomic, written by the client: 1 while it sleeps in FUTEX_WAIT
	offRespSeq    = 128 // u32 atomic, written by the daemon: responses published
	offServerWait = 136 // u32 atomic, written by the daemon: 1 while it sleeps in FUTEX_WAIT
	offState      = 144 // u32 atomic, written by the daemon: StateRunning / StateDraining / StateClosed

	// HeaderSize is the size of the region header; slots start right after it.
	HeaderSize = 256
	// SlotSize is the size of one request/response slot.
	SlotSize = 4096

	// Slot layout: two u32 length words, then the request and response areas.
	slotReqLen  = 0    // u32: bytes of msgpack in the request area
	slotRespLen = 8    // u32: bytes of msgpack in the response area
	slotReqOff  = 64   // request area
	SlotReqCap  = 1984 // request area capacity (ends at byte 2048 of the slot)
	slotRespOff = 2048 // response area
	SlotRespCap = 2048 // response area capacity

	// DataAlign is the alignment of the data area's start; forward offsets must be
	// multiples of ForwardAlign.
	DataAlign    = 4096
	ForwardAlign = 8
)

// Daemon states in the header's state word.
const (
	StateRunning  = 0
	StateDraining = 1 // new calls are answered with StatusShuttingDown
	StateClosed   = 2 // the session is over
)

// geometry is where things sit in one region. The daemon computes it; the client reads
// it from the handshake and checks the header agrees.
type geometry struct {
	Size     int // whole region
	NSlots   int
	SlotsOff int
	DataOff  int
	DataSize int
}

func newGeometry(size, nslots int) (geometry, error) {
	if nslots < 1 || nslots > MaxSlots {
		return geometry{}, fmt.Errorf("%w: %d slots: must be in [1, %d]", ErrLimit, nslots, MaxSlots)
	}
	g := geometry{Size: size, NSlots: nslots, SlotsOff: HeaderSize}
	g.DataOff = alignUp(HeaderSize+nslots*SlotSize, DataAlign)
	g.DataSize = size - g.DataOff
	if g.DataSize < DataAlign {
		return geometry{}, fmt.Errorf("%w: region of %d bytes leaves no data area after %d slots", ErrLimit, size, nslots)
	}
	return g, nil
}

// MaxSlots bounds the ring length.
const MaxSlots = 64

func alignUp(n, a int) int { return (n + a - 1) / a * a }

// region is a typed view of a mapped region. Both sides use it; every method that takes
// a slot index or an offset is only called with values already checked.
type region struct {
	b []byte
	g geometry
}

func (r *region) word(off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&r.b[off]))
}

func (r *region) reqSeq() *uint32     { return r.word(offReqSeq) }
func (r *region) respSeq() *uint32    { return r.word(offRespSeq) }
func (r *region) clientWait() *uint32 { return r.word(offClientWait) }
func (r *region) serverWait() *uint32 { return r.word(offServerWait) }
func (r *region) state() *uint32      { return r.word(offState) }

func (r *region) slot(seq uint32) []byte {
	i := int(seq % uint32(r.g.NSlots))
	off := r.g.SlotsOff + i*SlotSize
	return r.b[off : off+SlotSize : off+SlotSize]
}

func (r *region) data() []byte {
	return r.b[r.g.DataOff : r.g.DataOff+r.g.DataSize : r.g.DataOff+r.g.DataSize]
}

// writeHeader initialises a fresh region (daemon side).
func (r *region) writeHeader(pid, session uint32) {
	le := binary.LittleEndian
	le.PutUint64(r.b[offMagic:], Magic)
	le.PutUint32(r.b[offVersion:], ProtocolVersion)
	le.PutUint32(r.b[offHeaderSize:], HeaderSize)
	le.PutUint64(r.b[offRegionSize:], uint64(r.g.Size))
	le.PutUint32(r.b[offNSlots:], uint32(r.g.NSlots))
	le.PutUint32(r.b[offSlotSize:], SlotSize)
	le.PutUint64(r.b[offSlotsOff:], uint64(r.g.SlotsOff))
	le.PutUint64(r.b[offDataOff:], uint64(r.g.DataOff))
	le.PutUint64(r.b[offDataSize:], uint64(r.g.DataSize))
	le.PutUint32(r.b[offServerPID:], pid)
	le.PutUint32(r.b[offSessionID:], session)
	atomic.StoreUint32(r.reqSeq(), 0)
	atomic.StoreUint32(r.respSeq(), 0)
	atomic.StoreUint32(r.clientWait(), 0)
	atomic.StoreUint32(r.serverWait(), 0)
	atomic.StoreUint32(r.state(), StateRunning)
}

// checkHeader verifies (client side) that a mapped region has the header the handshake
// announced, so a confused or hostile daemon cannot make the client index outside it.
func (r *region) checkHeader() error {
	le := binary.LittleEndian
	if len(r.b) < HeaderSize {
		return fmt.Errorf("%w: region of %d bytes is smaller than its header", ErrProtocol, len(r.b))
	}
	if m := le.Uint64(r.b[offMagic:]); m != Magic {
		return fmt.Errorf("%w: region magic %#x, want %#x", ErrProtocol, m, uint64(Magic))
	}
	if v := le.Uint32(r.b[offVersion:]); v != ProtocolVersion {
		return fmt.Errorf("%w: region version %d, want %d", ErrVersion, v, ProtocolVersion)
	}
	check := []struct {
		name      string
		got, want uint64
	}{
		{"header_size", uint64(le.Uint32(r.b[offHeaderSize:])), HeaderSize},
		{"region_size", le.Uint64(r.b[offRegionSize:]), uint64(r.g.Size)},
		{"nslots", uint64(le.Uint32(r.b[offNSlots:])), uint64(r.g.NSlots)},
		{"slot_size", uint64(le.Uint32(r.b[offSlotSize:])), SlotSize},
		{"slots_off", le.Uint64(r.b[offSlotsOff:]), uint64(r.g.SlotsOff)},
		{"data_off", le.Uint64(r.b[offDataOff:]), uint64(r.g.DataOff)},
		{"data_size", le.Uint64(r.b[offDataSize:]), uint64(r.g.DataSize)},
	}
	for _, c := range check {
		if c.got != c.want {
			return fmt.Errorf("%w: region header %s = %d, the handshake said %d", ErrProtocol, c.name, c.got, c.want)
		}
	}
	// The geometry must describe a region that fits, whatever the handshake said.
	g := r.g
	if g.NSlots < 1 || g.NSlots > MaxSlots || g.SlotsOff != HeaderSize ||
		g.DataOff < g.SlotsOff+g.NSlots*SlotSize || g.DataSize < 1 ||
		g.DataOff > len(r.b) || g.DataSize > len(r.b)-g.DataOff || g.Size != len(r.b) {
		return fmt.Errorf("%w: region geometry %+v does not fit a mapping of %d bytes", ErrProtocol, g, len(r.b))
	}
	return nil
}

// Op is an operation code (the first element of every request array).
type Op uint8

// Operation codes (PROTOCOL.md, "Operations").
const (
	OpHello   Op = 1
	OpPing    Op = 2
	OpBegin   Op = 3 // register a layer: begin an upload
	OpUpload  Op = 4 // one chunk of an upload
	OpCommit  Op = 5 // finish an upload: the layer is registered
	OpAbort   Op = 6 // drop an upload
	OpLookup  Op = 7 // a layer the daemon loaded from a pack file
	OpForward Op = 8
	OpFree    Op = 9
	OpStats   Op = 10
)

var opNames = [...]string{"op0", "hello", "ping", "begin", "upload", "commit", "abort", "lookup", "forward", "free", "stats"}

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("op%d", uint8(o))
}

// Activation dtype codes of the forward header.
const (
	DTypeCodeF32  = 1
	DTypeCodeBF16 = 2
)
