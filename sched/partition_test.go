package sched

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkPartition verifies the invariants of Partition's output.
func checkPartition(t testing.TB, bounds []int, blocks int, ratios []float64) {
	t.Helper()
	n := len(ratios)
	if bounds[0] != 0 || bounds[n] != blocks {
		t.Fatalf("Partition(%d, %v) = %v: must start at 0 and end at %d", blocks, ratios, bounds, blocks)
	}
	for i := 0; i < n; i++ {
		if bounds[i] > bounds[i+1] {
			t.Fatalf("Partition(%d, %v) = %v: not monotone at %d", blocks, ratios, bounds, i)
		}
	}
	total := 0.0
	for _, r := range ratios {
		total += r
	}
	for i := 0; i < n; i++ {
		exact := float64(blocks) * ratios[i] / total
		got := float64(bounds[i+1] - bounds[i])
		if math.Abs(got-exact) > 1+1e-9 {
			t.Fatalf("Partition(%d, %v) = %v: worker %d got %v blocks, exact share %.3f", blocks, ratios, bounds, i, got, exact)
		}
	}
}

func TestPartitionHandCases(t *testing.T) {
	cases := []struct {
		blocks int
		ratios []float64
		want   []int
	}{
		{0, []float64{1, 1}, []int{0, 0, 0}},
		{1, []float64{1, 1}, []int{0, 1, 1}},       // 0.5 rounds up: worker 0 gets 1
		{5, []float64{1, 1}, []int{0, 3, 5}},       // 2.5 -> 3
		{1, []float64{1, 1, 1}, []int{0, 0, 1, 1}}, // 0.33 -> 0, 0.67 -> 1
		{2, []float64{1, 1, 1}, []int{0, 1, 1, 2}}, // 0.67 -> 1, 1.33 -> 1
		{128, []float64{1, 1}, []int{0, 64, 128}},
		{128, []float64{3, 1}, []int{0, 96, 128}},
		{10, []float64{1, 2, 2}, []int{0, 2, 6, 10}},
		{100, []float64{0.7, 0.2, 0.1}, []int{0, 70, 90, 100}},
		{7, []float64{1}, []int{0, 7}},
		// Invalid ratios fall back to an equal split.
		{4, []float64{1, math.NaN()}, []int{0, 2, 4}},
		{4, []float64{0, 0}, []int{0, 2, 4}},
		{4, []float64{-1, 1}, []int{0, 2, 4}},
		{4, []float64{math.Inf(1), 1}, []int{0, 2, 4}},
		{4, []float64{math.MaxFloat64, math.MaxFloat64}, []int{0, 2, 4}}, // sum overflows
		{-3, []float64{1, 1}, []int{0, 0, 0}},
		{5, nil, []int{0}},
	}
	for _, c := range cases {
		b := Partition(nil, c.blocks, c.ratios)
		if !slices.Equal(b, c.want) {
			t.Errorf("Partition(%d, %v) = %v, want %v", c.blocks, c.ratios, b, c.want)
		}
	}
}

func TestPartitionProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 20000; iter++ {
		n := 1 + rng.IntN(16)
		blocks := rng.IntN(300)
		if iter%4 == 0 {
			blocks = rng.IntN(n + 1) // fewer blocks than workers
		}
		ratios := make([]float64, n)
		for i := range ratios {
			switch rng.IntN(4) {
			case 0:
				ratios[i] = 1
			case 1:
				ratios[i] = 1.0 / 32 // the floor of updateRatios
			default:
				ratios[i] = 0.01 + rng.Float64()*4
			}
		}
		buf := make([]int, 1, n+1)
		b := Partition(buf, blocks, ratios)
		if &b[0] != &buf[:1][0] {
			t.Fatalf("Partition allocated although dst had capacity %d", cap(buf))
		}
		checkPartition(t, b, blocks, ratios)
		// Deterministic.
		b2 := Partition(nil, blocks, slices.Clone(ratios))
		if !slices.Equal(b, b2) {
			t.Fatalf("Partition(%d, %v) not deterministic: %v vs %v", blocks, ratios, b, b2)
		}
	}
}

func FuzzPartition(f *testing.F) {
	f.Add(uint16(128), 1.0, 1.0, 1.0)
	f.Add(uint16(1), 0.3, 2.0, 0.0)
	f.Add(uint16(5), 1e-300, 1e300, 1.0)
	f.Fuzz(func(t *testing.T, blocks uint16, r0, r1, r2 float64) {
		ratios := []float64{r0, r1, r2}
		b := Partition(nil, int(blocks), ratios)
		valid := true
		sum := 0.0
		for _, r := range ratios {
			valid = valid && r > 0 && !math.IsInf(r, 0)
			sum += r
		}
		if !valid || math.IsInf(sum, 0) {
			ratios = []float64{1, 1, 1}
		}
		checkPartition(t, b, int(blocks), ratios)
	})
}

// paperStep is the update of Luo et al. exactly as written, for ratios
// that sum to 1: pr_i' = pr_i / sum_j(t_i*pr_j/t_j), pr = a*pr + (1-a)*pr'.
func paperStep(pr, t []float64, a float64) []float64 {
	out := make([]float64, len(pr))
	for i := range pr {
		d := 0.0
		for j := range pr {
			d += t[i] * pr[j] / t[j]
		}
		out[i] = a*pr[i] + (1-a)*pr[i]/d
	}
	return out
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestUpdateRatiosHandComputed(t *testing.T) {
	// Two workers, equal ratios, equal work, worker 1 took twice as long:
	// S = 2, speeds 50 and 25, pr' = (4/3, 2/3),
	// pr = 0.3*1 + 0.7*pr' = (1.2333..., 0.7666...).
	pr := []float64{1, 1}
	if !updateRatios(pr, []int{50, 50}, []float64{1e-3, 2e-3}, 0.3) {
		t.Fatal("no update")
	}
	if !near(pr[0], 0.3+0.7*4.0/3, 1e-12) || !near(pr[1], 0.3+0.7*2.0/3, 1e-12) {
		t.Fatalf("pr = %v, want [1.2333 0.7667]", pr)
	}

	// Three workers, ratios summing to 1 and work exactly proportional
	// to them: the paper's formula, term for term.
	//  pr = (0.5, 0.25, 0.25), work = (20, 10, 10), t = (1, 1, 2) ms.
	//  pr_0' = 0.5/(1*0.5/1 + 1*0.25/1 + 1*0.25/2) = 0.5/0.875 = 0.571428...
	//  pr_1' = 0.25/0.875 = 0.285714...
	//  pr_2' = 0.25/(2*0.5/1 + 2*0.25/1 + 2*0.25/2) = 0.25/1.75 = 0.142857...
	pr = []float64{0.5, 0.25, 0.25}
	updateRatios(pr, []int{20, 10, 10}, []float64{1e-3, 1e-3, 2e-3}, 0.5)
	want := []float64{0.5*0.5 + 0.5*4.0/7, 0.5*0.25 + 0.5*2.0/7, 0.5*0.25 + 0.5*1.0/7}
	for i := range want {
		if !near(pr[i], want[i], 1e-12) {
			t.Fatalf("pr = %v, want %v", pr, want)
		}
	}
}

func TestUpdateRatiosMatchesPaper(t *testing.T) {
	// Random cases in which work is exactly proportional to pr (integer
	// works, pr = work/sum(work)) and no guard fires: the update equals the
	// paper's formula.
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 1000; iter++ {
		n := 2 + rng.IntN(6)
		work := make([]int, n)
		sum := 0
		for i := range work {
			work[i] = 10 + rng.IntN(20)
			sum += work[i]
		}
		pr := make([]float64, n)
		tt := make([]float64, n)
		for i := range pr {
			pr[i] = float64(work[i]) / float64(sum)
			tt[i] = 1e-3 * (1 + rng.Float64()) // speeds within 2x: no clamp
		}
		a := rng.Float64()
		want := paperStep(pr, tt, a)
		updateRatios(pr, work, tt, a)
		for i := range pr {
			if !near(pr[i], want[i], 1e-12) {
				t.Fatalf("case %d: pr = %v, paper %v", iter, pr, want)
			}
		}
	}
}

func TestUpdateRatiosGuards(t *testing.T) {
	t.Run("idle worker keeps its ratio", func(t *testing.T) {
		pr := []float64{1, 1, 0.5}
		updateRatios(pr, []int{10, 10, 0}, []float64{1e-3, 2e-3, 0}, 0.3)
		if pr[2] != 0.5 {
			t.Fatalf("idle worker's ratio changed: %v", pr)
		}
		if !near(pr[0]+pr[1], 2, 1e-12) || !(pr[0] > pr[1]) {
			t.Fatalf("active workers: %v, want sum 2 and pr0 > pr1", pr)
		}
	})
	t.Run("zero time is ignored", func(t *testing.T) {
		pr := []float64{1, 1, 1}
		updateRatios(pr, []int{10, 10, 10}, []float64{1e-3, 2e-3, 0}, 0.3)
		if pr[2] != 1 {
			t.Fatalf("worker with t=0 changed: %v", pr)
		}
	})
	t.Run("one active worker: no update", func(t *testing.T) {
		pr := []float64{1, 1}
		if updateRatios(pr, []int{10, 0}, []float64{1e-3, 0}, 0.3) || pr[0] != 1 {
			t.Fatalf("updated: %v", pr)
		}
	})
	t.Run("tiny calls: no update", func(t *testing.T) {
		pr := []float64{1, 1}
		if updateRatios(pr, []int{1, 1}, []float64{1e-7, 1e-6}, 0.3) || pr[0] != 1 {
			t.Fatalf("updated: %v", pr)
		}
	})
	t.Run("outlier is clamped", func(t *testing.T) {
		// Worker 1 was descheduled: 1000x slower for one call. The raw
		// estimate is clamped to a quarter of its ratio before filtering.
		pr := []float64{1, 1}
		updateRatios(pr, []int{10, 10}, []float64{1e-3, 1}, 0.3)
		// est = (~2, ~0.002) clamped to (min(2, 4), max(0.002, 0.25)) =
		// (1.998, 0.25), renormalised to sum 2.
		e0, e1 := 2*1000.0/1001, 0.25
		s := e0 + e1
		e0, e1 = e0*2/s, e1*2/s
		if !near(pr[0], 0.3+0.7*e0, 1e-9) || !near(pr[1], 0.3+0.7*e1, 1e-9) {
			t.Fatalf("pr = %v, want [%v %v]", pr, 0.3+0.7*e0, 0.3+0.7*e1)
		}
	})
	t.Run("floor", func(t *testing.T) {
		pr := []float64{1.98, 0.02}
		updateRatios(pr, []int{99, 1}, []float64{1e-3, 1}, 0)
		if pr[1] < minRatio*2/2/(1+minRatio) || !near(pr[0]+pr[1], 2, 1e-12) {
			t.Fatalf("pr = %v: below the floor or sum changed", pr)
		}
	})
}

// simulate runs calls of the partitioner on workers of fixed speeds
// (blocks per second) and returns the ratio history.
func simulate(pr []float64, speed []float64, blocks, calls int, alpha float64) [][]float64 {
	n := len(pr)
	bounds := make([]int, n+1)
	work := make([]int, n)
	tt := make([]float64, n)
	var hist [][]float64
	for c := 0; c < calls; c++ {
		bounds = Partition(bounds, blocks, pr)
		for i := range n {
			work[i] = bounds[i+1] - bounds[i]
			tt[i] = float64(work[i]) / speed[i]
		}
		updateRatios(pr, work, tt, alpha)
		hist = append(hist, slices.Clone(pr))
	}
	return hist
}

func TestUpdateRatiosConverges(t *testing.T) {
	cases := []struct {
		speed []float64
	}{
		{[]float64{1000, 500}},
		{[]float64{1000, 1000, 400, 400}}, // 2 P + 2 E
		{[]float64{300, 1000, 2000}},
		{[]float64{1000, 100}}, // 10x
	}
	for _, c := range cases {
		n := len(c.speed)
		pr := make([]float64, n)
		for i := range pr {
			pr[i] = 1
		}
		hist := simulate(pr, c.speed, 4096, 40, 0.3)
		// Target: ratios proportional to speed, mean 1.
		mean := 0.0
		for _, s := range c.speed {
			mean += s / float64(n)
		}
		within := -1
		for k, h := range hist {
			ok := true
			for i := range h {
				if !near(h[i], c.speed[i]/mean, 0.05*c.speed[i]/mean) {
					ok = false
				}
			}
			if ok && within < 0 {
				within = k + 1
			}
			if !ok {
				within = -1
			}
		}
		last := hist[len(hist)-1]
		for i := range last {
			if !near(last[i], c.speed[i]/mean, 0.01*c.speed[i]/mean) {
				t.Fatalf("speeds %v: ratios %v after 40 calls, want %v*speed", c.speed, last, 1/mean)
			}
		}
		if within < 0 || within > 10 {
			t.Fatalf("speeds %v: within 5%% after %d calls, want <= 10", c.speed, within)
		}
		t.Logf("speeds %v: within 5%% of the target after %d calls", c.speed, within)
	}
}
