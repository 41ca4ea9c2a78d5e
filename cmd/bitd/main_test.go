package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"bitgo/kernels"
)

func TestUnknownCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"frobnicate"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `unknown command "frobnicate"`) {
		t.Fatalf("code %d, stderr %q", code, errb.String())
	}
	if code := run(nil, &out, &errb); code != 2 {
		t.Fatalf("no args: code %d", code)
	}
}

func TestInfoJSON(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"info", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("code %d: %s", code, errb.String())
	}
	var v struct {
		CPU     cpuInfo        `json:"cpu"`
		Formats []formatInfo   `json:"formats"`
		Kernels []kernelChoice `json:"kernels"`
		Layout  string         `json:"blob_layout"`
		Helpers *string        `json:"helpers"`
	}
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(v.Formats) != 8 || v.Formats[2].Name != "tl2" || v.Formats[2].Bits < 1.66 || v.Formats[2].Bits > 1.67 {
		t.Fatalf("formats: %+v", v.Formats)
	}
	if v.Layout != kernels.LayoutRevision {
		t.Fatalf("blob_layout %q, want %q", v.Layout, kernels.LayoutRevision)
	}
	if v.Helpers == nil || *v.Helpers != kernels.HelperPath() {
		t.Fatalf("helpers %v, want %q", v.Helpers, kernels.HelperPath())
	}
	if len(v.Kernels) != 16 || v.CPU.Arch == "" {
		t.Fatalf("kernels %d, cpu %+v", len(v.Kernels), v.CPU)
	}
}

func TestSelfcheckSmall(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"selfcheck", "-m", "70", "-k", "200", "-n", "3"}, &out, &errb); code != 0 {
		t.Fatalf("code %d\n%s\n%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "all formats agree") {
		t.Fatal(out.String())
	}
}

// A stray argument after a command's flags (a value typed without its flag, say) is an error
// that names it, not silently dropped.
func TestStrayArguments(t *testing.T) {
	for _, args := range [][]string{
		{"info", "extra"},
		{"selfcheck", "-m", "64", "2560"},
		{"tune", "--quick", "x"},
		{"bench", "--device", "xe2:0", "512"},
		{"bench", "--shape", "64x64", "4"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 || !strings.Contains(errb.String(), "unexpected argument") {
			t.Errorf("bitd %v: exit %d, stderr %q; want 2 and the argument named", args, code, errb.String())
		}
	}
}
