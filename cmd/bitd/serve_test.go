package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"bitgo/engine"
	"bitgo/ipc"
	"bitgo/kernels"
	"bitgo/paged"
	"bitgo/quantcfg"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestServeConfigDefaultsEnvFlags(t *testing.T) {
	cfg, warns, err := parseServeFlags(nil, envOf(nil), io.Discard)
	if err != nil || len(warns) != 0 {
		t.Fatalf("defaults: %v %v", err, warns)
	}
	if d := defaultServeConfig(); cfg.Socket != d.Socket || cfg.MetricsAddr != "127.0.0.1:9464" || cfg.Region != 64<<20 {
		t.Fatalf("defaults: %+v", cfg)
	}
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/7")
	if s := defaultSocket(); s != "/run/user/7/bitd.sock" {
		t.Fatalf("socket with XDG_RUNTIME_DIR: %s", s)
	}
	t.Setenv("XDG_RUNTIME_DIR", "")
	if s := defaultSocket(); s != fmt.Sprintf("/tmp/bitd-%d.sock", os.Getuid()) {
		t.Fatalf("socket without XDG_RUNTIME_DIR: %s", s)
	}

	pack := filepath.Join(t.TempDir(), "m.bitgo")
	os.WriteFile(pack, nil, 0o644)
	env := map[string]string{
		"BITD_SOCKET": "/tmp/x.sock", "BITD_THREADS": "3", "BITD_PACK": pack, "BITD_PACK_COPY": "1", "BITD_METRICS_ADDR": "",
		"BITD_ALLOW_GID": "10,20", "BITD_MAX_REGION": "256M", "BITD_REGION": "1GiB", "BITD_MAX_LAYERS": "zero",
		"BITD_MAX_SESSIONS": "-1", "BITD_LOG_LEVEL": "loud", "BITD_DRAIN_TIMEOUT": "5s", "BITD_MAX_SESSION_BYTES": "12x",
	}
	cfg, warns, err = parseServeFlags(nil, envOf(env), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Socket != "/tmp/x.sock" || cfg.Threads != 3 || len(cfg.Packs) != 1 || !cfg.PackCopy || cfg.MetricsAddr != "" ||
		fmt.Sprint(cfg.AllowGIDs) != "[10 20]" || cfg.MaxRegion != 256<<20 || cfg.Region != 256<<20 || cfg.DrainTimeout != 5*time.Second {
		t.Fatalf("env overrides: %+v", cfg)
	}
	d := defaultServeConfig()
	if cfg.MaxLayers != d.MaxLayers || cfg.MaxSessions != d.MaxSessions || cfg.LogLevel != "info" || cfg.MaxSessionBytes != d.MaxSessionBytes {
		t.Fatalf("bad env values must fall back: %+v", cfg)
	}
	all := strings.Join(warns, "\n")
	for _, want := range []string{"BITD_MAX_LAYERS=\"zero\"", "BITD_MAX_SESSIONS=\"-1\"", "BITD_LOG_LEVEL=\"loud\"", "BITD_MAX_SESSION_BYTES=\"12x\"", "larger than the maximum"} {
		if !strings.Contains(all, want) {
			t.Errorf("no warning about %s in:\n%s", want, all)
		}
	}

	// Flags win; the first --pack replaces the environment's list.
	pack2 := filepath.Join(t.TempDir(), "n.bitgo")
	os.WriteFile(pack2, nil, 0o644)
	cfg, _, err = parseServeFlags([]string{"--threads", "1", "--pack", pack2, "--pack-copy=false", "--allow-gid", "5", "--max-region", "2G", "--region", "8M", "--metrics-addr", "127.0.0.1:0"}, envOf(env), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Threads != 1 || cfg.PackCopy || len(cfg.Packs) != 1 || cfg.Packs[0] != pack2 || fmt.Sprint(cfg.AllowGIDs) != "[5]" || cfg.MaxRegion != 2<<30 || cfg.Region != 8<<20 || cfg.MetricsAddr != "127.0.0.1:0" {
		t.Fatalf("flags: %+v", cfg)
	}

	// A BITD_PACK_COPY that is not a boolean is reported and ignored.
	cfg, warns, _ = parseServeFlags(nil, envOf(map[string]string{"BITD_PACK_COPY": "maybe"}), io.Discard)
	if cfg.PackCopy || !strings.Contains(strings.Join(warns, "\n"), `BITD_PACK_COPY="maybe" ignored`) {
		t.Fatalf("BITD_PACK_COPY=maybe: %v, warnings %q", cfg.PackCopy, warns)
	}

	// Files after --pack (and flags after them) are read too.
	cfg, _, err = parseServeFlags([]string{"--pack", pack, pack2, "--threads", "4"}, envOf(nil), io.Discard)
	if err != nil || fmt.Sprint(cfg.Packs) != fmt.Sprint([]string{pack, pack2}) || cfg.Threads != 4 {
		t.Fatalf("--pack A B --threads 4: %v %+v", err, cfg)
	}

	// Bad flags are errors that name the flag.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--threads", "-2"}, "--threads -2"},
		{[]string{"--pack", "/nonexistent.bitgo"}, "--pack /nonexistent.bitgo"},
		{[]string{"--metrics-addr", "localhost"}, "--metrics-addr"},
		{[]string{"--region", "512K"}, "--region"},
		{[]string{"--log-format", "xml"}, "--log-format"},
		{[]string{"--socket", "/tmp/" + strings.Repeat("s", 120)}, "--socket"},
		{[]string{"--drain-timeout", "0s"}, "--drain-timeout"},
		{[]string{"--max-region", "ten"}, "max-region"},
		{[]string{"extra.bitgo"}, "--pack extra.bitgo"},
	} {
		_, _, err := parseServeFlags(c.args, envOf(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, c.want)
		}
	}
	if code := run([]string{"serve", "--threads", "-1"}, io.Discard, io.Discard); code != 2 {
		t.Fatalf("bad flag exit code %d", code)
	}
	if code := run([]string{"serve", "-h"}, io.Discard, io.Discard); code != 0 {
		t.Fatalf("-h exit code %d", code)
	}
}

func TestParseSize(t *testing.T) {
	for s, want := range map[string]int64{"0": 0, "4096": 4096, "64M": 64 << 20, "64MiB": 64 << 20, "1g": 1 << 30, "2GB": 2 << 30, " 3K ": 3 << 10, "1T": 1 << 40} {
		if got, err := parseSize(s); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "M", "-1", "1.5G", "12x", "99999999999T"} {
		if _, err := parseSize(s); err == nil {
			t.Errorf("parseSize(%q) accepted", s)
		}
	}
}

func TestMapErr(t *testing.T) {
	for _, c := range []struct {
		err   error
		shape error
		want  ipc.Status
	}{
		{fmt.Errorf("x: %w", engine.ErrNoLayer), ipc.ErrShape, ipc.StatusNotFound},
		{fmt.Errorf("x: %w", engine.ErrExists), ipc.ErrShape, ipc.StatusInvalid},
		{fmt.Errorf("x: %w", engine.ErrClosed), ipc.ErrShape, ipc.StatusShuttingDown},
		{fmt.Errorf("x: %w", engine.ErrBadRequest), ipc.ErrShape, ipc.StatusShape},
		{fmt.Errorf("x: %w", kernels.ErrShape), ipc.ErrInvalid, ipc.StatusInvalid},
		{fmt.Errorf("x: %w", kernels.ErrNonFinite), ipc.ErrShape, ipc.StatusNonFinite},
		{fmt.Errorf("x: %w", kernels.ErrWeights), ipc.ErrShape, ipc.StatusInvalid},
		{fmt.Errorf("x: %w", kernels.ErrNoKernel), ipc.ErrShape, ipc.StatusUnsupported},
		{fmt.Errorf("x: %w", quantcfg.ErrUnsupported), ipc.ErrShape, ipc.StatusUnsupported},
		{fmt.Errorf("x: %w: %w", paged.ErrArena, os.NewSyscallError("mmap", syscall.ENOMEM)), ipc.ErrShape, ipc.StatusLimit},
		{errors.New("disk on fire"), ipc.ErrShape, ipc.StatusInternal},
	} {
		got := mapErr(c.err, c.shape)
		if st := ipc.StatusOf(got); st != c.want || got.Error() != c.err.Error() {
			t.Errorf("%v: status %v (%q), want %v with the same message", c.err, st, got, c.want)
		}
	}
}

// testLayer is a layer with random weights, its logical form and its packed blob.
type testLayer struct {
	spec   quantcfg.LayerSpec
	w      kernels.Weights
	blob   []byte
	scales []float32
	bias   []float32
}

func randomLayer(t *testing.T, r *rand.Rand, spec quantcfg.LayerSpec) testLayer {
	t.Helper()
	spec = spec.WithDefaults()
	l := testLayer{spec: spec}
	l.w = kernels.RandomWeights(r, spec.Format, spec.Out, spec.In, 1)
	l.scales = make([]float32, spec.NumScales())
	for i := range l.scales {
		l.scales[i] = 0.01 + r.Float32()
	}
	if spec.Bias {
		l.bias = make([]float32, spec.Out)
		for i := range l.bias {
			l.bias[i] = r.Float32() - 0.5
		}
	}
	var err error
	if l.blob, err = kernels.PackNew(spec.Format, spec.Out, spec.In, l.w); err != nil {
		t.Fatal(err)
	}
	return l
}

// logical is the layer's weights as the wire uploads them.
func (l testLayer) logical() []byte { return l.w.Bytes(l.spec.Format) }

// want is the reference output for x (f32 values) in dtype dt, as bytes.
func (l testLayer) want(t *testing.T, x []float32, n int, dt quantcfg.DType) []byte {
	t.Helper()
	kl, err := kernels.NewLayer(l.spec, l.blob, l.scales, l.bias)
	if err != nil {
		t.Fatal(err)
	}
	y, err := kernels.Reference(kl, x, n)
	if err != nil {
		t.Fatal(err)
	}
	return encodeAs(y, dt)
}

func encodeAs(f []float32, dt quantcfg.DType) []byte {
	b := make([]byte, len(f)*dt.Size())
	for i, v := range f {
		if dt == quantcfg.DTypeBF16 {
			binary.LittleEndian.PutUint16(b[2*i:], kernels.BF16(v))
		} else {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
	}
	return b
}

func randX(r *rand.Rand, n int, dt quantcfg.DType) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
		if dt == quantcfg.DTypeBF16 {
			x[i] = kernels.RoundBF16(x[i])
		}
	}
	return x
}

func TestServeEndToEnd(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	dir := t.TempDir()
	shared := randomLayer(t, r, quantcfg.LayerSpec{Name: "model.layers.0.mlp.up_proj", Format: quantcfg.I2S, Out: 96, In: 256, Bias: true})
	pack := filepath.Join(dir, "m.bitgo")
	w, err := paged.CreatePack(pack, paged.PackOptions{Model: "test", Layout: engine.PackLayout, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddLayer(paged.PackLayer{Spec: shared.spec, Scales: shared.scales, Bias: shared.bias}, shared.blob); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := defaultServeConfig()
	cfg.Socket = filepath.Join(dir, "bitd.sock")
	cfg.Packs = []string{pack}
	cfg.MetricsAddr = "127.0.0.1:0"
	cfg.Threads = 2
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	ready := make(chan string, 1)
	done := make(chan int, 1)
	go func() { done <- serve(ctx, cfg, newLogger(&logs, "debug", "text"), reg, func(a string) { ready <- a }) }()
	var metricsAddr string
	select {
	case metricsAddr = <-ready:
	case code := <-done:
		t.Fatalf("serve exited %d:\n%s", code, logs.String())
	}

	a, err := ipc.Dial(cfg.Socket, ipc.Options{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := ipc.Dial(cfg.Socket, ipc.Options{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	// The shared layer, bit for bit against the reference, decode and prefill, f32 and bf16.
	li, err := a.Lookup(shared.spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !li.Shared || li.Spec.Out != 96 || li.Spec.Format != quantcfg.I2S {
		t.Fatalf("lookup: %+v", li)
	}
	forward := func(c *ipc.Client, id ipc.LayerID, l testLayer, n int, dt quantcfg.DType) {
		t.Helper()
		x := randX(r, n*l.spec.In, dt)
		out := make([]byte, n*l.spec.Out*dt.Size())
		if err := c.Forward(id, encodeAs(x, dt), dt, n, out); err != nil {
			t.Fatalf("%s n=%d %s: %v", l.spec.Name, n, dt, err)
		}
		if !bytes.Equal(out, l.want(t, x, n, dt)) {
			t.Fatalf("%s n=%d %s: output differs from the reference", l.spec.Name, n, dt)
		}
	}
	for _, n := range []int{1, 5, 33} {
		forward(a, li.ID, shared, n, quantcfg.DTypeF32)
		forward(a, li.ID, shared, n, quantcfg.DTypeBF16)
	}
	if err := a.Free(li.ID); !errors.Is(err, ipc.ErrDenied) {
		t.Fatalf("free of a shared layer: %v", err)
	}

	// Private layers, uploaded logical and packed; two sessions may use the same name.
	for i, spec := range []quantcfg.LayerSpec{
		{Name: "q", Format: quantcfg.Int2, Out: 64, In: 128, Scale: quantcfg.GroupScale(64), Codebook: quantcfg.Codebook{-3, -1, 1, 3}},
		{Name: "q", Format: quantcfg.TL2, Out: 40, In: 100},
		{Name: "f", Format: quantcfg.BF16, Out: 16, In: 24, Bias: true},
		{Name: "g", Format: quantcfg.F32, Out: 8, In: 8},
	} {
		l := randomLayer(t, r, spec)
		c := []*ipc.Client{a, b}[i%2]
		got, err := c.Register(spec, ipc.Weights{Data: l.logical(), Scales: l.scales, Bias: l.bias})
		if err != nil {
			t.Fatalf("register %s %s: %v", spec.Name, spec.Format, err)
		}
		forward(c, got.ID, l, 3, quantcfg.DTypeF32)
		packed, err := c.Register(spec, ipc.Weights{Data: l.blob, Packed: true, Layout: kernels.LayoutRevision, Scales: l.scales, Bias: l.bias})
		if err == nil {
			t.Fatalf("a second layer named %q in one session was accepted", spec.Name)
		}
		spec.Name += "-packed"
		if packed, err = c.Register(spec, ipc.Weights{Data: l.blob, Packed: true, Layout: kernels.LayoutRevision, Scales: l.scales, Bias: l.bias}); err != nil {
			t.Fatalf("register packed %s: %v", spec.Format, err)
		}
		forward(c, packed.ID, l, 2, quantcfg.DTypeBF16)
	}

	// A packed blob names its layout revision: one whose layout of the format differs from
	// this build's is refused at begin, as is a packed tl1 or tl2 blob that names none (an
	// older client); formats unchanged since are read from older revisions too.
	for _, c := range []struct {
		format quantcfg.Format
		layout string
		want   string // "": accepted; else a part of the refusal
	}{
		{quantcfg.TL2, "", `argument "layout"`},
		{quantcfg.TL2, "kernels/3", "tl2 blobs changed layout in kernels/4"},
		{quantcfg.TL1, "kernels/2", "tl1 blobs changed layout in kernels/3"},
		{quantcfg.TL1, "kernels/3", ""},
		{quantcfg.I2S, "", ""},
		{quantcfg.I2S, "kernels/1", ""},
		{quantcfg.I2S, "kernels/10", `"kernels/10" is not one this build knows`},
		{quantcfg.Int1, "kernels/8", "int1 blobs changed layout in kernels/9"},
		{quantcfg.Int1, "kernels/9", ""},
	} {
		l := randomLayer(t, r, quantcfg.LayerSpec{Name: fmt.Sprintf("rev-%s-%s", c.format, c.layout), Format: c.format, Out: 40, In: 100})
		got, err := a.Register(l.spec, ipc.Weights{Data: l.blob, Packed: true, Layout: c.layout, Scales: l.scales})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("packed %s in layout %q: %v", c.format, c.layout, err)
		case c.want == "":
			forward(a, got.ID, l, 1, quantcfg.DTypeF32)
		case !errors.Is(err, ipc.ErrInvalid) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), l.spec.Name):
			t.Errorf("packed %s in layout %q: %v (want invalid, naming the layer and %q)", c.format, c.layout, err, c.want)
		}
	}
	lg := randomLayer(t, r, quantcfg.LayerSpec{Name: "rev-logical", Format: quantcfg.I2S, Out: 32, In: 128})
	if _, err := a.Register(lg.spec, ipc.Weights{Data: lg.logical(), Layout: kernels.LayoutRevision, Scales: lg.scales}); !errors.Is(err, ipc.ErrBadRequest) {
		t.Errorf("a layout with logical weights: %v", err)
	}

	// Bad uploads and activations get the right statuses.
	tern := randomLayer(t, r, quantcfg.LayerSpec{Name: "t", Format: quantcfg.I2S, Out: 32, In: 128})
	wq := tern.logical()
	wq[7] = 2
	if _, err := a.Register(tern.spec, ipc.Weights{Data: wq, Scales: tern.scales}); !errors.Is(err, ipc.ErrInvalid) {
		t.Fatalf("non-ternary i2s weights: %v", err)
	}
	if _, err := a.Register(tern.spec, ipc.Weights{Data: tern.blob[:len(tern.blob)-1], Packed: true, Scales: tern.scales}); !errors.Is(err, ipc.ErrInvalid) {
		t.Fatalf("short packed blob: %v", err)
	}
	x := randX(r, shared.spec.In, quantcfg.DTypeF32)
	x[9] = float32(math.NaN())
	if err := a.Forward(li.ID, encodeAs(x, quantcfg.DTypeF32), quantcfg.DTypeF32, 1, make([]byte, 4*shared.spec.Out)); !errors.Is(err, ipc.ErrNonFinite) {
		t.Fatalf("NaN activation: %v", err)
	}
	forward(a, li.ID, shared, 1, quantcfg.DTypeF32)

	// /metrics serves the daemon's metrics, and they pass promlint.
	body := getMetrics(t, metricsAddr)
	for _, want := range []string{`bitd_ipc_call_duration_seconds_bucket{format="i2s",op="forward"`, `bitd_ipc_errors_total{code="non_finite",op="forward"} 1`,
		"bitd_ipc_sessions 2", `bitd_engine_weight_read_bytes_total{format="i2s"}`, "bitd_engine_shared_layers 1", "bitd_engine_huge_page_bytes "} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Under an adaptive tuning one-token i2s forwards of a layer whose pieces are not too
	// small to time run a kernel pair's site, which /metrics shows.
	if tn, _ := kernels.CurrentTuning(); tn.Adaptive() && tn.Idle() == "" {
		big := randomLayer(t, r, quantcfg.LayerSpec{Name: "adapt", Format: quantcfg.I2S, Out: 2560, In: 2560})
		got, err := a.Register(big.spec, ipc.Weights{Data: big.blob, Packed: true, Layout: kernels.LayoutRevision, Scales: big.scales})
		if err != nil {
			t.Fatal(err)
		}
		for range 4 {
			forward(a, got.ID, big, 1, quantcfg.DTypeF32)
		}
		body := getMetrics(t, metricsAddr)
		st, err := a.Stats()
		if err != nil {
			t.Fatal(err)
		}
		shape := fmt.Sprintf(`shape="2560x2560",threads="%d"`, min(int(st.Engine["threads"]), 4))
		for _, want := range []string{`bitd_kernel_adaptive_hardware_prefetch{format="i2s",` + shape + "}", `bitd_kernel_adaptive_switches_total{format="i2s",` + shape + "}",
			`bitd_kernel_adaptive_seconds_per_kib{format="i2s",prefetch="hardware",` + shape + "}"} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	}
	if problems, err := testutil.CollectAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("metrics lint: %v %+v", err, problems)
	}

	// b leaves: its layers are freed; a's and the shared one stay.
	st, _ := a.Stats()
	before := st.Engine["layers"]
	b.Close()
	deadline := time.Now().Add(5 * time.Second)
	for st.Sessions != 1 || st.Engine["layers"] != before-4 {
		if time.Now().After(deadline) {
			t.Fatalf("after b left: %+v (engine layers were %v)", st, before)
		}
		time.Sleep(10 * time.Millisecond)
		st, _ = a.Stats()
	}

	// Shutdown: serve returns 0 and the client hears why.
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exit code %d:\n%s", code, logs.String())
	}
	if err := a.Ping(); !errors.Is(err, ipc.ErrShuttingDown) {
		t.Fatalf("call after shutdown: %v", err)
	}
	for _, want := range []string{"bitd serve: configuration", "bitd serve: ready", "bitd serve: draining", "bitd serve: stopped"} {
		if strings.Count(logs.String(), want) != 1 {
			t.Errorf("log line %q not there once:\n%s", want, logs.String())
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// getMetrics returns what the daemon's /metrics at addr serves.
func getMetrics(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}
