// Package paged owns page-aligned memory outside the Go heap: huge-page arenas for packed
// weights, memfd-backed shared regions for the ipc package, and the .bitgo pack file
// (a msgpack header and 2 MiB-aligned blobs, mapped read-only, every blob checksummed).
// It does not know what the bytes mean: formats belong to quantcfg and kernels.
package paged
