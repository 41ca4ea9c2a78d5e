package kernels

import "errors"

// Sentinel errors; every error from this package wraps one of them.
var (
	// ErrNonFinite: an activation (or scale, or float weight) is NaN or infinite.
	ErrNonFinite = errors.New("non-finite value")
	// ErrShape: a buffer's length does not match the layer's shape, or the shape does
	// not fit the format.
	ErrShape = errors.New("shape mismatch")
	// ErrWeights: a logical weight or a packed code outside the format's value set.
	ErrWeights = errors.New("invalid weight")
	// ErrNoKernel: no kernel can run this layer on this CPU (the error lists why each
	// candidate declined).
	ErrNoKernel = errors.New("no kernel")
)
