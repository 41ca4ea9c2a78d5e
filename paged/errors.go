package paged

import "errors"

// Sentinel errors. Every error this package returns wraps one of them (test with
// errors.Is) and its message names the file, the layer or tensor, and the problem.
var (
	// ErrRegion: a shared-memory region could not be created, mapped or trusted.
	ErrRegion = errors.New("shared memory region")
	// ErrArena: arena memory could not be mapped, advised, protected or released.
	ErrArena = errors.New("arena")
	// ErrMemlock: the kernel refused to lock arena memory (usually RLIMIT_MEMLOCK); the
	// message gives the limit and how to raise it.
	ErrMemlock = errors.New("mlock refused")
	// ErrPack: a .bitgo pack file is malformed: wrong magic, truncated, a header that does
	// not decode or does not describe a consistent file.
	ErrPack = errors.New("bad pack file")
	// ErrPackVersion: a pack file of a major version this reader does not know.
	ErrPackVersion = errors.New("unsupported pack file version")
	// ErrChecksum: a blob or header whose CRC-32C does not match the recorded one.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrSafetensors: a safetensors file or a sharded checkpoint index is malformed.
	ErrSafetensors = errors.New("bad safetensors file")
	// ErrNotFound: no layer or tensor of that name.
	ErrNotFound = errors.New("not found")
	// ErrInvalid: an argument a caller passed is out of range (a size, a name, a shape).
	ErrInvalid = errors.New("invalid argument")
)
