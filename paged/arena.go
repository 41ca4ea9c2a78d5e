package paged

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// HugePageSize is the alignment of every arena block and every pack-file blob: the size of
// an x86-64 (and common arm64) transparent huge page.
const HugePageSize = 2 << 20

// ArenaOptions configures an Arena. The zero value asks for transparent huge pages and no
// locking.
type ArenaOptions struct {
	// Name appears in error messages ("arena weights: ...").
	Name string
	// NoHugePages skips madvise(MADV_HUGEPAGE) on new blocks.
	NoHugePages bool
	// Lock mlocks every block when it is allocated (its pages become resident and are
	// never swapped). Allocation fails with ErrMemlock when the kernel refuses, usually
	// because RLIMIT_MEMLOCK is too small; the error gives the limit.
	Lock bool
}

// Arena hands out blocks of page-aligned memory mapped straight from the kernel, never from
// the Go heap, and accounts for them. Each block is its own anonymous mapping, starts on a
// 2 MiB boundary (so the kernel can back it with huge pages) and is returned to the kernel
// by Free. An Arena is safe for concurrent use.
type Arena struct {
	opts ArenaOptions

	mu     sync.Mutex
	blocks map[*Block]struct{}
	stats  ArenaStats
	closed bool
}

// ArenaStats is an arena's accounting.
type ArenaStats struct {
	Blocks    int   // live blocks
	Requested int64 // bytes asked for by Alloc, summed over live blocks
	Mapped    int64 // bytes mapped (each block rounded up to whole pages)
	Locked    int64 // bytes mlocked
	Resident  int64 // bytes resident in RAM (mincore), computed by Stats
}

// Block is one allocation: len(Bytes()) is exactly the size asked for, the memory behind it
// is zeroed, page-aligned and 2 MiB-aligned.
type Block struct {
	arena    *Arena
	data     []byte // len = requested size; data[0] is the 2 MiB-aligned mapping start
	mapped   int    // bytes mapped from data[0], a multiple of the page size
	locked   bool
	readOnly bool
}

// NewArena returns an empty arena.
func NewArena(opts ArenaOptions) *Arena {
	if opts.Name == "" {
		opts.Name = "(unnamed)"
	}
	return &Arena{opts: opts, blocks: map[*Block]struct{}{}}
}

func (a *Arena) errf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w %s: %s", sentinel, a.opts.Name, fmt.Sprintf(format, args...))
}

// Alloc maps size bytes of zeroed memory. size must be positive.
func (a *Arena) Alloc(size int) (*Block, error) {
	if size <= 0 {
		return nil, a.errf(ErrInvalid, "allocation of %d bytes: the size must be positive", size)
	}
	page := os.Getpagesize()
	if size > (1<<62)-HugePageSize {
		return nil, a.errf(ErrInvalid, "allocation of %d bytes is too large", size)
	}
	mapped := (size + page - 1) / page * page
	a.mu.Lock()
	closed := a.closed
	a.mu.Unlock()
	if closed {
		return nil, a.errf(ErrArena, "allocation of %d bytes after Close", size)
	}
	base, err := mapAligned(mapped, HugePageSize, unix.PROT_READ|unix.PROT_WRITE)
	if err != nil {
		return nil, fmt.Errorf("%w %s: mapping %d bytes: %w", ErrArena, a.opts.Name, mapped, err) // (ENOMEM stays visible)
	}
	b := &Block{arena: a, data: unsafe.Slice((*byte)(base), size)[:size:size], mapped: mapped}
	full := unsafe.Slice((*byte)(base), mapped)
	if !a.opts.NoHugePages && mapped >= HugePageSize {
		// Advice only: a kernel without THP says EINVAL, which costs nothing but speed.
		_ = unix.Madvise(full, unix.MADV_HUGEPAGE)
	}
	if a.opts.Lock {
		if err := unix.Mlock(full); err != nil {
			_ = unix.MunmapPtr(base, uintptr(mapped))
			a.mu.Lock()
			already := a.stats.Locked
			a.mu.Unlock()
			return nil, fmt.Errorf("arena %s: %w", a.opts.Name, memlockError(mapped, already, err))
		}
		b.locked = true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed { // Close ran while we were mapping.
		_ = unix.MunmapPtr(base, uintptr(mapped))
		return nil, a.errf(ErrArena, "allocation of %d bytes after Close", size)
	}
	a.blocks[b] = struct{}{}
	a.stats.Blocks++
	a.stats.Requested += int64(size)
	a.stats.Mapped += int64(mapped)
	if b.locked {
		a.stats.Locked += int64(mapped)
	}
	return b, nil
}

// mapAligned maps length bytes (a multiple of the page size) of private anonymous memory
// with protection prot, starting at a multiple of align: it over-maps by align minus one
// page and unmaps the unaligned head and the tail.
func mapAligned(length, align, prot int) (unsafe.Pointer, error) {
	page := os.Getpagesize()
	total := length + align - page
	flags := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
	if prot == unix.PROT_NONE {
		flags |= unix.MAP_NORESERVE
	}
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(total), prot, flags)
	if err != nil {
		return nil, os.NewSyscallError("mmap", err)
	}
	start := uintptr(p)
	aligned := (start + uintptr(align) - 1) &^ (uintptr(align) - 1)
	if head := aligned - start; head > 0 {
		if err := unix.MunmapPtr(p, head); err != nil {
			_ = unix.MunmapPtr(p, uintptr(total))
			return nil, os.NewSyscallError("munmap", err)
		}
	}
	end := start + uintptr(total)
	if tail := end - (aligned + uintptr(length)); tail > 0 {
		if err := unix.MunmapPtr(unsafe.Add(p, aligned+uintptr(length)-start), tail); err != nil {
			_ = unix.MunmapPtr(unsafe.Add(p, aligned-start), uintptr(length)+tail)
			return nil, os.NewSyscallError("munmap", err)
		}
	}
	return unsafe.Add(p, aligned-start), nil
}

// mapFileAligned maps the first size bytes of fd read-only and shared (MAP_SHARED,
// PROT_READ, plus extra flags) at a 2 MiB-aligned address, so that blobs at 2 MiB-aligned
// file offsets are 2 MiB-aligned in memory too: it reserves an aligned range and maps the
// file over it (MAP_FIXED). Release it with unmapFile.
func mapFileAligned(fd, size, extra int) ([]byte, error) {
	page := os.Getpagesize()
	length := (size + page - 1) / page * page
	base, err := mapAligned(length, HugePageSize, unix.PROT_NONE)
	if err != nil {
		return nil, err
	}
	p, err := unix.MmapPtr(fd, 0, base, uintptr(size), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_FIXED|extra)
	if err != nil {
		_ = unix.MunmapPtr(base, uintptr(length))
		return nil, os.NewSyscallError("mmap", err)
	}
	return unsafe.Slice((*byte)(p), size), nil
}

// unmapFile releases a mapping made by mapFileAligned.
func unmapFile(m []byte) error {
	if len(m) == 0 {
		return nil
	}
	page := os.Getpagesize()
	length := (len(m) + page - 1) / page * page
	if err := unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(m)), uintptr(length)); err != nil {
		return os.NewSyscallError("munmap", err)
	}
	return nil
}

// memlockError explains a refused mlock with the process's RLIMIT_MEMLOCK.
func memlockError(want int, already int64, err error) error {
	var lim unix.Rlimit
	limit := "unknown"
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) == nil {
		limit = fmt.Sprintf("soft %s, hard %s", rlimitString(lim.Cur), rlimitString(lim.Max))
	}
	return fmt.Errorf("%w: locking %d more bytes (%d already locked by this arena): %v; RLIMIT_MEMLOCK is %s; raise it (ulimit -l, LimitMEMLOCK= in a systemd unit, memlock in limits.conf) or run without locking",
		ErrMemlock, want, already, os.NewSyscallError("mlock", err), limit)
}

func rlimitString(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return fmt.Sprintf("%d bytes", v)
}

// Stats returns the arena's accounting, with Resident measured now (mincore on every
// block).
func (a *Arena) Stats() ArenaStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	s.Resident = 0
	for b := range a.blocks {
		s.Resident += resident(b.full())
	}
	return s
}

// Close frees every live block. Blocks freed later return nil. Further Allocs fail.
func (a *Arena) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	var errs []error
	for b := range a.blocks {
		errs = append(errs, a.freeLocked(b))
	}
	return errors.Join(errs...)
}

// full is the whole mapping, the requested bytes and the rest of the last page.
func (b *Block) full() []byte { return unsafe.Slice(unsafe.SliceData(b.data), b.mapped) }

// Bytes is the block's memory: exactly the size asked for. It is invalid after Free
// (touching it then faults).
func (b *Block) Bytes() []byte { return b.data }

// Mapped is the number of bytes mapped for the block (its size rounded up to whole pages).
func (b *Block) Mapped() int { return b.mapped }

// Resident reports how many of the block's bytes are in RAM now.
func (b *Block) Resident() int64 {
	b.arena.mu.Lock()
	defer b.arena.mu.Unlock()
	if b.data == nil {
		return 0
	}
	return resident(b.full())
}

// ReadOnly makes the block read-only (mprotect PROT_READ), as packed weights are once
// written: a stray write then faults at the writer instead of corrupting a layer.
func (b *Block) ReadOnly() error {
	b.arena.mu.Lock()
	defer b.arena.mu.Unlock()
	if b.data == nil {
		return b.arena.errf(ErrArena, "ReadOnly on a freed block")
	}
	if err := unix.Mprotect(b.full(), unix.PROT_READ); err != nil {
		return b.arena.errf(ErrArena, "%v", os.NewSyscallError("mprotect", err))
	}
	b.readOnly = true
	return nil
}

// Free returns the block's memory to the kernel. Calling it again does nothing.
func (b *Block) Free() error {
	b.arena.mu.Lock()
	defer b.arena.mu.Unlock()
	return b.arena.freeLocked(b)
}

func (a *Arena) freeLocked(b *Block) error {
	if b.data == nil {
		return nil
	}
	if _, ok := a.blocks[b]; !ok {
		return nil
	}
	base := unsafe.Pointer(unsafe.SliceData(b.data))
	err := unix.MunmapPtr(base, uintptr(b.mapped))
	delete(a.blocks, b)
	a.stats.Blocks--
	a.stats.Requested -= int64(len(b.data))
	a.stats.Mapped -= int64(b.mapped)
	if b.locked {
		a.stats.Locked -= int64(b.mapped)
	}
	b.data = nil
	if err != nil {
		return a.errf(ErrArena, "freeing %d bytes: %v", b.mapped, os.NewSyscallError("munmap", err))
	}
	return nil
}

// resident counts the bytes of the page-aligned mapping m that are in RAM.
func resident(m []byte) int64 {
	if len(m) == 0 {
		return 0
	}
	return mincore(uintptr(unsafe.Pointer(unsafe.SliceData(m))), uintptr(len(m)))
}

// Resident reports how many bytes of m are in RAM now, with mincore(2): the bytes of m
// that lie in resident pages. m must be mapped memory (an arena block, a pack file or
// safetensors mapping, or any other mmap); it returns -1 when the kernel refuses.
func Resident(m []byte) int64 {
	if len(m) == 0 {
		return 0
	}
	return mincore(uintptr(unsafe.Pointer(unsafe.SliceData(m))), uintptr(len(m)))
}

// mincore counts the bytes of [addr, addr+length) that lie in resident pages, or -1.
func mincore(addr, length uintptr) int64 {
	page := uintptr(os.Getpagesize())
	start := addr &^ (page - 1)
	end := addr + length
	npages := (end - start + page - 1) / page
	vec := make([]byte, npages)
	_, _, e := unix.Syscall(unix.SYS_MINCORE, start, end-start, uintptr(unsafe.Pointer(unsafe.SliceData(vec))))
	if e != 0 {
		return -1
	}
	var n int64
	for i, v := range vec {
		if v&1 == 0 {
			continue
		}
		lo := max(start+uintptr(i)*page, addr)
		hi := min(start+uintptr(i+1)*page, end)
		n += int64(hi - lo)
	}
	return n
}

// ProcessRSS is this process's resident set in bytes (anonymous and file pages, from
// /proc/self/statm): what loading a pack file costs beyond the mapped bytes. 0 when it
// cannot be read.
func ProcessRSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}
