package sched

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// loadEnv, when set in a process's environment, turns any binary that
// imports sched into the competing-load process of HeteroBench: the
// package's init runs the load described by the variable and exits
// before main. HeteroBench sets it only in the environment of the child it
// starts (a re-execution of its own binary, os.Executable), so the load
// needs no separate program and works from bitd as well as from test
// binaries.
const loadEnv = "BITGO_SCHED_CPULOAD"

func init() {
	if spec, ok := os.LookupEnv(loadEnv); ok {
		os.Exit(runLoad(spec))
	}
}

// loadSpec is what the child process does.
type loadSpec struct {
	core       int
	busy, idle time.Duration
	ppid       int
	maxLife    time.Duration
	slice      time.Duration // EEVDF time slice to request (0: the kernel's default)
}

func (s loadSpec) String() string {
	return fmt.Sprintf("core=%d busy=%s idle=%s ppid=%d maxlife=%s slice=%s", s.core, s.busy, s.idle, s.ppid, s.maxLife, s.slice)
}

func parseLoadSpec(text string) (loadSpec, error) {
	s := loadSpec{core: -1}
	for _, f := range strings.Fields(text) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return s, fmt.Errorf("field %q is not key=value", f)
		}
		var err error
		switch k {
		case "core":
			s.core, err = strconv.Atoi(v)
		case "ppid":
			s.ppid, err = strconv.Atoi(v)
		case "busy":
			s.busy, err = time.ParseDuration(v)
		case "idle":
			s.idle, err = time.ParseDuration(v)
		case "maxlife":
			s.maxLife, err = time.ParseDuration(v)
		case "slice":
			s.slice, err = time.ParseDuration(v)
		default:
			err = fmt.Errorf("unknown key")
		}
		if err != nil {
			return s, fmt.Errorf("field %q: %w", f, err)
		}
	}
	if s.core < 0 || s.busy <= 0 || s.idle < 0 || s.ppid <= 0 || s.maxLife <= 0 || s.slice < 0 {
		return s, fmt.Errorf("incomplete spec %q", text)
	}
	return s, nil
}

// runLoad is the child's main: pin to the core, say "ready", then alternate
// busy spinning and sleeping until the parent goes away, the maximum life
// is reached, or it is killed (the normal end). It returns the exit code.
func runLoad(text string) int {
	spec, err := parseLoadSpec(text)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", loadEnv, err)
		return 2
	}
	// The load is the process's only busy thread; pin the thread that runs
	// it. (The runtime's other threads are idle.)
	lockAndPinOrExit(spec.core)
	if spec.slice > 0 {
		// Linux 6.12+ (EEVDF) takes sched_runtime of a SCHED_OTHER task as
		// its requested time slice: a short one makes the load preempt
		// (and yield) at a fine grain instead of in whole default slices.
		attr := unix.SchedAttr{Policy: 0, Runtime: uint64(spec.slice.Nanoseconds())}
		if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
			fmt.Fprintf(os.Stderr, "%s: sched_setattr slice=%v: %v\n", loadEnv, spec.slice, err)
			return 4
		}
	}
	fmt.Println("ready")
	start := time.Now()
	x := uint64(1)
	for {
		end := time.Now().Add(spec.busy)
		for time.Now().Before(end) {
			for range 256 {
				x = x*6364136223846793005 + 1442695040888963407
			}
		}
		if spec.idle > 0 {
			sleepExactly(spec.idle)
		}
		if os.Getppid() != spec.ppid || time.Since(start) > spec.maxLife {
			if x == 0 { // keep x alive
				fmt.Println(x)
			}
			return 0
		}
	}
}

func lockAndPinOrExit(core int) {
	if err := lockAndPin(0, core); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", loadEnv, err)
		os.Exit(3)
	}
}

// loadProc is a running competing-load process.
type loadProc struct {
	cmd     *exec.Cmd
	started time.Time
	stderr  *tailBuffer
	once    sync.Once
	share   float64 // CPU time / wall time, set by stop
}

// startLoad re-executes the current binary as a load pinned to core that is
// busy for busy and then sleeps for idle, in a loop. The caller must call
// stop. The child also dies with the parent: Pdeathsig (SIGKILL when the
// thread that started it exits; the caller keeps its goroutine locked to
// that thread until stop), a check of its parent PID every cycle, and
// maxLife.
func startLoad(core int, busy, idle, slice, maxLife time.Duration) (*loadProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("%w: finding this executable to re-run it: %w", ErrLoad, err)
	}
	spec := loadSpec{core: core, busy: busy, idle: idle, slice: slice, ppid: os.Getpid(), maxLife: maxLife}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), loadEnv+"="+spec.String(), "GOMAXPROCS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	tail := &tailBuffer{max: 4096}
	cmd.Stderr = tail
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLoad, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: starting %s: %w", ErrLoad, exe, err)
	}
	l := &loadProc{cmd: cmd, started: time.Now(), stderr: tail}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("unexpected output %q", line)
		}
		ready <- err
	}()
	select {
	case err = <-ready:
	case <-time.After(10 * time.Second):
		err = fmt.Errorf("not ready after 10 s")
	}
	if err != nil {
		l.stop()
		return nil, fmt.Errorf("%w: %s: %w (stderr: %q)", ErrLoad, spec, err, tail.String())
	}
	return l, nil
}

// stop kills the load, reaps it and records its CPU share. It is safe to
// call more than once.
func (l *loadProc) stop() {
	l.once.Do(func() {
		_ = l.cmd.Process.Kill()
		_ = l.cmd.Wait() // "signal: killed" is the expected end
		wall := time.Since(l.started)
		if st := l.cmd.ProcessState; st != nil {
			if ru, ok := st.SysUsage().(*syscall.Rusage); ok && wall > 0 {
				cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
				l.share = cpu.Seconds() / wall.Seconds()
			}
		}
	})
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// sleepExactly sleeps for d with clock_nanosleep on the locked thread
// (time.Sleep overshoots 1 ms sleeps by a large fraction).
func sleepExactly(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}
