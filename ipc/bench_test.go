package ipc

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"bitgo/quantcfg"
)

// copyHandler's layer returns its input (Out == In): the least compute a forward can
// have, so the round trip is nearly all transport.
type copyHandler struct{ *testHandler }

func (h copyHandler) Register(u Upload) (LayerInfo, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	li := LayerInfo{ID: h.next, Spec: u.Spec, Bytes: int64(len(u.Weights))}
	h.layers[h.next] = &testLayer{info: li}
	return li, nil
}

func (h copyHandler) Forward(id LayerID, x []byte, dt quantcfg.DType, n int, out []byte) error {
	copy(out, x)
	return nil
}

func pin(tb testing.TB, cpu int) {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		tb.Fatalf("pin to cpu %d: %v", cpu, err)
	}
}

// BenchmarkRoundTrip measures the Go client's round-trip overhead (round trip minus the
// handler's time, which the daemon reports) of a forward with a 16 KiB activation and a
// 16 KiB output, with client and server threads on different cores and on one core.
// Targets (issue 5): p50 <= 5 us and p99 <= 30 us apart, p50 <= 15 us together.
func BenchmarkRoundTrip(b *testing.B) {
	if runtime.NumCPU() < 2 {
		b.Skip("needs 2 CPUs")
	}
	for _, bc := range []struct {
		name                string
		serverCPU, clientCP int
	}{{"cross-core", 0, 1}, {"same-core", 1, 1}} {
		b.Run(bc.name, func(b *testing.B) {
			h := copyHandler{newTestHandler()}
			_, path := startServer(b, h, ServerOptions{OnSessionThread: func(uint32) { pin(b, bc.serverCPU) }})
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			pin(b, bc.clientCP)
			defer func() {
				var all unix.CPUSet
				for i := range runtime.NumCPU() {
					all.Set(i)
				}
				_ = unix.SchedSetaffinity(0, &all)
			}()
			c := dial(b, path, Options{})
			const k = 4096 // 4096 f32 = 16 KiB
			li, err := c.Register(f32Spec("copy", k, k, false), Weights{Data: make([]byte, k*k*4)})
			if err != nil {
				b.Fatal(err)
			}
			x := floatBytes(randFloats(k, 1), quantcfg.DTypeF32)
			out := make([]byte, len(x))
			for range 2000 { // warm up: page in the region, settle the spinners
				if err := c.Forward(li.ID, x, quantcfg.DTypeF32, 1, out); err != nil {
					b.Fatal(err)
				}
			}
			over := make([]float64, 0, b.N)
			b.SetBytes(int64(2 * len(x)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				hd, err := c.ForwardTimed(li.ID, x, quantcfg.DTypeF32, 1, out)
				rt := time.Since(t0)
				if err != nil {
					b.Fatal(err)
				}
				over = append(over, float64(rt-hd)/1e3)
			}
			b.StopTimer()
			slices.Sort(over)
			q := func(p float64) float64 { return over[min(len(over)-1, int(p*float64(len(over))))] }
			b.ReportMetric(q(0.5), "p50-us")
			b.ReportMetric(q(0.99), "p99-us")
			b.ReportMetric(q(0.999), "p99.9-us")
		})
	}
}

// BenchmarkIdleCPU measures the CPU used while no calls arrive, starting 10 ms after a
// burst of calls: by the session threads alone (from /proc/self/task/TID/schedstat,
// in nanoseconds) and by the whole process (getrusage: daemon, idle clients, Go
// runtime). Both should be ~0.
func BenchmarkIdleCPU(b *testing.B) {
	for _, sessions := range []int{1, 8} {
		b.Run(fmt.Sprintf("sessions=%d", sessions), func(b *testing.B) {
			h := copyHandler{newTestHandler()}
			var mu sync.Mutex
			var tids []int
			_, path := startServer(b, h, ServerOptions{OnSessionThread: func(uint32) {
				mu.Lock()
				tids = append(tids, unix.Gettid())
				mu.Unlock()
			}})
			for range sessions {
				c := dial(b, path, Options{RegionBytes: MinRegionBytes})
				li, err := c.Register(f32Spec("copy", 64, 64, false), Weights{Data: make([]byte, 64*64*4)})
				if err != nil {
					b.Fatal(err)
				}
				x, out := make([]byte, 256), make([]byte, 256)
				for range 1000 {
					if err := c.Forward(li.ID, x, quantcfg.DTypeF32, 1, out); err != nil {
						b.Fatal(err)
					}
				}
			}
			for b.Loop() {
				// The measurement is one fixed window below, whatever -benchtime says.
			}
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
			threadCPU := func() time.Duration {
				mu.Lock()
				defer mu.Unlock()
				var sum time.Duration
				for _, tid := range tids {
					raw, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/schedstat", tid))
					if err != nil {
						b.Fatal(err)
					}
					var ns int64
					fmt.Sscan(string(raw), &ns)
					sum += time.Duration(ns)
				}
				return sum
			}
			var r0, r1 unix.Rusage
			_ = unix.Getrusage(unix.RUSAGE_SELF, &r0)
			s0, t0 := threadCPU(), time.Now()
			time.Sleep(2 * time.Second)
			s1, wall := threadCPU(), time.Since(t0)
			_ = unix.Getrusage(unix.RUSAGE_SELF, &r1)
			cpu := time.Duration(unix.TimevalToNsec(r1.Utime) - unix.TimevalToNsec(r0.Utime) + unix.TimevalToNsec(r1.Stime) - unix.TimevalToNsec(r0.Stime))
			b.ReportMetric(100*float64(s1-s0)/float64(wall), "session-cpu-%")
			b.ReportMetric(100*float64(cpu)/float64(wall), "process-cpu-%")
		})
	}
}

func BenchmarkDecodeForward(b *testing.B) {
	req := AppendForward(nil, 101, 1, DTypeCodeF32, 0, 16384, 16384, 16384)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeRequest(req); err != nil {
			b.Fatal(err)
		}
	}
}
