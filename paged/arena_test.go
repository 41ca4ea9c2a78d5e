package paged

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestArenaAllocAlignedZeroedAccounted(t *testing.T) {
	a := NewArena(ArenaOptions{Name: "test"})
	defer a.Close()
	sizes := []int{1, 4095, 4096, 1 << 20, 3<<20 + 17}
	var blocks []*Block
	var wantReq, wantMapped int64
	for _, n := range sizes {
		b, err := a.Alloc(n)
		if err != nil {
			t.Fatalf("Alloc(%d): %v", n, err)
		}
		blocks = append(blocks, b)
		d := b.Bytes()
		if len(d) != n || cap(d) != n {
			t.Fatalf("Alloc(%d): len %d cap %d", n, len(d), cap(d))
		}
		// The first block starts its slab on a huge page boundary; every block on a page.
		if addr := uintptr(unsafe.Pointer(&d[0])); addr%uintptr(os.Getpagesize()) != 0 || len(blocks) == 1 && addr%HugePageSize != 0 {
			t.Fatalf("Alloc(%d) at %#x: not aligned", n, addr)
		}
		if b.Mapped()%os.Getpagesize() != 0 || b.Mapped() < n || b.Mapped()-n >= os.Getpagesize() {
			t.Fatalf("Alloc(%d): mapped %d", n, b.Mapped())
		}
		wantReq += int64(n)
		wantMapped += int64(b.Mapped())
	}
	s := a.Stats()
	if s.Blocks != len(sizes) || s.Requested != wantReq || s.Mapped != wantMapped || s.Locked != 0 {
		t.Fatalf("stats %+v, want %d blocks, %d requested, %d mapped", s, len(sizes), wantReq, wantMapped)
	}
	if s.Resident != 0 {
		t.Fatalf("untouched blocks resident: %d", s.Resident)
	}
	for _, b := range blocks {
		for i, v := range b.Bytes() {
			if v != 0 {
				t.Fatalf("block of %d: byte %d is %d, not zeroed", len(b.Bytes()), i, v)
			}
		}
	}
	// Touch the big block: it becomes resident (whole pages of it).
	big := blocks[len(blocks)-1]
	for i := 0; i < len(big.Bytes()); i += 4096 {
		big.Bytes()[i] = 1
	}
	if r := big.Resident(); r != int64(big.Mapped()) {
		t.Fatalf("touched block resident %d, want %d", r, big.Mapped())
	}
	if r := a.Stats().Resident; r < int64(big.Mapped()) {
		t.Fatalf("arena resident %d < touched block %d", r, big.Mapped())
	}
	// The block is not in the Go heap: the runtime does not know its address.
	if err := big.Free(); err != nil {
		t.Fatal(err)
	}
	if err := big.Free(); err != nil {
		t.Fatalf("second Free: %v", err)
	}
	if s := a.Stats(); s.Blocks != len(sizes)-1 || s.Mapped != wantMapped-int64(big.Mapped()) {
		t.Fatalf("after Free: %+v", s)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.Blocks != 0 || s.Mapped != 0 || s.Requested != 0 {
		t.Fatalf("after Close: %+v", s)
	}
	if _, err := a.Alloc(10); !errors.Is(err, ErrArena) {
		t.Fatalf("Alloc after Close: %v", err)
	}
	if err := blocks[0].Free(); err != nil {
		t.Fatalf("Free after Close: %v", err)
	}
}

func TestArenaBadSizes(t *testing.T) {
	a := NewArena(ArenaOptions{Name: "weights"})
	defer a.Close()
	for _, n := range []int{0, -1, 1 << 62} {
		_, err := a.Alloc(n)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "weights") {
			t.Errorf("Alloc(%d): %v", n, err)
		}
	}
	// More than the address space can hold fails with an error, not a crash.
	// The kernel's ENOMEM stays visible (the daemon tells a client a limit was hit).
	if _, err := a.Alloc(1 << 61); !errors.Is(err, ErrArena) || !errors.Is(err, syscall.ENOMEM) {
		t.Errorf("Alloc(2^61): %v, want ErrArena and ENOMEM", err)
	}
}

func TestArenaHugePageAdvice(t *testing.T) {
	a := NewArena(ArenaOptions{})
	defer a.Close()
	b, err := a.Alloc(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	addr := uintptr(unsafe.Pointer(&b.Bytes()[0]))
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skip(err)
	}
	// Find the VMA holding the block and check the kernel recorded the advice ("hg").
	var inside bool
	for _, line := range strings.Split(string(smaps), "\n") {
		if lo, hi, ok := vmaRange(line); ok {
			inside = lo <= addr && addr < hi
			continue
		}
		if inside && strings.HasPrefix(line, "VmFlags:") {
			if !strings.Contains(line, " hg") {
				t.Fatalf("block VMA lacks the hugepage advice: %s", line)
			}
			return
		}
	}
	t.Fatalf("block at %#x not found in /proc/self/smaps", addr)
}

func setPanicOnFault() (restore func()) {
	old := debug.SetPanicOnFault(true)
	return func() { debug.SetPanicOnFault(old) }
}

func TestArenaReadOnly(t *testing.T) {
	a := NewArena(ArenaOptions{})
	defer a.Close()
	b, err := a.Alloc(8192)
	if err != nil {
		t.Fatal(err)
	}
	b.Bytes()[5] = 7
	if err := b.ReadOnly(); err != nil {
		t.Fatal(err)
	}
	if b.Bytes()[5] != 7 {
		t.Fatal("content lost")
	}
	// A write now faults; with SetPanicOnFault it panics instead of killing the process.
	if !faults(func() { b.Bytes()[6] = 1 }) {
		t.Fatal("write to a read-only block did not fault")
	}
	if err := b.Free(); err != nil {
		t.Fatal(err)
	}
	if err := b.ReadOnly(); !errors.Is(err, ErrArena) {
		t.Fatalf("ReadOnly after Free: %v", err)
	}
}

func faults(f func()) (faulted bool) {
	defer setPanicOnFault()()
	defer func() { faulted = recover() != nil }()
	f()
	return false
}

func TestArenaLock(t *testing.T) {
	a := NewArena(ArenaOptions{Lock: true, Name: "locked"})
	defer a.Close()
	b, err := a.Alloc(64 << 10)
	if errors.Is(err, ErrMemlock) {
		t.Skipf("this environment refuses 64 KiB of mlock: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.Locked != HugePageSize || s.Resident != 64<<10 { // (locked by huge page)
		t.Fatalf("locked block: %+v", s)
	}
	b.Free()
	if s := a.Stats(); s.Locked != 0 {
		t.Fatalf("after Free: %+v", s)
	}
}

// TestArenaLockRefused checks the error when RLIMIT_MEMLOCK refuses: as an unprivileged
// process with the limit at zero. Root bypasses the limit (CAP_IPC_LOCK), so as root the
// check runs in a child process that drops to user nobody.
func TestArenaLockRefused(t *testing.T) {
	if os.Getenv("BITGO_MLOCK_CHILD") == "1" {
		lockRefusedCheck(t)
		return
	}
	if os.Geteuid() != 0 {
		lockRefusedCheck(t)
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	dir, err := os.MkdirTemp("", "bitgo-mlock-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "paged.test")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Skip(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestArenaLockRefused$", "-test.v")
	cmd.Env = append(os.Environ(), "BITGO_MLOCK_CHILD=1", "GOCOVERDIR=")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child as nobody: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "refused as expected") {
		t.Fatalf("child did not run the check:\n%s", out)
	}
}

func lockRefusedCheck(t *testing.T) {
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &old); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: 0, Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_MEMLOCK, &old)
	a := NewArena(ArenaOptions{Lock: true, Name: "weights"})
	defer a.Close()
	_, err := a.Alloc(1 << 20)
	if !errors.Is(err, ErrMemlock) {
		t.Fatalf("mlock over RLIMIT_MEMLOCK=0: %v", err)
	}
	for _, want := range []string{"weights", "RLIMIT_MEMLOCK is soft 0 bytes", "ulimit -l", "2097152"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if s := a.Stats(); s.Blocks != 0 || s.Mapped != 0 {
		t.Errorf("refused block still accounted: %+v", s)
	}
	t.Log("refused as expected:", err)
}

func TestResidentOfUnalignedSlice(t *testing.T) {
	a := NewArena(ArenaOptions{NoHugePages: true})
	defer a.Close()
	b, err := a.Alloc(3 * 4096)
	if err != nil {
		t.Fatal(err)
	}
	b.Bytes()[4096+10] = 1 // page 1 only
	if r := Resident(b.Bytes()[100:200]); r != 0 {
		t.Errorf("page 0 slice resident %d", r)
	}
	if r := Resident(b.Bytes()[4000:4200]); r != 104 {
		t.Errorf("slice straddling pages 0-1: resident %d, want 104 (the part in page 1)", r)
	}
	if r := Resident(make([]byte, 0)); r != 0 {
		t.Errorf("empty: %d", r)
	}
}

func TestProcessRSSSeesTouchedPages(t *testing.T) {
	// Pages the runtime holds back from earlier tests are returned first, and the
	// 64 MiB are a fresh block of an arena (a mapping of its own, outside the heap): a
	// heap slice could reuse pages already resident, and the scavenger could return
	// others while we count (CI saw 59.7 MiB of growth that way).
	debug.FreeOSMemory()
	a := NewArena(ArenaOptions{Name: "rss", NoHugePages: true})
	defer a.Close()
	before := ProcessRSS()
	if before <= 0 {
		t.Fatalf("ProcessRSS() = %d", before)
	}
	blk, err := a.Alloc(64 << 20)
	if err != nil {
		t.Fatal(err)
	}
	b := blk.Bytes()
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	if grew := ProcessRSS() - before; grew < 60<<20 {
		t.Fatalf("RSS grew by %d bytes after touching a fresh 64 MiB block", grew)
	}
}

// TestArenaPacksBlocksInHugePages: small blocks lie side by side in one slab, the tail of a
// block larger than a huge page shares its huge page with the next block, and a slab is
// unmapped when its last block goes.
func TestArenaPacksBlocksInHugePages(t *testing.T) {
	a := NewArena(ArenaOptions{Name: "pack"})
	defer a.Close()
	page := os.Getpagesize()
	sizes := []int{1 << 20, 100, 3<<20 + 5, 700 << 10}
	var bs []*Block
	for _, n := range sizes {
		b, err := a.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	addr := func(b *Block) uintptr { return uintptr(unsafe.Pointer(&b.Bytes()[0])) }
	for i := 1; i < len(bs); i++ {
		if got, want := addr(bs[i]), addr(bs[i-1])+uintptr(bs[i-1].Mapped()); got != want {
			t.Fatalf("block %d at %#x, want %#x (right after block %d)", i, got, want, i-1)
		}
	}
	if s := a.Stats(); s.Reserved != SlabBytes || s.Mapped != int64(1<<20+page+(3<<20+page)+700<<10) {
		t.Fatalf("stats %+v", s)
	}
	// A block larger than a slab gets a slab of its own, in whole huge pages.
	huge, err := a.Alloc(SlabBytes + 1)
	if err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.Reserved != SlabBytes+SlabBytes+HugePageSize {
		t.Fatalf("with a block of a slab and a byte: %+v", s)
	}
	if err := huge.Free(); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.Reserved != SlabBytes {
		t.Fatalf("its slab was not unmapped: %+v", s)
	}
	for _, b := range bs {
		if err := b.Free(); err != nil {
			t.Fatal(err)
		}
	}
	if s := a.Stats(); s.Reserved != 0 || s.Blocks != 0 || s.Mapped != 0 {
		t.Fatalf("after freeing every block: %+v", s)
	}
}

// TestArenaReuseZeroedAndProtectedByHugePage: a block that takes the place of a freed one
// reads as zero; a huge page turns read-only only once every block in it is, and writable
// again while a new block in it is being written.
func TestArenaReuseZeroedAndProtectedByHugePage(t *testing.T) {
	a := NewArena(ArenaOptions{})
	defer a.Close()
	x, err := a.Alloc(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	y, err := a.Alloc(64 << 10) // the same huge page
	if err != nil {
		t.Fatal(err)
	}
	for i := range x.Bytes() {
		x.Bytes()[i] = 0xAB
	}
	if err := x.ReadOnly(); err != nil {
		t.Fatal(err)
	}
	if faults(func() { y.Bytes()[1] = 2 }) {
		t.Fatal("writing the block still being filled faulted: its huge page was protected early")
	}
	if err := y.ReadOnly(); err != nil {
		t.Fatal(err)
	}
	if !faults(func() { x.Bytes()[0] = 1 }) || !faults(func() { y.Bytes()[0] = 1 }) {
		t.Fatal("writes to read-only blocks did not fault")
	}
	xAt := &x.Bytes()[0]
	if err := x.Free(); err != nil {
		t.Fatal(err)
	}
	z, err := a.Alloc(64 << 10) // x's place, an exact fit: y keeps the huge page in use
	if err != nil {
		t.Fatal(err)
	}
	if &z.Bytes()[0] != xAt {
		t.Fatalf("the new block is not in the freed one's place")
	}
	for i, v := range z.Bytes() {
		if v != 0 {
			t.Fatalf("reused block: byte %d is %#x, not zeroed", i, v)
		}
	}
	// The huge page is writable while z is filled (y with it: the price of protecting
	// whole huge pages), and read-only again once z is.
	z.Bytes()[5] = 9
	if err := z.ReadOnly(); err != nil {
		t.Fatal(err)
	}
	if !faults(func() { y.Bytes()[0] = 1 }) || !faults(func() { z.Bytes()[0] = 1 }) {
		t.Fatal("a block writable after every block of its huge page is read-only again")
	}
	if y.Bytes()[1] != 2 || z.Bytes()[5] != 9 {
		t.Fatal("content lost")
	}
}
