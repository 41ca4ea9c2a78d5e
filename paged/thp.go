package paged

import (
	"fmt"
	"os"
	"strings"
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
