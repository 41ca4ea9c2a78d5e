package sched

import "math"

// Partition splits the row blocks [0, blocks) into len(ratios) contiguous
// ranges in proportion to ratios and returns their len(ratios)+1
// boundaries, appended to dst[:0] (pass a slice with that capacity to
// avoid allocating): worker i gets [b[i], b[i+1]).
//
// Rounding is deterministic and cumulative: b[i] = floor(blocks*C_i/C_n +
// 0.5) where C_i is the sum of the first i ratios, so every block goes to
// exactly one worker, each worker's count is within one block of its
// exact share, and a worker may get no block at all when blocks <
// len(ratios) or its ratio is small. Ratios that are not positive finite
// numbers (or sum to infinity) are treated as all equal; negative blocks
// as 0; no ratios give [0].
func Partition(dst []int, blocks int, ratios []float64) []int {
	n := len(ratios)
	b := append(dst[:0], make([]int, n+1)...)
	blocks = max(blocks, 0)
	if n == 0 {
		return b
	}
	total := 0.0
	valid := true
	for _, r := range ratios {
		if !(r > 0) || math.IsInf(r, 0) {
			valid = false
			break
		}
		total += r
	}
	if !valid || math.IsInf(total, 0) {
		for i := 0; i <= n; i++ {
			b[i] = blocks * i / n
		}
		return b
	}
	cum := 0.0
	for i := 1; i < n; i++ {
		cum += ratios[i-1]
		x := int(math.Floor(float64(blocks)*cum/total + 0.5))
		b[i] = max(b[i-1], min(x, blocks))
	}
	b[n] = blocks
	return b
}

// Guards of the ratio update (see updateRatios).
const (
	// minUpdateTime: calls whose slowest worker took less than this do not
	// update the ratios; their times are dominated by wake-up and timer
	// noise, not by the cores' speeds.
	minUpdateTime = 2e-6 // seconds
	// maxStep bounds how far one call can move a ratio before filtering:
	// the raw estimate pr_i' stays within [pr_i/maxStep, pr_i*maxStep],
	// so one call in which a worker was descheduled for a whole time
	// slice cannot drive its share to nothing.
	maxStep = 4.0
	// minRatio is the smallest ratio relative to the mean ratio of the
	// workers that had work: a core that looked very slow still gets a
	// small share, so it keeps being measured and can recover.
	minRatio = 1.0 / 32
)

// updateRatios applies one step of the dynamic partitioner of Luo et al.
// ("A dynamic parallel method for performance optimization on hybrid
// CPUs") to pr in place. work[i] is the number of blocks worker i did and
// t[i] the seconds it took.
//
// Only workers with work[i] > 0 and a finite t[i] > 0 take part (the set A);
// the others keep their ratio. With S = sum over A of pr_j and speeds
// v_i = work[i]/t[i], the estimate is
//
//	pr_i' = S * v_i / sum_{j in A} v_j
//
// which, when work is exactly proportional to pr, is S times the paper's
// pr_i' = pr_i / sum_j(t_i*pr_j/t_j); using the blocks actually done
// instead of pr removes the rounding error of block granularity, and the
// factor S keeps the ratios' scale (they start at 1, so their mean stays 1
// and each one reads as "speed relative to the average core"). Then
// pr_i' is clamped to [pr_i/maxStep, pr_i*maxStep], renormalised to sum S,
// filtered as pr_i = alpha*pr_i + (1-alpha)*pr_i', floored at
// minRatio*S/|A| and renormalised to sum S again.
//
// It returns false, leaving pr alone, when fewer than two workers had work
// or every active time is under minUpdateTime.
func updateRatios(pr []float64, work []int, t []float64, alpha float64) bool {
	n := len(pr)
	active := 0
	slowest := 0.0
	sumPr, sumV := 0.0, 0.0
	for i := 0; i < n; i++ {
		if work[i] <= 0 || !(t[i] > 0) || math.IsInf(t[i], 0) {
			continue
		}
		active++
		slowest = max(slowest, t[i])
		sumPr += pr[i]
		sumV += float64(work[i]) / t[i]
	}
	if active < 2 || slowest < minUpdateTime || !(sumV > 0) || math.IsInf(sumV, 0) {
		return false
	}
	isActive := func(i int) bool {
		return work[i] > 0 && t[i] > 0 && !math.IsInf(t[i], 0)
	}
	// Estimate and clamp (kept in a small stack buffer for the usual
	// core counts).
	var buf [64]float64
	est := buf[:0]
	if n > len(buf) {
		est = make([]float64, 0, n)
	}
	est = est[:n]
	sumEst := 0.0
	for i := 0; i < n; i++ {
		if !isActive(i) {
			continue
		}
		e := sumPr * (float64(work[i]) / t[i]) / sumV
		e = min(max(e, pr[i]/maxStep), pr[i]*maxStep)
		est[i] = e
		sumEst += e
	}
	floor := minRatio * sumPr / float64(active)
	sumNew := 0.0
	for i := 0; i < n; i++ {
		if !isActive(i) {
			continue
		}
		e := est[i] * sumPr / sumEst
		v := alpha*pr[i] + (1-alpha)*e
		v = max(v, floor)
		pr[i] = v
		sumNew += v
	}
	for i := 0; i < n; i++ {
		if isActive(i) {
			pr[i] *= sumPr / sumNew
		}
	}
	return true
}
