//go:build amd64 && !noasm

package kernels

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestAsmStoresNoPointers reads the generated assembly: no operation may write to a pointer
// field of its argument block (an assembly store has no write barrier, and the one-token
// tl2 kernel once stored a pointer past its object there, which stopped the process in the
// garbage collector). Integer fields (counters) may be written.
func TestAsmStoresNoPointers(t *testing.T) {
	blocks := []struct {
		prefix string
		typ    reflect.Type
	}{
		{"gemv", reflect.TypeFor[gemvArgs]()}, {"lutTL", reflect.TypeFor[lutArgs]()},
		{"unpack", reflect.TypeFor[unpackArgs]()}, {"tile", reflect.TypeFor[gemmArgs]()},
		{"epilogue", reflect.TypeFor[epiArgs]()}, {"float", reflect.TypeFor[floatArgs]()},
		{"gemmAMX", reflect.TypeFor[amxArgs]()}, {"tl2Panel", reflect.TypeFor[panelArgs]()},
		{"int1Panel", reflect.TypeFor[int1Args]()},
	}
	files, err := filepath.Glob("*_amd64.s")
	if err != nil || len(files) == 0 {
		t.Fatalf("no generated assembly: %v", err)
	}
	text := regexp.MustCompile(`^TEXT ·(\w+)\(SB\)`)
	load := regexp.MustCompile(`^MOVQ\s+a\+0\(FP\), (\w+)$`)
	dest := regexp.MustCompile(`(?:^|, )(-?\d*)\((\w+)\)$`)
	checked := 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var fn, reg string
		var ptrs map[int]string
		for i, line := range strings.Split(string(src), "\n") {
			line = strings.TrimSpace(line)
			if m := text.FindStringSubmatch(line); m != nil {
				fn, reg, ptrs = m[1], "", nil
				continue
			}
			if m := load.FindStringSubmatch(line); m != nil && fn != "" {
				reg, ptrs = m[1], nil
				for _, b := range blocks {
					if strings.HasPrefix(fn, b.prefix) {
						ptrs = map[int]string{}
						for j := range b.typ.NumField() {
							if fl := b.typ.Field(j); fl.Type.Kind() == reflect.UnsafePointer {
								ptrs[int(fl.Offset)] = b.typ.Name() + "." + fl.Name
							}
						}
					}
				}
				if ptrs == nil {
					t.Errorf("%s: %s takes an argument block of no known type (add its prefix here)", f, fn)
				}
				checked++
				continue
			}
			if reg == "" || ptrs == nil {
				continue
			}
			if strings.HasSuffix(line, ", "+reg) { // the block's register is reused
				reg = ""
				continue
			}
			m := dest.FindStringSubmatch(line)
			if m == nil || m[2] != reg || strings.HasPrefix(line, "CMP") || strings.HasPrefix(line, "TEST") || strings.HasPrefix(line, "PREFETCH") {
				continue
			}
			off := 0
			if m[1] != "" {
				off, _ = strconv.Atoi(m[1])
			}
			if name, ok := ptrs[off]; ok {
				t.Errorf("%s:%d: %s writes %s: %s", f, i+1, fn, name, line)
			}
		}
	}
	if checked < 100 {
		t.Errorf("checked %d operations' argument blocks, want the 115 or so generated", checked)
	}
}
