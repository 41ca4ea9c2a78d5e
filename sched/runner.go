package sched

// Runner adapts a Pool to callers whose Split returns nothing and takes
// the class as a string (engine.Runner): errors become panics in the
// caller. A panic in fn is re-raised as a *PanicError (wrapping ErrPanic,
// with the worker's stack); Split after Close panics with ErrClosed.
// Threads and Close are the Pool's.
type Runner struct{ *Pool }

// Split runs Pool.Split and panics with its error, if any.
func (r Runner) Split(class string, blocks int, fn func(worker, lo, hi int)) {
	if err := r.Pool.Split(Class(class), blocks, fn); err != nil {
		panic(err)
	}
}

// SplitOnce runs Pool.SplitOnce and panics with its error, if any.
func (r Runner) SplitOnce(class string, blocks int, fn func(worker, lo, hi int)) {
	if err := r.Pool.SplitOnce(Class(class), blocks, fn); err != nil {
		panic(err)
	}
}
