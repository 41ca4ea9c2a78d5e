//go:build integration

package tests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"bitgo/ipc"
	"bitgo/quantcfg"
)

// The long call: a float layer (every build has kernels for it) and a token count
// calibrated so that one forward takes about longTarget, whatever kernels this build has;
// 2048x2048, so that the data area's token limit allows that on a fast machine too.
var longSpec = quantcfg.LayerSpec{Name: "long", Format: quantcfg.F32, Out: 2048, In: 2048}

const longTarget = 400 * time.Millisecond

// setupLong registers the long layer and returns it with a calibrated call and how long
// the last calibration call took (tests act at a fraction of that into the call).
func setupLong(c *ipc.Client) (*layer, ipc.LayerID, call, time.Duration, error) {
	l, err := newLayer(longSpec, 99)
	if err != nil {
		return nil, 0, call{}, 0, err
	}
	li, err := c.Register(l.spec, l.weights())
	if err != nil {
		return nil, 0, call{}, 0, err
	}
	maxN := c.DataSize() / (4 * (l.spec.In + l.spec.Out))
	n := 16
	for {
		x := encode(l.inputs(n, 1), quantcfg.DTypeF32)
		t0 := time.Now()
		if err := c.Forward(li.ID, x, quantcfg.DTypeF32, n, make([]byte, 4*n*l.spec.Out)); err != nil {
			return nil, 0, call{}, 0, err
		}
		d := time.Since(t0)
		if d >= longTarget || n >= maxN {
			cl, err := l.fastCall(n, quantcfg.DTypeF32, 1)
			return l, li.ID, cl, d, err
		}
		next := int(float64(n) * float64(longTarget) / float64(max(d, time.Microsecond)) * 1.2)
		n = min(maxN, max(2*n, next))
	}
}

// clientMain is the body of the client processes (TestMain runs it with
// BITD_TEST_CLIENT set).
func clientMain(mode string) int {
	sock := os.Getenv("BITD_TEST_SOCK")
	fail := func(format string, args ...any) int {
		fmt.Printf("FAIL "+format+"\n", args...)
		return 1
	}
	c, err := ipc.Dial(sock, ipc.Options{Name: "test-" + mode})
	if err != nil {
		return fail("dial: %v", err)
	}
	defer c.Close()
	switch mode {
	case "long":
		_, id, cl, _, err := setupLong(c)
		if err != nil {
			return fail("setup: %v", err)
		}
		out := make([]byte, len(cl.want))
		for {
			fmt.Println("call")
			if err := c.Forward(id, cl.x, cl.dt, cl.n, out); err != nil {
				return fail("forward: %v", err)
			}
		}
	case "load":
		seed, _ := strconv.ParseUint(os.Getenv("BITD_TEST_SEED"), 10, 64)
		dur, err := time.ParseDuration(os.Getenv("BITD_TEST_DURATION"))
		if err != nil {
			return fail("duration: %v", err)
		}
		calls, err := loadClient(c, seed, dur)
		if err != nil {
			return fail("after %d calls: %v", calls, err)
		}
		fmt.Printf("ok calls=%d\n", calls)
		return 0
	}
	return fail("unknown mode %q", mode)
}

// loadClient looks up the shared layers, registers its private ones, and calls forward
// on all of them in turn until dur has passed, checking every output bit for bit.
func loadClient(c *ipc.Client, seed uint64, dur time.Duration) (int, error) {
	type target struct {
		name  string
		id    ipc.LayerID
		calls []call
	}
	var targets []target
	add := func(l *layer, id ipc.LayerID) error {
		t := target{name: l.spec.Name, id: id}
		for i, n := range []int{1, 1, 3, 8} {
			dt := []quantcfg.DType{quantcfg.DTypeF32, quantcfg.DTypeBF16}[i%2]
			cl, err := l.call(n, dt, seed*1000+uint64(i))
			if err != nil {
				return err
			}
			t.calls = append(t.calls, cl)
		}
		targets = append(targets, t)
		return nil
	}
	for i, s := range sharedSpecs {
		l, err := newLayer(s, uint64(i))
		if err != nil {
			return 0, err
		}
		li, err := c.Lookup(s.Name)
		if err != nil {
			return 0, err
		}
		if err := add(l, li.ID); err != nil {
			return 0, err
		}
	}
	for i, s := range privateSpecs {
		l, err := newLayer(s, seed*100+uint64(i))
		if err != nil {
			return 0, err
		}
		li, err := c.Register(s, l.weights())
		if err != nil {
			return 0, err
		}
		if err := add(l, li.ID); err != nil {
			return 0, err
		}
	}
	calls := 0
	out := make([]byte, 1<<16)
	for start := time.Now(); time.Since(start) < dur; {
		for _, t := range targets {
			for _, cl := range t.calls {
				o := out[:len(cl.want)]
				if err := c.Forward(t.id, cl.x, cl.dt, cl.n, o); err != nil {
					return calls, fmt.Errorf("%s n=%d %s: %w", t.name, cl.n, cl.dt, err)
				}
				if !bytes.Equal(o, cl.want) {
					return calls, fmt.Errorf("%s n=%d %s: output differs from the reference", t.name, cl.n, cl.dt)
				}
				calls++
			}
		}
	}
	return calls, nil
}

// stats dials a fresh client and returns the daemon's figures.
func waitStats(t *testing.T, c *ipc.Client, what string, ok func(ipc.Stats) bool) ipc.Stats {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := c.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %+v", what, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestClientKilledMidCall(t *testing.T) {
	sock := filepath.Join(shortDir(t), "bitd.sock")
	d := startDaemon(t, sock, "--threads", "2")
	watcher, err := ipc.Dial(sock, ipc.Options{Name: "watcher"})
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	small, err := newLayer(privateSpecs[0], 5)
	if err != nil {
		t.Fatal(err)
	}
	sl, err := watcher.Register(small.spec, small.weights())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := small.call(2, quantcfg.DTypeF32, 1)
	if err != nil {
		t.Fatal(err)
	}

	cmd, out := child(t, "long", "BITD_TEST_SOCK="+sock)
	lines := bufio.NewScanner(out)
	for i := 0; i < 2; i++ { // the second "call" is a call after calibration
		if !lines.Scan() {
			t.Fatalf("client ended before calling: %v", lines.Err())
		}
		if l := lines.Text(); l != "call" {
			t.Fatalf("client: %s", l)
		}
	}
	time.Sleep(longTarget / 4)
	waitStats(t, watcher, "the client's session", func(s ipc.Stats) bool { return s.Sessions == 2 })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	st := waitStats(t, watcher, "the killed client's session to be freed", func(s ipc.Stats) bool {
		return s.Sessions == 1 && s.Engine["layers"] == 1
	})
	t.Logf("after the kill: %d session, %v engine layers", st.Sessions, st.Engine["layers"])
	got := make([]byte, len(cl.want))
	if err := watcher.Forward(sl.ID, cl.x, cl.dt, cl.n, got); err != nil || !bytes.Equal(got, cl.want) {
		t.Fatalf("the daemon stopped serving others: %v", err)
	}
	if _, exited := d.wait(0); exited {
		t.Fatal("the daemon exited")
	}
}

func TestDaemonKilledMidCall(t *testing.T) {
	sock := filepath.Join(shortDir(t), "bitd.sock")
	d := startDaemon(t, sock, "--threads", "2")
	c, err := ipc.Dial(sock, ipc.Options{Name: "victim"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, id, cl, dur, err := setupLong(c)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- c.Forward(id, cl.x, cl.dt, cl.n, make([]byte, len(cl.want))) }()
	time.Sleep(dur / 4)
	killed := time.Now()
	if err := syscall.Kill(d.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		took := time.Since(killed)
		t.Logf("the blocked call failed %v after SIGKILL: %v", took, err)
		if !errors.Is(err, ipc.ErrPeerGone) || !errors.Is(err, ipc.ErrClosed) {
			t.Fatalf("want ErrPeerGone, got %v", err)
		}
		if took > time.Second {
			t.Fatalf("the client noticed after %v, want < 1 s", took)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call still hangs 5 s after the daemon was killed")
	}
	if err := c.Ping(); !errors.Is(err, ipc.ErrClosed) {
		t.Fatalf("later call: %v", err)
	}
	d.wait(5 * time.Second)

	// A restarted daemon takes over the (stale) socket; the client dials again.
	startDaemon(t, sock, "--threads", "2")
	c2, err := ipc.Dial(sock, ipc.Options{Name: "victim-again"})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	l, err := newLayer(privateSpecs[1], 3)
	if err != nil {
		t.Fatal(err)
	}
	li, err := c2.Register(l.spec, l.weights())
	if err != nil {
		t.Fatal(err)
	}
	cl2, _ := l.call(4, quantcfg.DTypeBF16, 2)
	got := make([]byte, len(cl2.want))
	if err := c2.Forward(li.ID, cl2.x, cl2.dt, cl2.n, got); err != nil || !bytes.Equal(got, cl2.want) {
		t.Fatalf("after the restart: %v", err)
	}
}

func TestSIGTERMDrains(t *testing.T) {
	sock := filepath.Join(shortDir(t), "bitd.sock")
	d := startDaemon(t, sock, "--threads", "2")
	c, err := ipc.Dial(sock, ipc.Options{Name: "in-flight"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	other, err := ipc.Dial(sock, ipc.Options{Name: "newcomer"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, id, cl, dur, err := setupLong(c)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(cl.want))
	errc := make(chan error, 1)
	start := time.Now()
	go func() { errc <- c.Forward(id, cl.x, cl.dt, cl.n, got) }()
	time.Sleep(dur / 4)
	termAt := time.Since(start)
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// New calls are refused with a clear status while the call in flight runs (once
	// the daemon has handled the signal).
	var perr error
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if perr = other.Ping(); perr != nil {
			break
		}
	}
	if !errors.Is(perr, ipc.ErrShuttingDown) {
		t.Fatalf("a new call during the drain: %v", perr)
	}
	select {
	case err := <-errc:
		t.Fatalf("the call in flight ended (%v) before the drain refused a new call", err)
	default:
	}
	if err := <-errc; err != nil {
		t.Fatalf("the call in flight failed: %v", err)
	}
	if took := time.Since(start); took < termAt {
		t.Fatalf("the call (%v) was not in flight at SIGTERM (%v)", took, termAt)
	}
	if !bytes.Equal(got, cl.want) {
		t.Fatal("the call in flight returned a wrong answer")
	}
	err, exited := d.wait(10 * time.Second)
	if !exited {
		t.Fatal("bitd did not exit after the drain")
	}
	if err != nil {
		t.Fatalf("bitd exit: %v", err)
	}
	if err := c.Ping(); !errors.Is(err, ipc.ErrShuttingDown) && !errors.Is(err, ipc.ErrPeerGone) {
		t.Fatalf("call after the drain: %v", err)
	}
	log := d.log.waitFor(10*time.Second, "bitd serve: draining", "bitd serve: stopped")
	for _, want := range []string{"draining", "stopped"} {
		if !strings.Contains(log, "bitd serve: "+want) {
			t.Errorf("no %q in the log", want)
		}
	}
}

// TestPackCopy: with --pack-copy the daemon serves the pack's layers from its own copy,
// bit-exact, with the file deleted under it (the mapping is gone: nothing reads the file
// after loading).
func TestPackCopy(t *testing.T) {
	dir := shortDir(t)
	pack := filepath.Join(dir, "shared.bitgo")
	writePack(t, pack)
	sock := filepath.Join(dir, "bitd.sock")
	d := startDaemon(t, sock, "--threads", "2", "--pack-copy", "--pack", pack)
	if log := d.log.waitFor(5*time.Second, "copied=true"); !strings.Contains(log, "copied=true") {
		t.Fatalf("the daemon did not say it copied the pack:\n%s", log)
	}
	if err := os.Remove(pack); err != nil {
		t.Fatal(err)
	}
	if maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", d.cmd.Process.Pid)); err != nil {
		t.Fatal(err)
	} else if strings.Contains(string(maps), "shared.bitgo") {
		t.Fatal("the daemon still maps the pack file after a copying load")
	}
	cmd, out := child(t, "load", "BITD_TEST_SOCK="+sock, "BITD_TEST_SEED=3", "BITD_TEST_DURATION=1s")
	var buf bytes.Buffer
	buf.ReadFrom(out)
	if err := cmd.Wait(); err != nil || !strings.HasPrefix(buf.String(), "ok calls=") {
		t.Fatalf("client: %v: %s", err, buf.String())
	}
}

// TestLoad runs 8 client processes against one daemon, each calling forward on shared
// (pack file) and private layers for BITD_SOAK (default 5 s), checking every output
// against the reference bit for bit.
func TestLoad(t *testing.T) {
	dur := 5 * time.Second
	if s := os.Getenv("BITD_SOAK"); s != "" {
		var err error
		if dur, err = time.ParseDuration(s); err != nil {
			t.Fatalf("BITD_SOAK=%q: %v", s, err)
		}
	}
	dir := shortDir(t)
	pack := filepath.Join(dir, "shared.bitgo")
	writePack(t, pack)
	sock := filepath.Join(dir, "bitd.sock")
	d := startDaemon(t, sock, "--threads", "2", "--pack", pack)
	const clients = 8
	var wg sync.WaitGroup
	results := make([]string, clients)
	start := time.Now()
	for i := range clients {
		cmd, out := child(t, "load", "BITD_TEST_SOCK="+sock, fmt.Sprintf("BITD_TEST_SEED=%d", i+1), "BITD_TEST_DURATION="+dur.String())
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf bytes.Buffer
			buf.ReadFrom(out)
			err := cmd.Wait()
			results[i] = strings.TrimSpace(buf.String())
			if err != nil {
				results[i] += fmt.Sprintf(" (exit: %v)", err)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	total := 0
	for i, r := range results {
		n, ok := strings.CutPrefix(r, "ok calls=")
		if !ok {
			t.Errorf("client %d: %s", i, r)
			continue
		}
		k, _ := strconv.Atoi(n)
		total += k
	}
	if t.Failed() {
		return
	}
	t.Logf("%d clients, %v: %d calls, all bit-exact (%.0f calls/s)", clients, dur, total, float64(total)/elapsed.Seconds())
	c, err := ipc.Dial(sock, ipc.Options{Name: "check"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitStats(t, c, "the clients' sessions to end", func(s ipc.Stats) bool {
		return s.Sessions == 1 && s.Engine["layers"] == float64(len(sharedSpecs)) && s.Engine["errors"] == 0
	})
	if _, exited := d.wait(0); exited {
		t.Fatal("the daemon exited")
	}
}
