package paged

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"
)

func TestReadTHP(t *testing.T) {
	old := thpDir
	defer func() { thpDir = old }()
	thpDir = t.TempDir()
	write := func(name, v string) {
		if err := os.WriteFile(filepath.Join(thpDir, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ReadTHP(); err == nil || !strings.Contains(err.Error(), "enabled") {
		t.Fatalf("no files: %v", err)
	}
	write("enabled", "always madvise never\n")
	write("defrag", "always defer defer+madvise [madvise] never\n")
	if _, err := ReadTHP(); err == nil || !strings.Contains(err.Error(), "no [selected] value") {
		t.Fatalf("nothing selected: %v", err)
	}
	for _, c := range []struct {
		enabled string
		advised bool
	}{{"[always] madvise never", true}, {"always [madvise] never", true}, {"always madvise [never]", false}} {
		write("enabled", c.enabled+"\n")
		got, err := ReadTHP()
		if err != nil {
			t.Fatal(err)
		}
		if got.Defrag != "madvise" || got.Advised() != c.advised || !strings.Contains(c.enabled, "["+got.Enabled+"]") {
			t.Errorf("%q: %+v, advised %v", c.enabled, got, got.Advised())
		}
	}
}

// TestHugeMapped: the smaps fields of the mappings that overlap a slice are summed, and an
// unreadable smaps says -1; an arena block, advised MADV_HUGEPAGE and touched, is counted
// whole.
func TestHugeMapped(t *testing.T) {
	t.Run("smaps", func(t *testing.T) {
		old := smapsPath
		defer func() { smapsPath = old }()
		smapsPath = filepath.Join(t.TempDir(), "smaps")
		all := make([]byte, 6<<20)
		m := all[:4<<20]
		lo := uintptr(unsafe.Pointer(&m[0]))
		smaps := fmt.Sprintf("%x-%x rw-p 00000000 00:00 0\nAnonHugePages:     16384 kB\n"+
			"%x-%x rw-p 00000000 00:00 0\nAnonHugePages:      2048 kB\nFilePmdMapped:         0 kB\n"+
			"%x-%x r--s 00000000 fe:00 9 /x.bitgo\nFilePmdMapped:      4096 kB\nAnonHugePages:         0 kB\n"+
			"%x-%x rw-p 00000000 00:00 0\nAnonHugePages:      8192 kB\n",
			lo-(40<<20), lo-(8<<20), lo-(8<<20), lo+(1<<20), lo+(1<<20), lo+(3<<20), lo+(4<<20), lo+(20<<20))
		if err := os.WriteFile(smapsPath, []byte(smaps), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := HugeMapped(m); got != 6<<20 {
			t.Errorf("HugeMapped = %d, want %d (the two mappings that overlap, not those before and after)", got, 6<<20)
		}
		// Two slices in one mapping count it once; one in the mapping after adds it.
		if got := HugeMapped(m[:1<<20], m[1<<20:2<<20], all[5<<20:5<<20+1]); got != 14<<20 {
			t.Errorf("HugeMapped of three slices = %d, want %d", got, 14<<20)
		}
		smapsPath = filepath.Join(t.TempDir(), "missing")
		if got := HugeMapped(m); got != -1 {
			t.Errorf("without smaps: %d, want -1", got)
		}
	})
	t.Run("arena", func(t *testing.T) {
		thp, err := ReadTHP()
		if err != nil || !thp.Advised() {
			t.Skipf("the kernel gives no huge pages to advised memory here (%+v, %v)", thp, err)
		}
		a := NewArena(ArenaOptions{})
		defer a.Close()
		b, err := a.Alloc(HugePageSize)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(b.Bytes()); i += 4096 {
			b.Bytes()[i] = 1
		}
		// With direct compaction on the fault of advised memory, the kernel finds one.
		got := HugeMapped(b.Bytes())
		switch thp.Defrag {
		case "always", "madvise", "defer+madvise":
			if got < HugePageSize {
				t.Errorf("a touched 2 MiB block of the arena: %d bytes in huge pages (THP %+v)", got, thp)
			}
		default:
			t.Logf("a touched 2 MiB block of the arena: %d bytes in huge pages (THP %+v)", got, thp)
		}
	})
}
