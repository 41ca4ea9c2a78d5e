//go:build integration

package tests

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bitgo/ipc"
	"bitgo/quantcfg"
)

// TestServeOnXe2Device runs `bitd serve --device xe2:0` on PoCL's CPU OpenCL device (the
// same kernel bodies an Intel GPU runs, through the portable emulation): int2 and ternary
// layers run on the device, other formats stay on the CPU, and every answer is bit for bit
// the reference's.
func TestServeOnXe2Device(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "bitd.sock")
	os.Setenv("BITD_XE2_ALLOW_ANY_DEVICE", "1")
	defer os.Unsetenv("BITD_XE2_ALLOW_ANY_DEVICE")
	os.Setenv("BITD_XE2_CACHE", filepath.Join(dir, "cl-cache"))
	defer os.Unsetenv("BITD_XE2_CACHE")
	d := startDaemon(t, sock, "--device", "xe2:0")
	c, err := ipc.Dial(sock, ipc.Options{Name: "device-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i, spec := range []quantcfg.LayerSpec{
		{Name: "gpu-int2", Format: quantcfg.Int2, Out: 70, In: 200, Bias: true},
		{Name: "gpu-i2s", Format: quantcfg.I2S, Out: 64, In: 256},
		{Name: "cpu-int8", Format: quantcfg.Int8, Out: 40, In: 96},
	} {
		l, err := newLayer(spec, uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		li, err := c.Register(l.spec, l.weights())
		if err != nil {
			t.Fatalf("%s: %v", spec.Name, err)
		}
		for _, n := range []int{1, 3, 9} {
			for _, dt := range []quantcfg.DType{quantcfg.DTypeF32, quantcfg.DTypeBF16} {
				cl, err := l.call(n, dt, uint64(n))
				if err != nil {
					t.Fatal(err)
				}
				out := make([]byte, len(cl.want))
				if err := c.Forward(li.ID, cl.x, dt, n, out); err != nil {
					t.Fatalf("%s n=%d %s: %v", spec.Name, n, dt, err)
				}
				if !bytes.Equal(out, cl.want) {
					t.Fatalf("%s n=%d %s: output differs from the reference", spec.Name, n, dt)
				}
			}
		}
	}
	log := d.log.waitFor(10*time.Second, "device open", "layer runs on the CPU", "cpu-int8")
	if !strings.Contains(log, "device open") || !strings.Contains(log, "layer runs on the CPU") || !strings.Contains(log, "cpu-int8") {
		t.Fatalf("the log does not show the device and the CPU fallback:\n%s", log)
	}
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "layer runs on the CPU") && strings.Contains(line, "gpu-") {
			t.Fatalf("a device layer fell back to the CPU: %s", line)
		}
	}
}
