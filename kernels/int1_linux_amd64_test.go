//go:build !noasm

package kernels

import (
	"fmt"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugeBytes maps n bytes outside the Go heap, 2 MiB aligned and advised MADV_HUGEPAGE, as
// bitd keeps weights (paged.Arena), filled with a pattern; unmapped at the end of tb.
func hugeBytes(tb testing.TB, n int) []byte {
	const huge = 2 << 20
	raw, err := unix.Mmap(-1, 0, n+huge, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = unix.Munmap(raw) })
	off := (huge - int(uintptr(unsafe.Pointer(&raw[0]))%huge)) % huge
	b := raw[off : off+n]
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE) // best effort
	for i := range b {
		b[i] = byte(i*131 + i>>9)
	}
	return b
}

// BenchmarkUnpackInt1 times the int1 unpack of one row block of a realistic K:
// Int1/K<K>/<where>/avx2, where is "stream" (one row block's blocks side by side, Stride
// 0, over and over: cache-resident) or "blob" (each row block in turn of a panel-major blob
// of 256 MiB in huge pages, its blocks 4 KiB apart, as the GEMM unpacks a layer: each
// panel from DRAM once). SetBytes: the row block's weight bytes. (One row block of a panel
// over and over is no cache-resident case: its blocks, 4 KiB apart, share their L1 sets
// and 32 of L2's.)
func BenchmarkUnpackInt1(b *testing.B) {
	if !ISAAvailable(ISAAVX2) {
		b.Skip("no AVX2")
	}
	for _, k := range []int{4096, 14336} {
		rbBytes := 4 * k
		dst := make([]byte, RowBlock*k+64)
		nrb := (256<<20/rbBytes + Int1Panel - 1) / Int1Panel * Int1Panel
		w := hugeBytes(b, nrb*rbBytes)
		for _, where := range []string{"stream", "blob"} {
			b.Run(fmt.Sprintf("Int1/K%d/%s/avx2", k, where), func(b *testing.B) {
				a := unpackArgs{W: unsafe.Pointer(&w[0]), B: unsafe.Pointer(&dst[0]), N: k / 32}
				if where == "blob" {
					a.Stride = int1BlockBytes * Int1Panel
				}
				b.SetBytes(int64(rbBytes))
				b.ReportAllocs()
				rb := 0
				for b.Loop() {
					if where == "blob" {
						p, i := rb/Int1Panel, rb%Int1Panel
						a.W = unsafe.Pointer(&w[p*Int1Panel*rbBytes+int1BlockBytes*i])
						rb = (rb + 1) % nrb
					}
					unpackInt1AVX2(argp(&a))
				}
			})
		}
	}
}
