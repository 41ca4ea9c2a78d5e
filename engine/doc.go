// Package engine is the in-process Go API every front end uses (the daemon's IPC server,
// Go programs, benchmarks): layers are registered by spec and weights, get an id, run on
// n tokens of float32 or bf16 activations, and are freed. It checks every shape (errors name
// the layer and the mismatch), quantizes activations once per call, picks the kernel
// through package kernels' dispatch list, and runs it over row blocks on a Runner (the
// pinned worker pool of package sched in the daemon). It is safe for concurrent callers:
// many goroutines may call Forward on the same or different layers while others register
// and free; a layer freed during a call is released when the call ends.
//
// It does not own transport (package ipc), memory mapping (package paged) or arithmetic
// (package kernels).
package engine
