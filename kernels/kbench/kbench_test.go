package kbench

import (
	"errors"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"bitgo/kernels"
	"bitgo/quantcfg"
)

func TestPoolRuns(t *testing.T) {
	for _, n := range []int{1, 2, runtime.NumCPU()} {
		p := NewPool(n)
		var c atomic.Int64
		for i := 0; i < 1000; i++ {
			p.Run(func(w int) { c.Add(int64(w + 1)) })
		}
		p.Close()
		if want := int64(1000 * n * (n + 1) / 2); c.Load() != want {
			t.Fatalf("n=%d: %d, want %d", n, c.Load(), want)
		}
	}
}

// TestPoolWakesSleepers: a call reaches workers that have gone to sleep on the condition
// (Run signals only when it sees them counted as asleep), again and again.
func TestPoolWakesSleepers(t *testing.T) {
	p := NewPool(3)
	defer p.Close()
	var c atomic.Int64
	for i := range 3 {
		for deadline := time.Now().Add(10 * time.Second); p.sleepers.Load() != 2; {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d workers asleep after 10 s idle, want 2", i, p.sleepers.Load())
			}
			time.Sleep(time.Millisecond)
		}
		ran := make(chan struct{})
		go func() {
			p.Run(func(w int) { c.Add(int64(w + 1)) })
			close(ran)
		}()
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the call did not return within 10 s (a sleeping worker was not woken)", i)
		}
		if want := int64(6 * (i + 1)); c.Load() != want {
			t.Fatalf("round %d: %d, want %d", i, c.Load(), want)
		}
	}
}

// TestRandomBlobValid: every format's random blob holds only valid codes, over shapes with
// and without padding, several tl2 chunks and a tl1 tail.
func TestRandomBlobValid(t *testing.T) {
	for _, f := range []quantcfg.Format{quantcfg.I2S, quantcfg.TL1, quantcfg.TL2, quantcfg.Int2,
		quantcfg.Int1, quantcfg.Int8, quantcfg.BF16, quantcfg.F32} {
		for _, sh := range []Shape{{70, 700}, {64, 48 * 25}, {33, 47}, {96, 4096}} {
			ly, err := kernels.NewLayout(f, sh.M, sh.K)
			if err != nil {
				t.Fatal(err)
			}
			blob := make([]byte, ly.Bytes())
			RandomBlob(f, ly, blob, 3)
			if err := kernels.CheckBlob(ly, blob); err != nil {
				t.Errorf("%s %s: %v", f, sh, err)
			}
		}
	}
}

// TestAgainstReads: each round is paired with the reads just before and after it; rounds
// with an unclean trial or read are left out, and so are rounds with a read under the floor
// (then rounds with reads over it however clean, then all); the rounds are taken in their
// order, not sorted.
func TestAgainstReads(t *testing.T) {
	const g = 1e9
	// 1000 bytes per call; rounds at 1000, 500, 250 ns: 1, 2 and 4 GB/s.
	ns := []float64{1000, 500, 250}
	reads := []readTrial{{1 * g, true}, {3 * g, true}, {5 * g, true}, {3 * g, true}}
	slow := []readTrial{{4 * g, true}, {4 * g, true}, {0.5 * g, true}, {4 * g, true}} // round 1's after, round 2's before
	// round 0: 1 / 2 = 50%, round 1: 2 / 4 = 50%, round 2: 4 / 4 = 100%; reads 2, 4, 4.
	for _, c := range []struct {
		name     string
		clean    []bool
		reads    []readTrial
		floor    float64
		bps, pct float64
		rounds   int
	}{
		{"all clean", []bool{true, true, true}, reads, 0, 4 * g, 50, 3},
		{"round 2 unclean", []bool{true, true, false}, reads, 0, 4 * g, 50, 2},
		{"round 0 only", []bool{true, false, false}, reads, 0, 2 * g, 50, 1},
		{"read 2 unclean", []bool{true, true, true}, []readTrial{{1 * g, true}, {3 * g, true}, {5 * g, false}, {3 * g, true}}, 0, 2 * g, 50, 1},
		{"none clean: all rounds", []bool{false, false, false}, reads, 0, 4 * g, 50, 3},
		{"rounds 1 and 2", []bool{false, true, true}, reads, 0, 4 * g, 100, 2},
		{"a read under the floor", []bool{true, true, true}, reads, 1.5 * g, 4 * g, 100, 2},
		{"a slow read leaves two rounds out", []bool{true, true, true}, slow, 2 * g, 4 * g, 25, 1},
		{"over the floor, unclean", []bool{false, true, true}, slow, 2 * g, 4 * g, 25, 1},
		{"nothing over the floor: all rounds", []bool{true, true, true}, slow, 5 * g, 2.25 * g, 88.88888888888889, 3},
	} {
		before := append([]float64(nil), ns...)
		bps, pct, rounds := againstReads(ns, c.clean, c.reads[:3], c.reads[1:], c.floor, 1000)
		if bps != c.bps || pct != c.pct || rounds != c.rounds {
			t.Errorf("%s: read %g B/s, %g%% over %d rounds; want %g, %g, %d", c.name, bps, pct, rounds, c.bps, c.pct, c.rounds)
		}
		if !slices.Equal(ns, before) {
			t.Fatalf("%s: the rounds were reordered: %v", c.name, ns)
		}
	}
}

// TestAround: each runner's trial is paired with the reads just around it, not with those
// around the whole round.
func TestAround(t *testing.T) {
	const runners, rounds = 3, 4
	reads := make([]readTrial, runners*rounds+1)
	for i := range reads {
		reads[i].bps = float64(i)
	}
	for j := range runners {
		before, after := around(reads, runners, j)
		if len(before) != rounds || len(after) != rounds {
			t.Fatalf("runner %d: %d and %d reads, want %d rounds", j, len(before), len(after), rounds)
		}
		for rd := range rounds {
			if i := rd*runners + j; before[rd].bps != float64(i) || after[rd].bps != float64(i+1) {
				t.Errorf("runner %d round %d: reads %v and %v, want %d and %d", j, rd, before[rd].bps, after[rd].bps, i, i+1)
			}
		}
	}
}

// TestReaderWindows: a read takes the buffer's windows in turn, never the same window twice
// in a row, and a buffer smaller than a window whole.
func TestReaderWindows(t *testing.T) {
	p := NewPool(1)
	defer p.Close()
	buf := &Reads{Buf: make([]byte, 4<<12), Loop: kernels.ReadLoops()[0]}
	rd := reader{win: 1 << 12}
	var offs []int
	for range 6 {
		offs = append(offs, rd.off)
		if tr := rd.time(p, buf, 0); tr.bps <= 0 {
			t.Fatalf("read rate %v", tr.bps)
		}
	}
	if want := []int{0, 1 << 12, 2 << 12, 3 << 12, 0, 1 << 12}; !slices.Equal(offs, want) {
		t.Errorf("windows at %v, want %v", offs, want)
	}
	whole := reader{}
	if tr := whole.time(p, buf, time.Millisecond); whole.off != 0 || tr.bps <= 0 {
		t.Errorf("a buffer under a window: next read at %d, rate %v", whole.off, tr.bps)
	}
}

// TestRoundRatio: rounds are paired by index, those unclean on either side left out (all used
// when none is clean on both).
func TestRoundRatio(t *testing.T) {
	a := Timing{Rounds: []float64{10, 40, 90, 12}, Cleans: []bool{true, true, false, true}}
	b := Timing{Rounds: []float64{5, 10, 30, 4}, Cleans: []bool{true, true, true, false}}
	// clean in both: rounds 0 and 1, ratios 2 and 4 (the upper median).
	if got := RoundRatio(a, b); got != 4 {
		t.Errorf("RoundRatio = %v, want 4", got)
	}
	b.Cleans = []bool{false, false, true, false}
	// none clean in both: all four rounds, ratios 2, 4, 3, 3.
	if got := RoundRatio(a, b); got != 3 {
		t.Errorf("RoundRatio with no clean pair = %v, want 3", got)
	}
}

// BenchmarkPoolRunEmpty is the fork/join cost of an empty call on two workers, back to
// back (the worker spinning): what a static split adds to every GEMV it runs.
func BenchmarkPoolRunEmpty(b *testing.B) {
	p := NewPool(2)
	defer p.Close()
	fn := func(int) {}
	b.ReportAllocs()
	for b.Loop() {
		p.Run(fn)
	}
}

// TestRunnerCallAllocatesNothing: a timed call allocates nothing (an allocation per call
// is GC work inside the trial, and a closure the caller has just written is a cache miss
// for the worker that runs it). testing.AllocsPerRun cannot be used: it sets GOMAXPROCS
// to 1, which the pool's spinning worker would hold.
func TestRunnerCallAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates for closures")
	}
	p := NewPool(2)
	defer p.Close()
	s, err := NewSet(quantcfg.Int1, Shape{256, 512}, 1<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Free()
	r, err := NewRunner(p, s, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if r.Impl() == "ref" {
		t.Skip("the reference kernel (-tags noasm) allocates its decode buffers per call")
	}
	r.Warm()
	const calls = 10000
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for i := range calls {
		r.Call(i)
	}
	runtime.ReadMemStats(&m1)
	if n := m1.Mallocs - m0.Mallocs; n >= calls/100 {
		t.Fatalf("%d calls made %d allocations, want none", calls, n)
	}
}

// TestBlobShare: however the row blocks are split, the shares read every byte below the
// blob's last multiple of 256 once, and nothing beyond the blob.
func TestBlobShare(t *testing.T) {
	for _, n := range []int{0, 255, 256, 1000, 7*4096 + 100, 819200} {
		for _, rbs := range []int{1, 3, 7, 80} {
			for _, workers := range []int{1, 2, 3, 5} {
				next := 0
				for w := range workers {
					rb0, rb1 := Split(rbs, workers, w)
					lo, hi := blobShare(n, rbs, rb0, rb1)
					if lo != next || hi < lo || hi > n || lo%256 != 0 || hi%256 != 0 {
						t.Fatalf("n %d, %d row blocks, worker %d of %d: [%d, %d) after %d", n, rbs, w, workers, lo, hi, next)
					}
					next = hi
				}
				if next != n&^255 {
					t.Fatalf("n %d, %d row blocks, %d workers: the shares end at %d, want %d", n, rbs, workers, next, n&^255)
				}
			}
		}
	}
}

// TestReadRunnerReadsTheBlob: a read runner's call reads each layer's whole blob (the XOR
// of its workers' checksums is the blob's), on one thread and on three.
func TestReadRunnerReadsTheBlob(t *testing.T) {
	for _, threads := range []int{1, 3} {
		p := NewPool(threads)
		s, err := NewSet(quantcfg.I2S, Shape{300, 1024}, 1<<20, 1)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range s.Layers { // distinct contents, so a call on the wrong layer shows
			l.Data[0] = byte(i)
		}
		loops := kernels.ReadLoops()
		r, err := NewReadRunner(p, s, 2, loops[len(loops)-1])
		if err != nil {
			t.Fatal(err)
		}
		if r.Impl() != "read" {
			t.Errorf("Impl = %q, want read", r.Impl())
		}
		for i := range 2 * len(s.Layers) {
			clear(r.out)
			r.Call(i)
			var got uint32
			for rb := 0; rb*kernels.RowBlock < len(r.out); rb++ {
				got ^= math.Float32bits(r.out[rb*kernels.RowBlock])
			}
			if want := fold32(kernels.ReadBytes(s.Layers[i%len(s.Layers)].Data)); got != want {
				t.Fatalf("%d threads, call %d: checksum %#x, want the blob's %#x", threads, i, got, want)
			}
		}
		s.Free()
		p.Close()
	}
}

// TestSetBounded: a rotation stops at MaxSetLayers layers (a tiny shape would take millions
// to reach a DRAM working set) and says it fell short; a blob large enough gets exactly the
// layers it needs.
func TestSetBounded(t *testing.T) {
	s, err := NewSet(quantcfg.TL2, Shape{M: 3, K: 3}, SetBytes, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Free()
	if len(s.Layers) != MaxSetLayers || !s.Short() || s.WorkingSet() != MaxSetLayers*s.Layers[0].Layout.Bytes() {
		t.Errorf("tl2 3x3 for %d bytes: %d layers, %d bytes, short %v; want %d layers, short", SetBytes, len(s.Layers), s.WorkingSet(), s.Short(), MaxSetLayers)
	}
	s2, err := NewSet(quantcfg.I2S, Shape{M: 64, K: 256}, 64<<10, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Free()
	if per := s2.Layers[0].Layout.Bytes(); len(s2.Layers) != (64<<10+per-1)/per || s2.Short() {
		t.Errorf("i2s 64x256 for 64 KiB: %d layers of %d bytes, short %v", len(s2.Layers), per, s2.Short())
	}
}

// TestAllocBeyondMemory: an allocation larger than the memory available is refused with
// ErrMemory, naming both sizes, before any page is touched.
func TestAllocBeyondMemory(t *testing.T) {
	avail, ok := MemAvailable()
	if !ok {
		t.Skip("no MemAvailable in /proc/meminfo")
	}
	if avail <= 0 {
		t.Fatalf("MemAvailable %d", avail)
	}
	m, err := Alloc(avail + 1<<30)
	if err == nil {
		m.Free()
		t.Fatalf("Alloc of %d bytes with %d available succeeded", avail+1<<30, avail)
	}
	if !errors.Is(err, ErrMemory) || !strings.Contains(err.Error(), "MiB available") {
		t.Errorf("error %v, want ErrMemory naming the sizes", err)
	}
	small, err := Alloc(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	small.Free()
}

// TestScaleAround: a runner's compute scale is the median over its rounds of the probes
// just around its own trials.
func TestScaleAround(t *testing.T) {
	// two runners, three rounds: probes 0..6 beside the reads before each trial and after the last
	scales := []float64{1, 2, 1, 1, 4, 2, 2}
	// runner 0: rounds (1+2)/2, (1+1)/2, (4+2)/2 = 1.5, 1, 3 -> 1.5; runner 1: (2+1)/2, (1+4)/2, (2+2)/2 -> 2
	for j, want := range []float64{1.5, 2} {
		if got := ScaleAround(scales, 2, j); got != want {
			t.Errorf("runner %d: %g, want %g", j, got, want)
		}
	}
	// a probe that gave nothing (0) leaves the rounds beside it out: runner 0 keeps round 1
	// alone, runner 1 none of its rounds
	scales = []float64{1, 0, 1, 3, 0, 2, 0}
	for j, want := range []float64{2, 0} {
		if got := ScaleAround(scales, 2, j); got != want {
			t.Errorf("with zeros, runner %d: %g, want %g", j, got, want)
		}
	}
	// one runner (the model bench's decode passes): a probe before each trial and after the last
	if got := ScaleAround([]float64{1, 3, 0, 2, 4}, 1, 0); got != 3 { // rounds 2, (gone), (gone), 3 -> 3
		t.Errorf("one runner: %g, want 3", got)
	}
}

// fixedProbe is a probe whose scale is known, for Interleaved's pairing.
type fixedProbe struct{ scales []float64 }

func (f *fixedProbe) Scale(time.Duration) float64 {
	s := f.scales[0]
	f.scales = f.scales[1:]
	return s
}

// TestInterleavedProbe: Interleaved probes beside every read and gives each runner the
// scales around its own trials.
func TestInterleavedProbe(t *testing.T) {
	p := NewPool(1)
	defer p.Close()
	set, err := NewSet(quantcfg.I2S, Shape{M: 64, K: 256}, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Free()
	var rs []*Runner
	for range 2 {
		r, err := NewRunner(p, set, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	mem := make([]byte, 1<<20)
	// two runners, two rounds: five probes; runner 0 gets (1+2)/2 and (3+4)/2, runner 1 (2+3)/2 and (4+5)/2
	probe := &fixedProbe{[]float64{1, 2, 3, 4, 5}}
	tms := Interleaved(rs, &Reads{Buf: mem, Loop: kernels.ReadLoops()[0], Probe: probe}, 2, time.Millisecond)
	if len(probe.scales) != 0 || tms[0].ComputeScale != 3.5 || tms[1].ComputeScale != 4.5 {
		t.Errorf("compute scales %g and %g, want 3.5 and 4.5 (%d probes left)", tms[0].ComputeScale, tms[1].ComputeScale, len(probe.scales))
	}
	if tm := Interleaved(rs, &Reads{Buf: mem, Loop: kernels.ReadLoops()[0]}, 2, time.Millisecond)[0]; tm.ComputeScale != 0 {
		t.Errorf("compute scale %g without a probe", tm.ComputeScale)
	}
}

// TestCoreProbe: a real probe of a two-thread pool gives a plausible scale (two threads
// run a compute-bound GEMV at most about twice one thread's rate) and leaves the tuning as
// it found it and the adaptive choices alone; a pool of one thread has no probe.
func TestCoreProbe(t *testing.T) {
	if c, err := NewCoreProbe(NewPool(1)); c != nil || err != nil {
		t.Fatalf("a one-thread pool's probe: %v, %v; want none", c, err)
	}
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU")
	}
	p := NewPool(2)
	defer p.Close()
	base, _ := kernels.CurrentTuning()
	adapt := base | kernels.TuningAdapt
	defer kernels.SwitchTuning(kernels.SwitchTuning(adapt))
	c, err := NewCoreProbe(p)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// (0 when another process took a CPU: go test runs packages side by side)
	if s := c.Scale(20 * time.Millisecond); s < 0 || s > 3 {
		t.Errorf("scale %g of two threads over one", s)
	}
	if s := (*CoreProbe)(nil).Scale(time.Millisecond); s != 0 {
		t.Errorf("a nil probe's scale %g", s)
	}
	if cur, _ := kernels.CurrentTuning(); cur != adapt {
		t.Errorf("tuning %v after the probe, want %v", cur, adapt)
	}
	for _, ch := range kernels.AdaptChoices() {
		if ch.M == probeShape.M && ch.K == probeShape.K {
			t.Errorf("the probe's calls reached the adaptive choices: %+v", ch)
		}
	}
}
