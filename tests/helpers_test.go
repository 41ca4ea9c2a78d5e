//go:build integration

package tests

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"bitgo/engine"
	"bitgo/ipc"
	"bitgo/kernels"
	"bitgo/paged"
	"bitgo/quantcfg"
)

var bitdBin string

// TestMain finds (or builds) bitd, and doubles as a client process: with BITD_TEST_CLIENT
// set the test binary runs that client instead of the tests (see clientMain).
func TestMain(m *testing.M) {
	if mode := os.Getenv("BITD_TEST_CLIENT"); mode != "" {
		os.Exit(clientMain(mode))
	}
	bitdBin = os.Getenv("BITD_BIN")
	if bitdBin == "" || !fileExists(bitdBin) {
		dir, err := os.MkdirTemp("", "bitd-bin")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		bitdBin = filepath.Join(dir, "bitd")
		cmd := exec.Command("go", "build", "-o", bitdBin, "bitgo/cmd/bitd")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building bitd:", err)
			os.Exit(1)
		}
		defer os.RemoveAll(dir)
	}
	code := m.Run()
	os.Exit(code)
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}

// tail keeps the last bytes a process wrote (for failure messages) and signals when a
// line containing mark appears.
type tail struct {
	mu    sync.Mutex
	buf   []byte
	mark  string
	found chan struct{}
	once  sync.Once
}

func newTail(r io.Reader, mark string) *tail {
	t := &tail{mark: mark, found: make(chan struct{})}
	go func() {
		s := bufio.NewScanner(r)
		s.Buffer(make([]byte, 64<<10), 1<<20)
		for s.Scan() {
			line := s.Text()
			t.mu.Lock()
			t.buf = append(t.buf, line...)
			t.buf = append(t.buf, '\n')
			if len(t.buf) > 64<<10 {
				t.buf = t.buf[len(t.buf)-32<<10:]
			}
			t.mu.Unlock()
			if t.mark != "" && strings.Contains(line, t.mark) {
				t.once.Do(func() { close(t.found) })
			}
		}
	}()
	return t
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// waitFor returns what the process wrote once it holds every one of want, or what it holds
// after limit: a line logged before a reply reaches the client reaches this tail through a
// pipe, possibly later.
func (t *tail) waitFor(limit time.Duration, want ...string) string {
	deadline := time.Now().Add(limit)
	for {
		s, all := t.String(), true
		for _, w := range want {
			all = all && strings.Contains(s, w)
		}
		if all || time.Now().After(deadline) {
			return s
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// daemon is a running `bitd serve`.
type daemon struct {
	cmd  *exec.Cmd
	sock string
	log  *tail
	done chan error
}

// startDaemon runs bitd serve on sock and waits until it is ready.
func startDaemon(t *testing.T, sock string, args ...string) *daemon {
	t.Helper()
	all := append([]string{"serve", "--socket", sock, "--metrics-addr", "", "--log-level", "debug"}, args...)
	cmd := exec.Command(bitdBin, all...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, sock: sock, log: newTail(stderr, "bitd serve: ready"), done: make(chan error, 1)}
	go func() { d.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-d.done
		if t.Failed() {
			t.Logf("bitd log:\n%s", d.log.String())
		}
	})
	select {
	case <-d.log.found:
	case err := <-d.done:
		d.done <- err
		t.Fatalf("bitd exited before it was ready (%v):\n%s", err, d.log.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("bitd not ready after 30 s:\n%s", d.log.String())
	}
	return d
}

// wait returns the daemon's exit error, waiting at most d.
func (d *daemon) wait(limit time.Duration) (error, bool) {
	select {
	case err := <-d.done:
		d.done <- err
		return err, true
	case <-time.After(limit):
		return nil, false
	}
}

// Layers with deterministic random weights, and their reference outputs.

type layer struct {
	spec   quantcfg.LayerSpec
	w      kernels.Weights
	blob   []byte
	scales []float32
	bias   []float32
	kl     *kernels.Layer
}

func newLayer(spec quantcfg.LayerSpec, seed uint64) (*layer, error) {
	r := rand.New(rand.NewPCG(seed, 0x6269_7467_6f))
	spec = spec.WithDefaults()
	l := &layer{spec: spec}
	l.w = kernels.RandomWeights(r, spec.Format, spec.Out, spec.In, 1.0/8)
	l.scales = make([]float32, spec.NumScales())
	for i := range l.scales {
		l.scales[i] = 0.001 + r.Float32()/64
	}
	if spec.Bias {
		l.bias = make([]float32, spec.Out)
		for i := range l.bias {
			l.bias[i] = r.Float32() - 0.5
		}
	}
	var err error
	if l.blob, err = kernels.PackNew(spec.Format, spec.Out, spec.In, l.w); err != nil {
		return nil, err
	}
	if l.kl, err = kernels.NewLayer(spec, l.blob, l.scales, l.bias); err != nil {
		return nil, err
	}
	return l, nil
}

// logical is the layer's weights as the wire uploads them.
func (l *layer) logical() []byte { return l.w.Bytes(l.spec.Format) }

func (l *layer) weights() ipc.Weights {
	return ipc.Weights{Data: l.logical(), Scales: l.scales, Bias: l.bias}
}

// call is one forward with its input and the reference output, as wire bytes.
type call struct {
	n    int
	dt   quantcfg.DType
	x    []byte
	want []byte
}

func (l *layer) call(n int, dt quantcfg.DType, seed uint64) (call, error) {
	x := l.inputs(n, seed)
	y, err := kernels.Reference(l.kl, x, n)
	if err != nil {
		return call{}, err
	}
	return call{n: n, dt: dt, x: encode(x, dt), want: encode(y, dt)}, nil
}

// inputs are n tokens of random activations (bf16 values, exact in either dtype).
func (l *layer) inputs(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 0x78))
	x := make([]float32, n*l.spec.In)
	for i := range x {
		x[i] = kernels.RoundBF16(float32(r.NormFloat64()))
	}
	return x
}

// fastCall is call with the answer computed by the kernel bitd selects (one thread) instead
// of the reference: for calls too large for the reference to be quick. The kernels are
// checked bit for bit against the reference by their own tests.
func (l *layer) fastCall(n int, dt quantcfg.DType, seed uint64) (call, error) {
	x := l.inputs(n, seed)
	k, err := kernels.Select(l.kl, n)
	if err != nil {
		return call{}, err
	}
	var a kernels.Acts
	if err := l.kl.Quantize(x, n, &a); err != nil {
		return call{}, err
	}
	k.Prepare(l.kl, &a)
	y := make([]float32, n*l.kl.Layout.M)
	k.Run(l.kl, &a, 0, l.kl.Layout.RowBlocks(), y)
	return call{n: n, dt: dt, x: encode(x, dt), want: encode(y, dt)}, nil
}

func encode(f []float32, dt quantcfg.DType) []byte {
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

// sharedSpecs are the layers of the load test's pack file (seeded by their index).
var sharedSpecs = []quantcfg.LayerSpec{
	{Name: "shared.0.i2s", Format: quantcfg.I2S, Out: 256, In: 512, Bias: true},
	{Name: "shared.1.int2", Format: quantcfg.Int2, Out: 192, In: 256, Scale: quantcfg.GroupScale(64)},
	{Name: "shared.2.int8", Format: quantcfg.Int8, Out: 128, In: 384},
	{Name: "shared.3.tl1", Format: quantcfg.TL1, Out: 96, In: 256},
	{Name: "shared.4.f32", Format: quantcfg.F32, Out: 64, In: 128},
}

// privateSpecs are what each load-test client registers for itself.
var privateSpecs = []quantcfg.LayerSpec{
	{Name: "private.int1", Format: quantcfg.Int1, Out: 160, In: 256},
	{Name: "private.tl2", Format: quantcfg.TL2, Out: 128, In: 240},
	{Name: "private.bf16", Format: quantcfg.BF16, Out: 32, In: 64, Bias: true},
}

// writePack writes the shared layers to a pack file.
func writePack(t *testing.T, path string) {
	t.Helper()
	w, err := paged.CreatePack(path, paged.PackOptions{Model: "integration", Layout: engine.PackLayout, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range sharedSpecs {
		l, err := newLayer(s, uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.AddLayer(paged.PackLayer{Spec: l.spec, Scales: l.scales, Bias: l.bias}, l.blob); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// child starts this test binary as a client process in mode, with env.
func child(t *testing.T, mode string, env ...string) (*exec.Cmd, io.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), append([]string{"BITD_TEST_CLIENT=" + mode}, env...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, out
}

// shortDir is a temporary directory with a path short enough for a unix socket.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "bitd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
