package xe2

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error this package returns wraps one of them, so callers can test
// with errors.Is and still print a message naming the device, layer or kernel concerned.
var (
	// ErrUnavailable: the backend cannot run on this machine: built without cgo, no
	// libOpenCL.so.1, no OpenCL platform, or no usable device. The message says which.
	ErrUnavailable = errors.New("xe2 backend unavailable")
	// ErrNoDevice: the requested device does not exist or is not usable (see Probe for why).
	ErrNoDevice = errors.New("no such xe2 device")
	// ErrOpenCL: an OpenCL call failed; the message names the call and the error code.
	ErrOpenCL = errors.New("OpenCL call failed")
	// ErrBuild: a kernel failed to compile; the message names the kernel, the options and
	// carries the compiler's build log.
	ErrBuild = errors.New("kernel build failed")
	// ErrMismatch: a kernel's result differs from the Go reference (probe or validation).
	ErrMismatch = errors.New("kernel result differs from the reference")
	// ErrShape: a layer, weight, activation or output buffer has the wrong size or shape.
	ErrShape = errors.New("bad shape")
	// ErrInvalid: a setting (tile configuration, device name, tune table) is invalid.
	ErrInvalid = errors.New("invalid xe2 setting")
	// ErrUnsupported: a layer this backend does not serve (format, mode); the CPU serves it.
	ErrUnsupported = errors.New("unsupported by the xe2 backend")
	// ErrNonFinite: an activation, scale or bias is NaN or infinite.
	ErrNonFinite = errors.New("non-finite value")
	// ErrClosed: the device or layer was already closed or freed.
	ErrClosed = errors.New("xe2 device or layer closed")
)

func unavailable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnavailable, fmt.Sprintf(format, args...))
}
