package engine

import "errors"

// Sentinel errors; every error from the engine wraps one of these or one of package
// kernels' (kernels.ErrShape, kernels.ErrNonFinite, kernels.ErrWeights, kernels.ErrNoKernel)
// or quantcfg's (quantcfg.ErrInvalid, ErrUnsupported, ErrShape).
var (
	// ErrNoLayer: no layer has this id or name (never registered, or freed).
	ErrNoLayer = errors.New("no such layer")
	// ErrExists: a layer with this name is already registered.
	ErrExists = errors.New("layer name already registered")
	// ErrBadRequest: the call's buffers do not fit the layer (sizes, dtype, token count).
	ErrBadRequest = errors.New("bad request")
	// ErrClosed: the engine was closed.
	ErrClosed = errors.New("engine closed")
	// ErrInternal: a kernel or the runner failed (a bug, reported instead of crashing the
	// process); the layer stays usable.
	ErrInternal = errors.New("internal error")
)
