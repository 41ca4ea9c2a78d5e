package ipc

import (
	"time"

	"bitgo/quantcfg"
)

// LayerID names a layer inside the Handler. 0 is never a valid id.
type LayerID uint64

// LayerInfo describes a registered or looked-up layer.
type LayerInfo struct {
	ID   LayerID
	Spec quantcfg.LayerSpec // defaults filled in
	// Bytes is what the layer keeps resident (packed weights, scales, bias); the
	// session's registered-bytes limit counts it.
	Bytes int64
	// Shared marks a layer the daemon loaded itself (from a pack file): every session
	// may look it up and run it; none may free it.
	Shared bool
}

// Upload is a complete layer upload handed to Handler.Register. The slices are only
// valid during the call: the Handler copies (packs) what it keeps.
type Upload struct {
	Spec quantcfg.LayerSpec // validated, defaults filled in
	// Packed: Weights is a blob in the kernels layout of Spec.Format (its size was
	// checked by PackedSizer when the Handler implements it, else the Handler checks).
	// Otherwise Weights holds the logical weights, row-major [Out][In], little-endian:
	// int8 values for the integer formats (ternary -1/0/1 for i2s/tl1/tl2, code indices
	// 0..3 for int2, ±1 for int1, any int8 for int8), float32 for format f32, bfloat16
	// for format bf16. The Handler checks the values.
	Packed  bool
	Weights []byte
	// Scales holds Spec.NumScales() weight scales (row-major as quantcfg.ScaleGran.Count
	// describes); Bias holds Spec.Out values when Spec.Bias, else it is nil.
	Scales []float32
	Bias   []float32
	// Session is the uploading session's id and Owner names it ("session 7
	// (client-name)"), for logs and for handlers whose layer names must be unique: two
	// sessions may register layers of the same name.
	Session uint32
	Owner   string
}

// Handler is what the server calls; the engine satisfies it through a thin adapter in
// cmd/bitd. Forward is called concurrently from several session threads; Register,
// Lookup, Free and Stats may be too. Errors should wrap this package's sentinels (or
// quantcfg's) so that StatusOf gives the right status; anything else is StatusInternal.
type Handler interface {
	// Register builds a layer from an upload and returns its id. The layer belongs to
	// the session that uploaded it; the server frees it when that session ends.
	Register(u Upload) (LayerInfo, error)
	// Lookup finds a layer the daemon loaded itself (Shared). It must not return
	// layers created by Register; the server refuses such an answer anyway.
	Lookup(name string) (LayerInfo, error)
	// Forward computes out = x W^T (+ b) for n tokens: x is [n][In] and out is [n][Out]
	// of dtype dt, row-major, little-endian; the server has checked both sizes. x and out
	// live in memory the client can write concurrently: the Handler must not fail in a
	// way worse than a wrong answer for that client if it does.
	Forward(id LayerID, x []byte, dt quantcfg.DType, n int, out []byte) error
	// Free drops a layer created by Register.
	Free(id LayerID) error
	// Stats returns daemon-wide figures (layers, bytes resident, ...) for the stats op.
	Stats() map[string]float64
}

// PackedSizer is implemented by Handlers that can tell the size of a packed blob before
// it is uploaded, so a wrong size is refused at begin instead of after the upload.
type PackedSizer interface {
	PackedSize(spec quantcfg.LayerSpec) (int64, error)
}

// PackedLayouts is implemented by Handlers whose packed blobs come in revisions of a
// layout (the begin argument `layout`), so that a blob packed in another revision is
// refused at begin instead of being misread.
type PackedLayouts interface {
	// PackedLayout returns nil when a packed blob of spec's format in layout revision rev
	// ("" when the client named none) is a blob of the layout the Handler reads, and
	// otherwise why not.
	PackedLayout(rev string, spec quantcfg.LayerSpec) error
}

// CallEvent is one finished slot request, for metrics.
type CallEvent struct {
	Op       Op
	Format   quantcfg.Format // the layer's format for forward/commit/lookup/free, else ""
	DType    quantcfg.DType  // forward only
	Tokens   int             // forward only
	Bytes    int64           // forward: the layer's resident bytes (weights read); upload: chunk bytes
	Status   Status
	Duration time.Duration // from decode to response written
	Handler  time.Duration // time inside the Handler
}

// Observer receives events for metrics and logs. Methods are called from session
// threads (the hot path): they must be quick and safe for concurrent use.
type Observer interface {
	Call(e CallEvent)
	// Session is called with +1 when a session starts and -1 when it ends; layers and
	// bytes are what the session owned (at its end, they are freed).
	Session(delta int, layers int, bytes int64)
}
