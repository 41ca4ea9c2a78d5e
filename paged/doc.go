// Package paged owns page-aligned memory outside the Go heap and the files that fill it:
//
//   - Arena: blocks of anonymous memory packed side by side into slabs of whole huge
//     pages (MADV_HUGEPAGE), read-only and optionally mlocked by huge page, accounted
//     (mapped, reserved, locked, resident via mincore), freed explicitly. The engine keeps
//     packed weights in them. ReadTHP tells whether the kernel will back them with huge
//     pages.
//   - Region: sealed memfd-backed shared memory for the ipc package.
//   - The .bitgo pack file (FORMAT.md): PackWriter streams layers and tensors to disk;
//     OpenPack maps a file read-only and shared, so blobs are used in place, a restart is
//     a mapping rather than a copy, and several processes share one page-cache copy. Every
//     blob carries a CRC-32C.
//   - Safetensors files and sharded checkpoints (OpenSafetensors, OpenCheckpoint): strict
//     validation, zero-copy tensor access; WriteSafetensors for tests and tools.
//
// It does not know what the bytes mean: formats and their layouts belong to quantcfg and
// kernels. Layer metadata is kept in quantcfg's terms (quantcfg.LayerSpec).
//
// Every error wraps a sentinel of errors.go and names the file, the layer or tensor, and
// the problem. Hostile files (truncated, corrupt, lying length prefixes) give errors, never
// panics or unbounded allocations; the fuzz targets in fuzz_test.go hold that line.
package paged
