package paged

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"
)

// THP is the kernel's transparent huge page policy, as /sys/kernel/mm/transparent_hugepage
// gives it: Enabled is "always", "madvise" or "never"; Defrag is how hard a fault tries to
// find a huge page ("always", "defer", "defer+madvise", "madvise", "never").
type THP struct {
	Enabled string `json:"enabled"`
	Defrag  string `json:"defrag"`
}

// thpDir is where the kernel publishes the policy (a variable for the tests).
var thpDir = "/sys/kernel/mm/transparent_hugepage"

// ReadTHP returns the kernel's huge page policy, or an error naming the file it could not
// read (a kernel without THP has none).
func ReadTHP() (THP, error) {
	var t THP
	for _, f := range []struct {
		name string
		dst  *string
	}{{"enabled", &t.Enabled}, {"defrag", &t.Defrag}} {
		path := thpDir + "/" + f.name
		b, err := os.ReadFile(path)
		if err != nil {
			return THP{}, err
		}
		v, ok := bracketed(string(b))
		if !ok {
			return THP{}, fmt.Errorf("%s: no [selected] value in %q", path, strings.TrimSpace(string(b)))
		}
		*f.dst = v
	}
	return t, nil
}

// Advised tells whether memory advised MADV_HUGEPAGE, as the Arena's slabs are, gets huge
// pages under this policy.
func (t THP) Advised() bool { return t.Enabled == "always" || t.Enabled == "madvise" }

// bracketed returns the word in brackets of a sysfs choice line ("always [madvise] never").
func bracketed(s string) (string, bool) {
	for _, w := range strings.Fields(s) {
		if len(w) > 2 && w[0] == '[' && w[len(w)-1] == ']' {
			return w[1 : len(w)-1], true
		}
	}
	return "", false
}

// smapsPath is the kernel's account of this process's mappings (a variable for the tests).
var smapsPath = "/proc/self/smaps"

// HugeMapped reports how many bytes of the mappings that overlap any of ms the kernel maps
// with huge pages (/proc/self/smaps: AnonHugePages, FilePmdMapped and ShmemPmdMapped of
// each), each mapping counted once and whole even where it reaches beyond them, or -1 when
// it cannot tell.
func HugeMapped(ms ...[]byte) int64 {
	type rng struct{ lo, hi uintptr }
	var rs []rng
	for _, m := range ms {
		if len(m) > 0 {
			lo := uintptr(unsafe.Pointer(unsafe.SliceData(m)))
			rs = append(rs, rng{lo, lo + uintptr(len(m))})
		}
	}
	if len(rs) == 0 {
		return 0
	}
	b, err := os.ReadFile(smapsPath)
	if err != nil {
		return -1
	}
	var n int64
	inside := false
	for _, line := range strings.Split(string(b), "\n") {
		if lo, hi, ok := vmaRange(line); ok {
			inside = false
			for _, r := range rs {
				inside = inside || lo < r.hi && r.lo < hi
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "AnonHugePages:", "FilePmdMapped:", "ShmemPmdMapped:":
			if inside && len(f) >= 3 && f[2] == "kB" {
				if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					n += v << 10
				}
			}
		}
	}
	return n
}

// vmaRange parses the "lo-hi perms offset dev inode [path]" line that starts a mapping's
// entry in smaps (or maps).
func vmaRange(line string) (lo, hi uintptr, ok bool) {
	f := strings.Fields(line)
	if len(f) < 5 {
		return 0, 0, false
	}
	a, b, found := strings.Cut(f[0], "-")
	if !found {
		return 0, 0, false
	}
	x, err1 := strconv.ParseUint(a, 16, 64)
	y, err2 := strconv.ParseUint(b, 16, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return uintptr(x), uintptr(y), true
}
