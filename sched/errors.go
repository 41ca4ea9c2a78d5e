package sched

import (
	"errors"
	"fmt"
)

// Sentinel errors. Functions wrap them with %w and add which input was
// wrong; test with errors.Is.
var (
	// ErrConfig: a Config field is out of range (the message names it).
	ErrConfig = errors.New("sched: invalid config")
	// ErrAffinity: the process's CPU affinity mask could not be read or is
	// empty.
	ErrAffinity = errors.New("sched: CPU affinity")
	// ErrPin: a worker could not be pinned to its core; the pool runs it
	// unpinned (see Pool.PinErr).
	ErrPin = errors.New("sched: pinning a worker")
	// ErrClosed: Run or Split was called after Close.
	ErrClosed = errors.New("sched: pool is closed")
	// ErrBlocks: Split was given a negative number of blocks.
	ErrBlocks = errors.New("sched: invalid block count")
	// ErrRatios: SetRatios was given ratios of the wrong length, or a ratio
	// that is not a positive finite number.
	ErrRatios = errors.New("sched: invalid ratios")
	// ErrPanic: the function given to Run or Split panicked in a worker.
	// The returned error is a *PanicError.
	ErrPanic = errors.New("sched: worker panicked")
	// ErrLoad: the competing-load process of HeteroBench could not be
	// started or misbehaved.
	ErrLoad = errors.New("sched: competing load process")
)

// PanicError is returned by Run and Split when the work function panicked.
// The pool recovered the panic in the worker, waited for the other workers
// and stays usable. When several workers panicked in one call, it describes
// the one with the lowest worker index.
type PanicError struct {
	Worker int    // the worker index whose call panicked
	Value  any    // the value passed to panic
	Stack  []byte // the worker's stack at the panic
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("sched: worker %d panicked: %v", e.Worker, e.Value)
}

// Unwrap lets errors.Is(err, ErrPanic) hold, and exposes the panic value
// when it is itself an error.
func (e *PanicError) Unwrap() []error {
	if err, ok := e.Value.(error); ok {
		return []error{ErrPanic, err}
	}
	return []error{ErrPanic}
}
