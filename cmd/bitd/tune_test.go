package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"bitgo/xe2"
)

// xe2TestDevice skips (or fails under BITD_REQUIRE_OPENCL=1) without an OpenCL device.
func xe2TestDevice(t *testing.T) {
	t.Helper()
	o, _ := xe2.DefaultOptions()
	o.AllowAnyDevice = true
	if rep := xe2.Probe(o, false); len(rep.Usable()) == 0 {
		if os.Getenv("BITD_REQUIRE_OPENCL") == "1" {
			t.Fatalf("BITD_REQUIRE_OPENCL=1 but no OpenCL device: %s", rep.Reason)
		}
		t.Skipf("no OpenCL device: %s", rep.Reason)
	}
}

// TestTuneEndToEnd runs `bitd tune` on the test device (PoCL in CI: its timings mean
// nothing, the path must work), then `bitd bench` with the table it wrote.
func TestTuneEndToEnd(t *testing.T) {
	xe2TestDevice(t)
	dir := t.TempDir()
	table := filepath.Join(dir, "tune.json")
	cache := filepath.Join(dir, "cache")
	var out, errb bytes.Buffer
	args := []string{"tune", "--device", "xe2:0", "--allow-any-device", "--cache", cache,
		"--shapes", "40x96", "--tokens", "1,12", "--quick", "--iters", "2", "--out", table}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("tune: code %d\n%s\n%s", code, out.String(), errb.String())
	}
	tt, err := xe2.LoadTuneTable(table)
	if err != nil {
		t.Fatal(err)
	}
	if len(tt.Devices) != 1 || len(tt.Devices[0].Entries) != 2 {
		t.Fatalf("table: %+v", tt)
	}
	var decodeTile string
	for k, e := range tt.Devices[0].Entries {
		tile, err := xe2.ParseTile(e.Tile)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(k, "/n1") {
			decodeTile = e.Tile
			if tile.Prefill || tile.TN != 1 {
				t.Errorf("%s: tile %s is not a one-token decode tile", k, e.Tile)
			}
		} else if !strings.HasSuffix(k, "/n32") || !tile.Prefill {
			t.Errorf("unexpected bucket %s -> %s", k, e.Tile)
		}
		if e.Candidates == 0 || e.Micros <= 0 {
			t.Errorf("%s: %+v", k, e)
		}
	}
	// A second run merges into the same table instead of replacing it.
	args2 := []string{"tune", "--device", "xe2:0", "--allow-any-device", "--cache", cache,
		"--shapes", "16x64", "--tokens", "1", "--quick", "--iters", "1", "--out", table}
	if code := run(args2, &out, &errb); code != 0 {
		t.Fatalf("second tune: code %d\n%s", code, errb.String())
	}
	if tt, err = xe2.LoadTuneTable(table); err != nil || len(tt.Devices[0].Entries) != 3 {
		t.Fatalf("merged table: %v %+v", err, tt)
	}
	// bench uses the tuned tile.
	out.Reset()
	bargs := []string{"bench", "--device", "xe2:0", "--allow-any-device", "--cache", cache, "--tune", table,
		"--shapes", "40x96", "--tokens", "1", "--iters", "2", "--json"}
	if code := run(bargs, &out, &errb); code != 0 {
		t.Fatalf("bench: code %d\n%s", code, errb.String())
	}
	var br struct {
		Results []xe2.BenchResult `json:"results"`
		Read    float64           `json:"read_gbps"`
	}
	if err := json.Unmarshal(out.Bytes(), &br); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(br.Results) != 1 || br.Results[0].Tile != decodeTile || br.Read <= 0 || br.Results[0].GBps <= 0 {
		t.Fatalf("bench: %+v (tuned decode tile %s)", br, decodeTile)
	}
}

func TestTuneUsage(t *testing.T) {
	for _, args := range [][]string{
		{"tune"},
		{"tune", "--device", "gpu0"},
		{"tune", "--device", "xe2:0", "--shapes", "40by96"},
		{"tune", "--device", "xe2:0", "--tokens", "0"},
		{"tune", "--device", "xe2:0", "--act", "per-row"},
		{"bench", "--device", "xe2:x"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 || errb.Len() == 0 {
			t.Errorf("%v: code %d, stderr %q", args, code, errb.String())
		}
	}
}

// TestInfoWithoutOpenCL: with no OpenCL library, bitd info still works, says why the
// GPU backend is unavailable, and the CPU paths are untouched (a child process, since the
// library is loaded once per process).
func TestInfoWithoutOpenCL(t *testing.T) {
	if os.Getenv("BITD_INFO_CHILD") == "1" {
		var out, errb bytes.Buffer
		if code := run([]string{"info"}, &out, &errb); code != 0 {
			t.Fatalf("info: code %d: %s", code, errb.String())
		}
		if !strings.Contains(out.String(), "unavailable: ") || !strings.Contains(out.String(), "CPU backend serves every layer") {
			t.Fatalf("info output:\n%s", out.String())
		}
		if code := run([]string{"selfcheck", "-m", "40", "-k", "64", "-n", "2"}, &out, &errb); code != 0 {
			t.Fatalf("selfcheck without OpenCL: code %d: %s", code, errb.String())
		}
		out.Reset()
		if code := run([]string{"tune", "--device", "xe2:0"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "unavailable") {
			t.Fatalf("tune without OpenCL: code %d: %s", code, errb.String())
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestInfoWithoutOpenCL$")
	cmd.Env = append(os.Environ(), "BITD_INFO_CHILD=1", "BITD_OPENCL_LIB=/nonexistent/libOpenCL.so.1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
