package paged

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
