// Package mpread decodes msgpack from untrusted bytes, one typed value at a time, with
// every length checked before anything is read or allocated.
//
// It exists because the reflection decoder of github.com/vmihailenco/msgpack/v5 is not
// safe on hostile input: it pre-allocates slices from the element count a length prefix
// claims, so a five-byte array header claiming four billion elements exhausts memory, and
// fuzzing found a decode that hung. bitd reads two kinds of untrusted msgpack, the ipc
// wire (requests and handshakes from any local process, replies from a daemon the client
// does not trust blindly) and the header of a .bitgo pack file (paged), and both read it
// through this package. Encoding is not here: ipc appends its fixed-width hot-path
// encodings itself and encodes everything else, which is trusted, with vmihailenco.
//
// The guarantees, for any input:
//   - no read outside the input, no panic, no recursion (Skip walks nested values with an
//     explicit stack, at most Limits.Depth deep);
//   - an array or map header is checked against the bytes that remain (every element
//     needs at least one byte, every map entry two, a float32 five; ArrayLen takes the
//     caller's own minimum) and against the caller's maximum, before the caller can
//     allocate for it; what one call allocates for itself is at most 8 bytes per
//     remaining input byte (Uint64s' slice, Fields' list of keys);
//   - time proportional to the input, but for Fields, which sorts its keys (n log n in
//     their number);
//   - a failed read consumes nothing: the Reader stays at the value it could not read.
//
// Errors are *Error values wrapping ErrInvalid: the byte offset of the offending value
// and what was wrong ("want an array, got a map", "an array of 4294967295 elements cannot
// fit in the 3 bytes left"). Callers prefix what they were reading and wrap their own
// sentinel (ipc's ErrBadRequest or ErrProtocol, paged's ErrPack).
package mpread
