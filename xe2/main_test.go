package xe2

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// The tests run the kernels on whatever OpenCL device is present; in CI that is PoCL's
// CPU device, through the portable emulation (BITD_XE2_ALLOW_ANY_DEVICE semantics). With
// BITD_REQUIRE_OPENCL=1 (the Makefile sets it) a missing device fails the tests instead
// of skipping them, so the GPU path cannot go silently untested.

var testCache string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "xe2-test-cache-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testCache = dir
	code := m.Run()
	closeTestDevices()
	os.RemoveAll(dir)
	os.Exit(code)
}

func testOptions() Options {
	o, _ := DefaultOptions()
	o.AllowAnyDevice = true
	o.CacheDir = testCache
	o.TunePath = ""
	o.NoDPAS = false
	o.SoftDiv = false
	return o
}

var testDevs struct {
	sync.Mutex
	m map[string]*Device
}

// testDevice opens xe2:0 with options adjusted by variant ("" default, "nodpas",
// "softdiv"), shared across tests; it skips (or fails under BITD_REQUIRE_OPENCL=1)
// when no device can run the kernels.
func testDevice(t testing.TB, variant string) *Device {
	t.Helper()
	testDevs.Lock()
	defer testDevs.Unlock()
	if d, ok := testDevs.m[variant]; ok {
		return d
	}
	o := testOptions()
	switch variant {
	case "nodpas":
		o.NoDPAS = true
	case "softdiv":
		o.SoftDiv = true
	case "optimized":
		o.OptimizeEmulated = true
	}
	var d *Device
	var err error
	if variant == "optimized" {
		// Without the known-answer run: its default tiles, built with optimization, would
		// cost PoCL minutes; the test itself checks exactness.
		rep := Probe(o, false)
		if len(rep.Usable()) == 0 {
			noDevice(t, fmt.Errorf("%s", rep.Reason))
		}
		d, err = openInfo(rep.Usable()[0], o)
	} else {
		d, err = Open(0, o)
	}
	if err != nil {
		noDevice(t, err)
	}
	if testDevs.m == nil {
		testDevs.m = map[string]*Device{}
	}
	testDevs.m[variant] = d
	return d
}

func noDevice(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("BITD_REQUIRE_OPENCL") == "1" {
		t.Fatalf("BITD_REQUIRE_OPENCL=1 but no OpenCL device can run the xe2 kernels: %v", err)
	}
	t.Skipf("no OpenCL device (set BITD_REQUIRE_OPENCL=1 to make this a failure): %v", err)
}

func closeTestDevices() {
	testDevs.Lock()
	defer testDevs.Unlock()
	for _, d := range testDevs.m {
		d.Close()
	}
}

// TestRequireDevice fails under BITD_REQUIRE_OPENCL=1 when discovery finds no usable
// device: CI installs PoCL and must exercise the kernels.
func TestRequireDevice(t *testing.T) {
	rep := Probe(testOptions(), false)
	if len(rep.Usable()) == 0 {
		noDevice(t, fmt.Errorf("%s; %s", rep.Reason, summarize(rep)))
	}
	t.Logf("xe2:0 = %s (%s, path %s)", rep.Usable()[0].Name, rep.Usable()[0].Type, rep.Usable()[0].Path)
}
