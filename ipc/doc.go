// Package ipc is bitd's wire: the handshake on a unix socket, one sealed shared-memory
// region per client (a header of atomic words, a ring of request/response slots and a
// data area), msgpack headers in the slots, spin-then-futex signalling, the server that
// serves each client on its own OS thread, and a Go client.
//
// PROTOCOL.md in this directory specifies the protocol completely enough to write a
// client in any language.
//
// ipc does not know what a request means: the server calls a Handler (the engine,
// through an adapter in cmd/bitd) to register, look up, run and free layers. It owns
// sessions, their limits, and the bounds checks of every offset and length that comes
// from shared memory or from msgpack.
package ipc
