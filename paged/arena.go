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
	// NoHugePages skips madvise(MADV_HUGEPAGE) on new slabs.
	NoHugePages bool
	// Lock mlocks the huge pages a block lies in when it is allocated (they become resident
	// and are never swapped). Allocation fails with ErrMemlock when the kernel refuses,
	// usually because RLIMIT_MEMLOCK is too small; the error gives the limit.
	Lock bool
}

// SlabBytes is the least an Arena maps at a time: blocks are carved from slabs of
// SlabBytes, or of a larger block's size rounded up to huge pages.
const SlabBytes = 64 << 20

// Arena hands out blocks of page-aligned memory mapped straight from the kernel, never from
// the Go heap, and accounts for them. Blocks are packed side by side into slabs: anonymous
// mappings that start on a 2 MiB boundary, are advised MADV_HUGEPAGE and are sized in whole
// huge pages, so every byte of a block can lie in a huge page, a small block's as well as
// the last bytes of a large one. (On the 2-vCPU Zen 4 guest a decode pass through BitNet
// b1.58 2B's 120 layers, one thread, ran 1.11-1.13x as fast for tl2 and 1.04-1.05x for i2s
// with every blob in huge pages as with blobs below 2 MiB on the Go heap and the others
// ending in 4 KiB pages, as the engine kept them before; blobs side by side in 4 KiB pages
// ran 1.00x: the pages, not the placement.)
//
// Protection and locking apply to whole huge pages, so that the kernel never has to split
// one: a huge page becomes read-only once every block in it is (Block.ReadOnly), and is
// writable while any block in it is being filled. A huge page no block uses any more is
// given back to the kernel (MADV_DONTNEED), a slab no block uses is unmapped. An Arena is
// safe for concurrent use.
type Arena struct {
	opts ArenaOptions

	mu     sync.Mutex
	slabs  []*slab
	blocks map[*Block]struct{}
	stats  ArenaStats
	closed bool
}

// ArenaStats is an arena's accounting.
type ArenaStats struct {
	Blocks    int   // live blocks
	Requested int64 // bytes asked for by Alloc, summed over live blocks
	Mapped    int64 // bytes the live blocks take (each rounded up to whole pages)
	Reserved  int64 // bytes of the slabs mapped (address space; resident only where used)
	Locked    int64 // bytes mlocked (whole huge pages)
	Resident  int64 // bytes of the live blocks resident in RAM (mincore), computed by Stats
}

// Block is one allocation: len(Bytes()) is exactly the size asked for, the memory behind it
// is zeroed and page-aligned.
type Block struct {
	arena    *Arena
	slab     *slab
	off      int    // offset in the slab
	data     []byte // len = requested size
	mapped   int    // bytes the block takes, a multiple of the page size
	readOnly bool
}

// A slab is one mapping blocks are carved from. Its huge pages ("extents") each count the
// blocks in them, and those not yet read-only.
type slab struct {
	base  unsafe.Pointer
	size  int    // a multiple of HugePageSize
	free  []span // free ranges, sorted by offset, never adjacent
	ext   []extent
	dirty []uint64 // a bit per page: a block held it since it was mapped or last released (not zero)
}

type span struct{ off, n int }

type extent struct {
	uses, open int // blocks in the extent; of them, not read-only
	readOnly   bool
	locked     bool
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

// Alloc returns size bytes of zeroed memory. size must be positive.
func (a *Arena) Alloc(size int) (*Block, error) {
	if size <= 0 {
		return nil, a.errf(ErrInvalid, "allocation of %d bytes: the size must be positive", size)
	}
	page := os.Getpagesize()
	if size > (1<<62)-HugePageSize {
		return nil, a.errf(ErrInvalid, "allocation of %d bytes is too large", size)
	}
	need := (size + page - 1) / page * page
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, a.errf(ErrArena, "allocation of %d bytes after Close", size)
	}
	var sl *slab
	off := -1
	for _, c := range a.slabs {
		if off = c.fit(need); off >= 0 {
			sl = c
			break
		}
	}
	if sl == nil {
		n := max(SlabBytes, (need+HugePageSize-1)/HugePageSize*HugePageSize)
		base, err := mapAligned(n, HugePageSize, unix.PROT_READ|unix.PROT_WRITE)
		if err != nil {
			return nil, fmt.Errorf("%w %s: mapping %d bytes: %w", ErrArena, a.opts.Name, n, err) // (ENOMEM stays visible)
		}
		if !a.opts.NoHugePages {
			// Advice only: a kernel without THP says EINVAL, which costs nothing but speed.
			_ = unix.Madvise(unsafe.Slice((*byte)(base), n), unix.MADV_HUGEPAGE)
		}
		sl = &slab{base: base, size: n, free: []span{{0, n}}, ext: make([]extent, n/HugePageSize), dirty: make([]uint64, (n/page+63)/64)}
		a.slabs = append(a.slabs, sl)
		a.stats.Reserved += int64(n)
		off = 0
	}
	if err := a.claim(sl, off, need); err != nil {
		a.dropEmpty(sl)
		return nil, err
	}
	sl.take(off, need)
	b := &Block{arena: a, slab: sl, off: off, data: unsafe.Slice((*byte)(unsafe.Add(sl.base, off)), size)[:size:size], mapped: need}
	a.blocks[b] = struct{}{}
	a.stats.Blocks++
	a.stats.Requested += int64(size)
	a.stats.Mapped += int64(need)
	return b, nil
}

// claim readies [off, off+n) of sl for a new block: its huge pages writable, locked if the
// arena locks, and the bytes zeroed where an earlier block left them dirty. On error
// nothing is changed.
func (a *Arena) claim(sl *slab, off, n int) error {
	e0, e1 := off/HugePageSize, (off+n-1)/HugePageSize
	for e := e0; e <= e1; e++ {
		x := &sl.ext[e]
		if a.opts.Lock && !x.locked {
			if err := unix.Mlock(sl.extBytes(e)); err != nil {
				for f := e0; f < e; f++ { // unlock what this call locked
					if y := &sl.ext[f]; y.locked && y.uses == 0 {
						_ = unix.Munlock(sl.extBytes(f))
						y.locked = false
						a.stats.Locked -= HugePageSize
					}
				}
				return fmt.Errorf("arena %s: %w", a.opts.Name, memlockError(HugePageSize, a.stats.Locked, err))
			}
			x.locked = true
			a.stats.Locked += HugePageSize
		}
	}
	for e := e0; e <= e1; e++ { // (one that fails leaves the others writable: less protection, no harm)
		if x := &sl.ext[e]; x.readOnly {
			if err := unix.Mprotect(sl.extBytes(e), unix.PROT_READ|unix.PROT_WRITE); err != nil {
				return a.errf(ErrArena, "%v", os.NewSyscallError("mprotect", err))
			}
			x.readOnly = false
		}
	}
	for e := e0; e <= e1; e++ {
		x := &sl.ext[e]
		x.uses++
		x.open++
	}
	page := os.Getpagesize()
	for p := off / page; p < (off+n)/page; p++ {
		if w, bit := p/64, uint64(1)<<(p%64); sl.dirty[w]&bit != 0 {
			clear(unsafe.Slice((*byte)(unsafe.Add(sl.base, p*page)), page))
		} else {
			sl.dirty[w] |= bit
		}
	}
	return nil
}

// extBytes is huge page e of the slab.
func (sl *slab) extBytes(e int) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(sl.base, e*HugePageSize)), HugePageSize)
}

// fit returns the offset of the first free range of at least n bytes, or -1.
func (sl *slab) fit(n int) int {
	for _, f := range sl.free {
		if f.n >= n {
			return f.off
		}
	}
	return -1
}

// take removes [off, off+n) from the free range that starts at off.
func (sl *slab) take(off, n int) {
	for i, f := range sl.free {
		if f.off == off {
			if f.n == n {
				sl.free = append(sl.free[:i], sl.free[i+1:]...)
			} else {
				sl.free[i] = span{off + n, f.n - n}
			}
			return
		}
	}
	panic("paged: take of a range that is not free")
}

// give returns [off, off+n) to the free ranges, merged with its neighbours.
func (sl *slab) give(off, n int) {
	i := 0
	for i < len(sl.free) && sl.free[i].off < off {
		i++
	}
	sl.free = append(sl.free, span{})
	copy(sl.free[i+1:], sl.free[i:])
	sl.free[i] = span{off, n}
	if i+1 < len(sl.free) && off+n == sl.free[i+1].off {
		sl.free[i].n += sl.free[i+1].n
		sl.free = append(sl.free[:i+1], sl.free[i+2:]...)
	}
	if i > 0 && sl.free[i-1].off+sl.free[i-1].n == off {
		sl.free[i-1].n += sl.free[i].n
		sl.free = append(sl.free[:i], sl.free[i+1:]...)
	}
}

// dropEmpty unmaps sl if no block is in it.
func (a *Arena) dropEmpty(sl *slab) error {
	if len(sl.free) != 1 || sl.free[0].n != sl.size {
		return nil
	}
	for e := range sl.ext {
		if sl.ext[e].locked {
			a.stats.Locked -= HugePageSize
		}
	}
	for i, c := range a.slabs {
		if c == sl {
			a.slabs = append(a.slabs[:i], a.slabs[i+1:]...)
			break
		}
	}
	a.stats.Reserved -= int64(sl.size)
	if err := unix.MunmapPtr(sl.base, uintptr(sl.size)); err != nil {
		return a.errf(ErrArena, "freeing %d bytes: %v", sl.size, os.NewSyscallError("munmap", err))
	}
	return nil
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

// HugeMapped reports how many bytes of the arena's slabs the kernel maps with huge pages now
// (paged.HugeMapped), or -1 when it cannot tell.
func (a *Arena) HugeMapped() int64 {
	a.mu.Lock()
	var ms [][]byte
	for _, sl := range a.slabs {
		ms = append(ms, unsafe.Slice((*byte)(sl.base), sl.size))
	}
	a.mu.Unlock()
	return HugeMapped(ms...)
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

// full is the block's pages: the requested bytes and the rest of the last page.
func (b *Block) full() []byte { return unsafe.Slice(unsafe.SliceData(b.data), b.mapped) }

// Bytes is the block's memory: exactly the size asked for. It is invalid after Free.
func (b *Block) Bytes() []byte { return b.data }

// Mapped is the number of bytes the block takes (its size rounded up to whole pages).
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

// ReadOnly makes the block read-only, as packed weights are once written: the huge pages it
// lies in are protected (mprotect PROT_READ) as soon as no block in them is still being
// written, and a stray write then faults at the writer instead of corrupting a layer.
func (b *Block) ReadOnly() error {
	a := b.arena
	a.mu.Lock()
	defer a.mu.Unlock()
	if b.data == nil {
		return a.errf(ErrArena, "ReadOnly on a freed block")
	}
	if b.readOnly {
		return nil
	}
	b.readOnly = true
	return a.settle(b.slab, b.off, b.mapped, func(x *extent) { x.open-- })
}

// settle applies f to the extents of [off, off+n) and then protects those that hold blocks,
// all of them read-only.
func (a *Arena) settle(sl *slab, off, n int, f func(*extent)) error {
	var errs []error
	for e := off / HugePageSize; e <= (off+n-1)/HugePageSize; e++ {
		x := &sl.ext[e]
		f(x)
		if x.uses > 0 && x.open == 0 && !x.readOnly {
			if err := unix.Mprotect(sl.extBytes(e), unix.PROT_READ); err != nil {
				errs = append(errs, a.errf(ErrArena, "%v", os.NewSyscallError("mprotect", err)))
				continue
			}
			x.readOnly = true
		}
	}
	return errors.Join(errs...)
}

// Free returns the block's memory to the arena, and the huge pages no block uses any more
// to the kernel. Calling it again does nothing.
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
	sl := b.slab
	delete(a.blocks, b)
	a.stats.Blocks--
	a.stats.Requested -= int64(len(b.data))
	a.stats.Mapped -= int64(b.mapped)
	b.data = nil
	var errs []error
	errs = append(errs, a.settle(sl, b.off, b.mapped, func(x *extent) {
		x.uses--
		if !b.readOnly {
			x.open--
		}
	}))
	sl.give(b.off, b.mapped)
	if len(sl.free) == 1 && sl.free[0].n == sl.size {
		return errors.Join(append(errs, a.dropEmpty(sl))...)
	}
	for e := b.off / HugePageSize; e <= (b.off+b.mapped-1)/HugePageSize; e++ {
		x := &sl.ext[e]
		if x.uses > 0 {
			continue
		}
		m := sl.extBytes(e)
		if x.locked {
			_ = unix.Munlock(m)
			x.locked = false
			a.stats.Locked -= HugePageSize
		}
		if err := unix.Madvise(m, unix.MADV_DONTNEED); err != nil {
			errs = append(errs, a.errf(ErrArena, "releasing a huge page: %v", os.NewSyscallError("madvise", err)))
			continue
		}
		page := os.Getpagesize() // (anonymous memory reads as zero after MADV_DONTNEED)
		for p := e * HugePageSize / page; p < (e+1)*HugePageSize/page; p++ {
			sl.dirty[p/64] &^= 1 << (p % 64)
		}
	}
	return errors.Join(errs...)
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
