package quantcfg

import "errors"

// Sentinel errors. Every error returned by this package wraps one of them, so callers can
// test with errors.Is and still print a message that names the field and the problem.
var (
	// ErrInvalid: a field has a value outside its allowed set.
	ErrInvalid = errors.New("invalid quantization setting")
	// ErrUnsupported: a combination that is well formed but not served (for example a
	// per-group activation mode with a lookup-table format).
	ErrUnsupported = errors.New("unsupported quantization setting")
	// ErrShape: a layer shape that cannot be served.
	ErrShape = errors.New("unservable layer shape")
	// ErrConfig: a config.json that cannot be read as a quantization config.
	ErrConfig = errors.New("bad quantization config")
)
