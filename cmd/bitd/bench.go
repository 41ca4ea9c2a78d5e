package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"bitgo/kernels"
	"bitgo/kernels/kbench"
	"bitgo/paged"
	"bitgo/quantcfg"
)

func init() {
	register(command{name: "bench", summary: "measure bandwidth and the kernels on real model shapes", run: runBench})
}

// benchOpts are `bitd bench`'s flags.
type benchOpts struct {
	json    bool
	quick   bool
	cache   bool
	prefill bool
	reads   bool
	model   string
	plot    string
	formats []quantcfg.Format
	shapes  []kbench.Shape
	threads []int
	ns      []int
	// tunings are the kernel tunings the GEMVs run under, measured in the same rounds
	// (--tuning; nil: the current one only).
	tunings []kernels.Tuning
	// formatsSet, threadsSet and nsSet tell whether --format, --threads and --n were given.
	formatsSet, threadsSet, nsSet bool
	minBytes                      int
	rounds                        int
	minTime                       time.Duration
}

// benchRecord is one result line; the JSON field names are the `--json` schema.
type benchRecord struct {
	Op      string `json:"op"`
	Format  string `json:"format"`
	M       int    `json:"m"`
	K       int    `json:"k"`
	N       int    `json:"n"`
	Threads int    `json:"threads"`
	Impl    string `json:"impl"`
	// Tuning is the kernels' tuning the record ran under (kernels.Tuning).
	Tuning      string  `json:"tuning,omitempty"`
	GBps        float64 `json:"gbps"`
	RooflinePct float64 `json:"roofline_pct"`
	// GEMV records: the read rate roofline_pct is measured against (the machine's buffer read
	// just before and after each of the GEMV's trials: DRAM, or L3 for gemv_cache), and the
	// share of the best read rate of the whole run instead (the most conservative roofline).
	RooflineGBps    float64 `json:"roofline_gbps,omitempty"`
	BestRooflinePct float64 `json:"best_roofline_pct,omitempty"`
	// GEMV records: the rounds roofline_pct and roofline_gbps were taken over, of Rounds:
	// those whose trial and reads kept their CPUs and whose reads ran at least half the
	// measurement's best (the text output flags a record with fewer than half counted).
	RooflineRounds int `json:"roofline_rounds,omitempty"`
	Rounds         int `json:"rounds,omitempty"`
	// GEMV records at two threads or more: how the threads shared the cores around the
	// trials, the rate of a cache-resident, compute-bound GEMV on all of them over its rate
	// on one (kbench.CoreProbe, run beside each read; 0 when every probe lost a CPU to
	// another process): near the thread count when each has a core of its own, near 1 when
	// they share one core's vector units (SMT siblings). The text marks a record whose
	// threads shared (below 1.45 at two threads).
	ComputeScale    float64 `json:"compute_scale,omitempty"`
	NsPerOp         float64 `json:"ns_per_op"`
	SpeedupVsBF16   float64 `json:"speedup_vs_bf16"`
	WorkingSetBytes int     `json:"working_set_bytes"`
	// GEMV records: the shape's blob is too small for a rotation of the DRAM working set
	// within kbench.MaxSetLayers matrices, so working_set_bytes is below it and the calls
	// partly find their weights in cache (the text table marks the shape with *).
	PartlyCached bool `json:"partly_cached,omitempty"`
	// gemv_cache records: the matrix is larger than the L3 (machine l3_bytes), so the cache
	// variant reads it from DRAM (the text table marks the shape with +).
	BeyondL3 bool `json:"beyond_l3,omitempty"`
	// GEMV records with n > 1 (when n = 1 is measured too): the time per call over the same
	// format's at n = 1, paired round by round (issue 8's small-batch target is <= 1.3 at n = 4).
	TimeVsN1 float64 `json:"time_vs_n1,omitempty"`
	// GEMV records of the other ternary formats (tl1, tl2), when i2s is measured too: i2s's
	// time over this format's at the same n and threads, paired round by round (a ternary
	// model packs to any of the three with the same results; issue 8's target for tl2 is
	// >= 1.15). Other trials may run between the two in a round (i2s's at the other token
	// counts, tl1's), so some of the machine's drift remains in it.
	SpeedupVsI2S float64 `json:"speedup_vs_i2s,omitempty"`
	// GEMV records, with --reads: the share, in percent, of the rate of a plain read of the
	// same format's weights in the same calls (its gemv_read record), paired round by round.
	// The read computes nothing: what a GEMV loses beyond it is the kernel's, not the
	// memory's (a short call's cost to the memory system is in both).
	VsReadPct float64 `json:"vs_read_pct,omitempty"`
	// GEMV records, with --tuning of several tunings: the first listed tuning's time over
	// this record's (the same format, shape, n and threads), paired round by round.
	SpeedupVsTuning float64 `json:"speedup_vs_tuning,omitempty"`
	// Prefill records, and GEMVs of the multiply formats (i2s, int2, int8) at n >= 2 on
	// the path of the peak loop, where the multiply-adds can bind instead of the memory:
	// 2*m*k*n operations per call against the int8 peak measured in the same run (machine
	// int8_peak names its loop; for a prefill record, roofline_pct is that percentage too).
	Gops         float64 `json:"gops,omitempty"`
	Int8PeakGops float64 `json:"int8_peak_gops,omitempty"`
	Int8PeakPct  float64 `json:"int8_peak_pct,omitempty"`
}

type benchMachine struct {
	CPU      string   `json:"cpu"`
	Features []string `json:"features"`
	Threads  int      `json:"threads"`
	// Int8Peak is the int8 peak loop's path (kernels.Int8PeakPath): "avx512vnni" (zmm
	// vpdpbusd) or "avx2" (ymm vpmaddubsw summed by vpaddw); empty without one.
	Int8Peak string `json:"int8_peak,omitempty"`
	// Tuning is the kernels' tuning (kernels.CurrentTuning): "default", "zen4" or "zen3", either
	// with "+adapt".
	Tuning string `json:"tuning"`
	// L3Bytes is the L3 the CPU reports (omitted where it reports none).
	L3Bytes  int `json:"l3_bytes,omitempty"`
	ReadGBps struct {
		DRAM1T  float64 `json:"dram_1t"`
		DRAMAll float64 `json:"dram_all"`
		L3All   float64 `json:"l3_all"`
	} `json:"read_gbps"`
	// ReadLoop names the read loop (kernels.ReadLoops) that read each of ReadGBps's rates:
	// the roofline is the fastest loop's rate.
	ReadLoop struct {
		DRAM1T  string `json:"dram_1t"`
		DRAMAll string `json:"dram_all"`
		L3All   string `json:"l3_all"`
	} `json:"read_loop"`
}

type benchReport struct {
	Machine benchMachine  `json:"machine"`
	Results []benchRecord `json:"results"`
	// Adaptive is where the adaptive tuning's one-token GEMVs ended (kernels.AdaptChoices),
	// for the shapes they ran in this run under a "+adapt" tuning.
	Adaptive []kernels.AdaptChoice `json:"adaptive,omitempty"`
}

// benchEnv is the state shared by the suites: options, machine figures, where to log.
type benchEnv struct {
	opt     benchOpts
	machine benchMachine
	l3By    map[int]readRate // L3-resident read rate by thread count (cache variant's roofline)
	dramBy  map[int]readRate // DRAM read rate by thread count (the best seen so far)
	dram    *kbench.Mem      // the 1 GiB buffer, kept to re-measure during the run
	l3      *kbench.Mem      // the L3-resident buffer (the cache variant's roofline)
	peakBy  map[int]float64  // int8 peak (Gops) by thread count, measured once when first needed
	amxBy   map[int]float64  // the AMX-INT8 peak likewise (where AMX runs)
	log     io.Writer
}

// int8Peak is the int8 peak of a pool of t threads in Gops (0 without a peak loop).
func (e *benchEnv) int8Peak(t int) float64 { return peakOnce(e.peakBy, t, kbench.Int8Peak) }

// amxPeak is the AMX-INT8 peak of a pool of t threads in Gops (0 where AMX cannot run).
func (e *benchEnv) amxPeak(t int) float64 { return peakOnce(e.amxBy, t, kbench.AMXPeak) }

// peakOnce measures a peak (operations per second) on a pool of t threads once, keeping it in
// cache, and returns it in Gops.
func peakOnce(cache map[int]float64, t int, measure func(*kbench.Pool, time.Duration) float64) float64 {
	if v, ok := cache[t]; ok {
		return v
	}
	p := kbench.NewPool(t)
	v := measure(p, 300*time.Millisecond) / 1e9
	p.Close()
	cache[t] = v
	return v
}

// againstPeak sets the record's operation rate (2*m*k*n per call) and, where the CPU has an
// int8 peak loop (peak > 0), its share of that peak.
func (r *benchRecord) againstPeak(peak float64) {
	r.Gops = 2 * float64(r.M) * float64(r.K) * float64(r.N) / r.NsPerOp
	if peak > 0 {
		r.Int8PeakGops, r.Int8PeakPct = peak, 100*r.Gops/peak
	}
}

// peakBound reports whether a GEMV record is measured against the int8 peak as well: a
// multiply format with two or more tokens on the kernels of the peak loop's path (zmm
// vpdpbusd, or ymm vpmaddubsw), not on AMX tiles (impl "+amx": a batch from
// kernels.AMXMinTokens on).
func peakBound(f quantcfg.Format, n int, impl string) bool {
	isa, ok := kernels.Int8PeakPath()
	switch f {
	case quantcfg.I2S, quantcfg.Int2, quantcfg.Int8: // (int1's GEMV looks up: int1.go)
		return ok && n >= 2 && strings.HasPrefix(impl, isa.String()+"/") && !strings.HasSuffix(impl, "+amx")
	}
	return false
}

// A suite is one kind of measurement (bandwidth is always first). A later `--model` suite
// (whole-model decode and prefill through the engine) adds a function of this type.
type suite func(e *benchEnv) ([]benchRecord, error)

var errUsage = errors.New("usage")

// The rounds of a GEMV bench (--rounds): each round times every runner of a shape in turn
// for at least minTime, and a record's time is the median over the rounds.
const (
	benchRounds    = 7
	quickRounds    = 5
	minBenchRounds = 3 // (a median of fewer is one round's figure)
	maxBenchRounds = 99
)

// given reports whether flag name was given on the command line.
func given(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

func parseBenchFlags(args []string, stderr io.Writer) (benchOpts, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o benchOpts
	fs.BoolVar(&o.json, "json", false, "print one JSON object (machine and results) instead of a table")
	fs.BoolVar(&o.quick, "quick", false, "a subset that finishes within 40 s (i2s, tl2, int2, bf16 on 2560x2560 and 4096x14336)")
	fs.BoolVar(&o.cache, "cache", false, "cache-resident variant: one weight matrix instead of a rotation through DRAM (op gemv_cache)")
	fs.BoolVar(&o.reads, "reads", false, "also time a plain read of each format's weights in the same calls as its GEMVs (the rotation and split, no compute: op gemv_read, or gemv_cache_read), the most a call of that size can reach here; each GEMV record then carries its share of it (vs_read_pct)")
	fs.BoolVar(&o.prefill, "prefill", false, "also run the prefill GEMM (4096x4096, 512 tokens) against the int8 peak (op gemm)")
	fs.StringVar(&o.plot, "plot", "", "write a roofline picture (SVG) to this file")
	fs.StringVar(&o.model, "model", "", "measure a whole model's linear layers through the engine instead (decode and 512-token prefill tokens/s; default formats i2s, tl2, bf16): "+benchModelNames())
	fs.String("device", "cpu", "cpu, or xe2:N for an Xe2 GPU's benchmark (its own flags)")
	formats := fs.String("format", "", "comma-separated formats (default: all; the GEMVs always measure bf16 too, the baseline of their speed-ups)")
	shapes := fs.String("shape", "", "comma-separated shapes MxK (default: the real-model shapes)")
	threads := fs.String("threads", "", "comma-separated thread counts (default: 1 and all CPUs)")
	ns := fs.String("n", "1,4", "comma-separated token counts per GEMV (with --model: tokens per decode pass, one per stream, default 1)")
	rounds := fs.Int("rounds", 0, fmt.Sprintf("rounds per GEMV, in [%d, %d], the medians taken over them: more rounds hold steadier on a shared machine (default %d, %d with --quick)", minBenchRounds, maxBenchRounds, benchRounds, quickRounds))
	tunings := fs.String("tuning", "", "comma-separated kernel tunings to run the GEMVs under, measured in the same rounds (default: this CPU's, as bitd info shows; names: "+strings.Join(kernels.TuningNames(), ", ")+"); records carry speedup_vs_tuning, the first one's time over theirs")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: bitd bench [flags]\n\nMeasures this machine's read bandwidth (the fastest of its read loops), then each format's GEMV on real-model shapes\nover distinct weight matrices totalling >= 512 MiB and twice the L3 (so DRAM is measured); a shape's formats\nare measured round by round in turn, so their ratios hold on a drifting machine.\n\nflags:")
		fs.PrintDefaults()
	}
	if !parseFlags(fs, args, stderr) {
		return o, errUsage
	}
	o.minBytes, o.rounds, o.minTime = kbench.SetBytes, benchRounds, 50*time.Millisecond
	if o.cache {
		o.minBytes = 0
	}
	if o.quick {
		o.rounds, o.minTime = quickRounds, 30*time.Millisecond
		o.formats = []quantcfg.Format{quantcfg.I2S, quantcfg.TL2, quantcfg.Int2, quantcfg.BF16}
		o.shapes = []kbench.Shape{{M: 2560, K: 2560}, {M: 4096, K: 14336}}
	}
	if o.model != "" {
		if _, ok := benchModels[o.model]; !ok {
			return o, fmt.Errorf("bench: --model %q: known models: %s", o.model, benchModelNames())
		}
		if o.plot != "" {
			return o, fmt.Errorf("bench: --plot draws the GEMV records; --model %q has none", o.model)
		}
		// The model bench takes formats, threads, quick and json; a GEMV flag beside it
		// would be ignored without a word.
		var unused []string
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "shape", "cache", "reads", "prefill", "rounds":
				unused = append(unused, "--"+f.Name)
			}
		})
		if len(unused) > 0 {
			return o, fmt.Errorf("bench: %s set the GEMV benchmarks; --model %q measures the model's own layers (it takes --format, --threads, --n, --quick and --json)", strings.Join(unused, ", "), o.model)
		}
	}
	o.formatsSet, o.threadsSet, o.nsSet = *formats != "", *threads != "", given(fs, "n")
	if *formats != "" {
		o.formats = nil
		for _, s := range strings.Split(*formats, ",") {
			f, err := quantcfg.ParseFormat(s)
			if err != nil {
				return o, fmt.Errorf("bench: --format: %w", err)
			}
			o.formats = appendNew(o.formats, f)
		}
	}
	if o.formats == nil {
		for _, fi := range quantcfg.Formats() {
			o.formats = append(o.formats, fi.Format)
		}
	}
	if *shapes != "" {
		o.shapes = nil
		for _, s := range strings.Split(*shapes, ",") {
			sh, err := kbench.ParseShape(s)
			if err != nil {
				return o, fmt.Errorf("bench: --shape: %w", err)
			}
			o.shapes = appendNew(o.shapes, sh)
		}
	}
	if o.shapes == nil {
		o.shapes = kbench.Shapes
	}
	var err error
	all := runtime.NumCPU()
	if o.threads, err = intList(*threads, 1, all); err != nil {
		return o, fmt.Errorf("bench: --threads: %w", err)
	}
	if o.threads == nil {
		o.threads = []int{1}
		if all > 1 {
			o.threads = append(o.threads, all)
		}
	}
	if given(fs, "rounds") {
		if *rounds < minBenchRounds || *rounds > maxBenchRounds {
			return o, fmt.Errorf("bench: --rounds %d: want %d to %d rounds", *rounds, minBenchRounds, maxBenchRounds)
		}
		o.rounds = *rounds // (with --quick too: then it may take longer than 40 s)
	}
	if o.ns, err = intList(*ns, 1, 64); err != nil || o.ns == nil {
		return o, fmt.Errorf("bench: --n: %v (want token counts in [1, 64], like 1,4)", err)
	}
	if *tunings != "" {
		if o.model != "" {
			return o, fmt.Errorf("bench: --tuning compares the GEMVs; --model %q runs under this CPU's tuning (set BITD_TUNING)", o.model)
		}
		for _, v := range strings.Split(*tunings, ",") {
			tn, err := kernels.ParseTuning(v)
			if err != nil {
				return o, fmt.Errorf("bench: --tuning: %w", err)
			}
			o.tunings = appendNew(o.tunings, tn)
		}
	}
	return o, nil
}

// appendNew appends v to s unless s holds it: a list flag names each value once, however
// often it is given.
func appendNew[T comparable](s []T, v T) []T {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// intList parses "a,b,c" with every value in [lo, hi], each once in the order given; "" gives nil.
func intList(s string, lo, hi int) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < lo || v > hi {
			return nil, fmt.Errorf("%q is not an integer in [%d, %d]", f, lo, hi)
		}
		out = appendNew(out, v)
	}
	return out, nil
}

func runBench(args []string, stdout, stderr io.Writer) int {
	// --device xe2:N (and other non-CPU backends) have benchmarks of their own.
	for i, a := range args {
		v := ""
		switch {
		case (a == "--device" || a == "-device") && i+1 < len(args):
			v = args[i+1]
		case strings.HasPrefix(a, "--device="), strings.HasPrefix(a, "-device="):
			v = a[strings.Index(a, "=")+1:]
		}
		if prefix, _, _ := strings.Cut(v, ":"); v != "" && prefix != "cpu" {
			if fn, ok := benchBackends[prefix]; ok {
				return fn(args, stdout, stderr)
			}
			fmt.Fprintf(stderr, "bench: --device %q: no benchmark for that device (cpu, or one of the backends bitd info lists)\n", v)
			return 2
		}
	}
	o, err := parseBenchFlags(args, stderr)
	if errors.Is(err, errUsage) {
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	// The picture goes to a file beside --plot, created before minutes of measuring (a bad
	// path fails at once) and renamed over it at the end: a failed run leaves an earlier
	// picture as it was.
	var plot *os.File
	if o.plot != "" {
		if plot, err = paged.CreateBeside(o.plot); err != nil {
			fmt.Fprintf(stderr, "bench: --plot %s: %v\n", o.plot, err)
			return 2
		}
		defer func() {
			plot.Close()
			os.Remove(plot.Name()) // after the rename there is nothing to remove
		}()
	}
	e := &benchEnv{opt: o, log: stderr, l3By: map[int]readRate{}, dramBy: map[int]readRate{}, peakBy: map[int]float64{}, amxBy: map[int]float64{}}
	if o.json {
		e.log = io.Discard
	}
	if err := e.measureMachine(); err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	defer e.dram.Free()
	defer func() {
		if e.l3 != nil {
			e.l3.Free()
		}
	}()
	if o.model != "" {
		recs, err := modelSuite(e)
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		if o.json {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(struct {
				Machine  benchMachine          `json:"machine"`
				Results  []modelRecord         `json:"results"`
				Adaptive []kernels.AdaptChoice `json:"adaptive,omitempty"`
			}{e.machine, recs, kernels.AdaptChoices()}); err != nil {
				fmt.Fprintln(stderr, "bench:", err)
				return 1
			}
			return 0
		}
		fmt.Fprintf(stdout, "cpu %s; read bandwidth DRAM %.1f GB/s (1 thread), %.1f GB/s (all)\n\n%-16s %-6s %3s %3s %12s %8s %6s %14s %10s %10s\n",
			e.machine.CPU, e.machine.ReadGBps.DRAM1T, e.machine.ReadGBps.DRAMAll, "model", "format", "thr", "n", "decode tok/s", "dec GB/s", "roof%", "prefill tok/s", "dec x bf16", "pre x bf16")
		ratio := func(v float64, f string) string { // 0: not measured (bf16 not in --format; weights cache-resident)
			if v == 0 {
				return "n/a"
			}
			return fmt.Sprintf(f, v)
		}
		for _, r := range recs {
			fmt.Fprintf(stdout, "%-16s %-6s %3d %3d %12.1f %8.1f %6s %14.1f %10s %10s\n", r.Model, r.Format, r.Threads, r.N, r.DecodeTokS, r.DecodeGBps,
				ratio(r.DecodeRooflinePct, "%.1f"), r.PrefillTokS, ratio(r.SpeedupVsBF16, "%.2f"), ratio(r.PrefillSpeedupVsBF16, "%.2f"))
		}
		printAdaptive(stdout, kernels.AdaptChoices())
		return 0
	}
	suites := []suite{gemvSuite}
	if o.prefill {
		suites = append(suites, prefillSuite)
	}
	var results []benchRecord
	for _, s := range suites {
		recs, err := s(e)
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		results = append(results, recs...)
	}
	// Every GEMV is also compared with the best read rate of the whole run (the most
	// conservative roofline on a machine whose bandwidth drifts).
	for i := range results {
		if r := &results[i]; r.Op != "gemm" {
			if rf := e.roofline(r.Threads, strings.HasPrefix(r.Op, "gemv_cache")).gbps; rf > 0 {
				r.BestRooflinePct = 100 * r.GBps / rf
			}
		}
	}
	rep := benchReport{Machine: e.machine, Results: results, Adaptive: kernels.AdaptChoices()}
	code := 0
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			code = 1
		}
	} else {
		printTable(stdout, rep)
	}
	if plot != nil {
		if err := writePlot(plot, o.plot, rooflineSVG(rep)); err != nil {
			fmt.Fprintf(stderr, "bench: --plot %s: %v\n", o.plot, err)
			code = 1
		}
	}
	return code
}

// writePlot writes svg to the temporary file f and renames it to path (readable by all, as
// os.Create would have made it).
func writePlot(f *os.File, path, svg string) error {
	if _, err := io.WriteString(f, svg); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// measureMachine fills the machine record: DRAM read bandwidth with a 1 GiB buffer (1 thread
// and all), and L3-resident read bandwidth.
func (e *benchEnv) measureMachine() error {
	m := &e.machine
	m.CPU, m.Features, m.Threads, m.L3Bytes = kernels.CPUName(), kernels.CPUFeatures(), runtime.NumCPU(), kbench.L3Bytes
	if m.Features == nil {
		m.Features = []string{}
	}
	if isa, ok := kernels.Int8PeakPath(); ok {
		m.Int8Peak = isa.String()
	}
	tn, _ := kernels.CurrentTuning()
	m.Tuning = tn.String()
	fmt.Fprintf(e.log, "cpu: %s (%d threads; %s; kernel tuning %s)\n", m.CPU, m.Threads, strings.Join(m.Features, " "), m.Tuning)
	dram, err := kbench.Alloc(kbench.ReadBytes)
	if err != nil {
		return err
	}
	e.dram = dram
	l3, err := kbench.Alloc(kbench.L3ReadBytes)
	if err != nil {
		return err
	}
	e.l3 = l3
	reps := 5
	if e.opt.quick {
		reps = 3
	}
	threads := append([]int{1}, e.opt.threads...)
	threads = append(threads, m.Threads)
	for _, t := range dedup(threads) {
		p := kbench.NewPool(t)
		bps, loop := kbench.ReadBandwidth(p, l3.B, 20*reps)
		p.Close()
		c := readRate{bps / 1e9, loop}
		e.l3By[t] = c
		if t == m.Threads {
			m.ReadGBps.L3All, m.ReadLoop.L3All = c.gbps, loop.Name
		}
		e.remeasureDRAM(t, reps)
		d := e.dramBy[t]
		fmt.Fprintf(e.log, "read bandwidth, %d thread(s): DRAM %.1f GB/s (%s), L3-resident %.1f GB/s (%s)\n",
			t, d.gbps, d.loop.Name, c.gbps, loop.Name)
	}
	return nil
}

// readRate is a roofline: a read rate and the read loop (kernels.ReadLoops) that read it.
type readRate struct {
	gbps float64
	loop kernels.ReadLoop
}

// remeasureDRAM reads the 1 GiB buffer with t threads and keeps the best rate seen: the
// shared machine's bandwidth drifts during a run, and a kernel is compared with the best
// read rate measured up to its own measurement (before each shape), never with a stale low.
func (e *benchEnv) remeasureDRAM(t, reps int) {
	p := kbench.NewPool(t)
	bps, loop := kbench.ReadBandwidth(p, e.dram.B, reps)
	p.Close()
	if d := bps / 1e9; d > e.dramBy[t].gbps {
		e.dramBy[t] = readRate{d, loop}
	}
	m := &e.machine
	one, all := e.dramBy[1], e.dramBy[m.Threads]
	m.ReadGBps.DRAM1T, m.ReadLoop.DRAM1T = one.gbps, one.loop.Name
	m.ReadGBps.DRAMAll, m.ReadLoop.DRAMAll = all.gbps, all.loop.Name
}

// roofline is the read rate a result is compared with, and its loop.
func (e *benchEnv) roofline(threads int, cache bool) readRate {
	if cache {
		return e.l3By[threads]
	}
	return e.dramBy[threads]
}

func dedup(v []int) []int {
	sort.Ints(v)
	out := v[:0]
	for i, x := range v {
		if i == 0 || x != v[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// gemvSuite runs every format's GEMV on every shape, token count and thread count (bf16
// first in each shape's records, the baseline of their speed-ups).
func gemvSuite(e *benchEnv) ([]benchRecord, error) {
	o := e.opt
	op := "gemv"
	if o.cache {
		op = "gemv_cache"
	}
	formats := append([]quantcfg.Format(nil), o.formats...)
	if !slices.Contains(formats, quantcfg.BF16) {
		formats = append(formats, quantcfg.BF16) // every record carries its speed-up over bf16
	}
	// bf16 first (the baseline of every speed-up), then i2s and the other ternary formats
	// (measured against i2s), the rest as asked: in each round a format's trials follow the
	// ones it is compared with most closely.
	rank := func(f quantcfg.Format) int {
		switch {
		case f == quantcfg.BF16:
			return 0
		case f == quantcfg.I2S:
			return 1
		case f.IsTernary():
			return 2
		}
		return 3
	}
	sort.SliceStable(formats, func(i, j int) bool { return rank(formats[i]) < rank(formats[j]) })
	// The roofline is read around every trial of the GEMVs: a drift of the memory's speed
	// (this VM's two-thread rate moves between about 45 and 75 GB/s from one second to the
	// next) reaches a GEMV and the read rate it is compared with alike.
	buf := e.dram.B
	if o.cache {
		buf = e.l3.B
	}
	one := slices.Index(o.ns, 1)
	var recs []benchRecord
	for _, sh := range o.shapes {
		if !o.cache {
			for _, t := range o.threads {
				e.remeasureDRAM(t, 3)
			}
		}
		// Every format's rotation of this shape at once: the formats are measured round by
		// round in turn (kbench.Interleaved), so drift reaches them alike and ratios hold.
		sets := make([]*kbench.Set, 0, len(formats))
		free := func() {
			for _, s := range sets {
				s.Free()
			}
		}
		for _, f := range formats {
			set, err := kbench.NewSet(f, sh, o.minBytes, 1)
			if err != nil {
				free()
				if errors.Is(err, kbench.ErrMemory) && len(sets) > 0 {
					err = fmt.Errorf("%w (a shape's formats are in memory together, %d before this one: measure fewer at a time with --format)", err, len(sets))
				}
				return nil, fmt.Errorf("%s %s: %w", f, sh, err)
			}
			sets = append(sets, set)
			if set.Short() {
				fmt.Fprintf(e.log, "%-5s %-10s %d-byte blob: %d matrices (kbench.MaxSetLayers) make %.1f MiB, not the %d MiB of a DRAM measurement; its rates are partly cache-resident\n",
					f, sh, set.Layers[0].Layout.Bytes(), len(set.Layers), float64(set.WorkingSet())/(1<<20), o.minBytes>>20)
			}
		}
		bf16 := slices.IndexFunc(sets, func(s *kbench.Set) bool { return s.Format == quantcfg.BF16 })
		i2s := slices.IndexFunc(sets, func(s *kbench.Set) bool { return s.Format == quantcfg.I2S })
		// Per thread count, every format at every token count in the same rounds: the ratios
		// between formats (speed-ups over bf16 and i2s) and between token counts of a format
		// (n = 4 against n = 1) are taken round by round, so drift reaches both sides alike.
		// A format's token counts run one after another, then the next format's, in the
		// order above.
		// With several tunings, each GEMV runs under each of them in the same rounds.
		tunings, tuned := o.tunings, len(o.tunings) > 0
		if !tuned {
			cur, _ := kernels.CurrentTuning()
			tunings = []kernels.Tuning{cur}
		}
		nt := len(tunings)
		for _, t := range o.threads {
			p := kbench.NewPool(t)
			rs := make([]*kbench.Runner, 0, (nt*len(o.ns)+1)*len(sets)) // [tuning][format][n], then [format] reads
			for _, tn := range tunings {
				for _, set := range sets {
					for _, n := range o.ns {
						r, err := kbench.NewRunner(p, set, n, 2)
						if err != nil {
							p.Close()
							free()
							return nil, fmt.Errorf("%s %s: %w", set.Format, sh, err)
						}
						r.Tuning, r.Tuned = tn, tuned
						rs = append(rs, r)
					}
				}
			}
			if o.reads {
				for _, set := range sets {
					r, err := kbench.NewReadRunner(p, set, 2, e.roofline(t, o.cache).loop)
					if err != nil {
						p.Close()
						free()
						return nil, fmt.Errorf("%s %s: read: %w", set.Format, sh, err)
					}
					rs = append(rs, r)
				}
			}
			probe, err := kbench.NewCoreProbe(p)
			if err != nil {
				p.Close()
				free()
				return nil, fmt.Errorf("%s: the core probe: %w", sh, err)
			}
			was, _ := kernels.CurrentTuning()
			tms := kbench.Interleaved(rs, &kbench.Reads{Buf: buf, Loop: e.roofline(t, o.cache).loop, Probe: probe}, o.rounds, o.minTime)
			kernels.SwitchTuning(was)
			probe.Close()
			p.Close()
			perTuning := len(sets) * len(o.ns)
			atT := func(ti, ni, i int) kbench.Timing { return tms[ti*perTuning+i*len(o.ns)+ni] }
			readAt := func(i int) kbench.Timing { return tms[nt*perTuning+i] }
			for ti, tn := range tunings {
				at := func(ni, i int) kbench.Timing { return atT(ti, ni, i) }
				for ni, n := range o.ns {
					for i, set := range sets {
						f, tm := set.Format, at(ni, i)
						rec := timedRecord(op, set, n, t, tm)
						rec.Tuning = tn.String()
						rec.SpeedupVsBF16 = kbench.RoundRatio(at(ni, bf16), tm)
						more := ""
						if one >= 0 && n != 1 {
							rec.TimeVsN1 = kbench.RoundRatio(tm, at(one, i))
							more = fmt.Sprintf("  %.2fx the n=1 time", rec.TimeVsN1)
						}
						if i2s >= 0 && f.IsTernary() && f != quantcfg.I2S {
							rec.SpeedupVsI2S = kbench.RoundRatio(at(ni, i2s), tm)
							more += fmt.Sprintf("  x%.3f vs i2s", rec.SpeedupVsI2S)
						}
						if o.reads {
							rec.VsReadPct = 100 * kbench.RoundRatio(readAt(i), tm)
							more += fmt.Sprintf("  %.0f%% of a read of the same calls", rec.VsReadPct)
						}
						if nt > 1 {
							rec.SpeedupVsTuning = kbench.RoundRatio(atT(0, ni, i), tm)
							more += fmt.Sprintf("  tuning %s: x%.3f vs %s", tn, rec.SpeedupVsTuning, tunings[0])
						}
						if peakBound(f, n, tm.Impl) {
							rec.againstPeak(e.int8Peak(t))
							more += fmt.Sprintf("  %.0f%% of the int8 peak", rec.Int8PeakPct)
						}
						if 2*rec.RooflineRounds < rec.Rounds {
							more += fmt.Sprintf("  (roofline from %d of %d rounds: the machine was disturbed)", rec.RooflineRounds, rec.Rounds)
						}
						if note := coresNote(rec.ComputeScale, t); note != "" {
							more += "  " + note
						}
						recs = append(recs, rec)
						fmt.Fprintf(e.log, "%-5s %-10s n=%d t=%d %-18s %7.1f GB/s %5.0f%% of %.1f %10.0f ns  x%.2f vs bf16%s\n",
							f, sh, n, t, tm.Impl, tm.GBps, rec.RooflinePct, rec.RooflineGBps, tm.NsPerOp, rec.SpeedupVsBF16, more)
					}
				}
			}
			if o.reads {
				// The reads' records, one per format (their speed-up over bf16 is the most
				// that format's kernels could show on this shape).
				for i, set := range sets {
					tm := readAt(i)
					rec := timedRecord(op+"_read", set, 1, t, tm)
					if one >= 0 {
						rec.SpeedupVsBF16 = kbench.RoundRatio(atT(0, one, bf16), tm)
					}
					recs = append(recs, rec)
					more := ""
					if note := coresNote(rec.ComputeScale, t); note != "" {
						more = "  " + note
					}
					fmt.Fprintf(e.log, "%-5s %-10s read t=%d %7.1f GB/s %5.0f%% of %.1f %10.0f ns%s\n",
						set.Format, sh, t, tm.GBps, rec.RooflinePct, rec.RooflineGBps, tm.NsPerOp, more)
				}
			}
		}
		free()
	}
	return recs, nil
}

// timedRecord is the record of a rotation's timing against the reads around its trials.
func timedRecord(op string, set *kbench.Set, n, threads int, tm kbench.Timing) benchRecord {
	return benchRecord{Op: op, Format: string(set.Format), M: set.Shape.M, K: set.Shape.K, N: n, Threads: threads, Impl: tm.Impl,
		GBps: tm.GBps, NsPerOp: tm.NsPerOp, WorkingSetBytes: set.WorkingSet(), PartlyCached: set.Short(),
		BeyondL3:    strings.HasPrefix(op, "gemv_cache") && !kbench.FitsL3(set.WorkingSet()),
		RooflinePct: tm.RoofPct, RooflineGBps: tm.ReadBps / 1e9, RooflineRounds: tm.RoofRounds, Rounds: len(tm.Rounds),
		ComputeScale: tm.ComputeScale}
}

// sharedScale is the compute_scale per thread below which a record's threads count as
// sharing cores (1.45 at two threads): the probe read 1.5-1.8 on cores of their own and
// 1.1-1.3 on shared ones on the 2-vCPU guest (kbench.CoreProbe).
const sharedScale = 0.725

// sharedCores tells whether a compute_scale measured on threads threads says they shared
// cores (0: not measured).
func sharedCores(scale float64, threads int) bool {
	return scale > 0 && scale < sharedScale*float64(threads)
}

// coresNote is the text output's note on a compute_scale measured on threads threads (""
// without one).
func coresNote(scale float64, threads int) string {
	switch {
	case scale == 0:
		return ""
	case sharedCores(scale, threads):
		return fmt.Sprintf("compute x%.2f of one thread: the threads shared cores", scale)
	}
	return fmt.Sprintf("compute x%.2f of one thread", scale)
}

// prefillSuite measures the GEMM of a 4096x4096 layer at 512 tokens for i2s, int2, tl2 and
// bf16 against the int8 peak measured in the same run (issue 3's prefill target). Where the
// integer GEMMs run on AMX (kernels.OnAMX), their impl says so ("+amx") and their peak
// is the AMX-INT8 peak loop's, also measured in the run; bf16 keeps the zmm path's.
func prefillSuite(e *benchEnv) ([]benchRecord, error) {
	const n = 512
	sh := kbench.Shape{M: 4096, K: 4096}
	amx := kernels.AMXReason() == ""
	var recs []benchRecord
	for _, t := range e.opt.threads {
		vnniPeak, amxPeak := e.int8Peak(t), 0.0
		if amx {
			amxPeak = e.amxPeak(t)
		}
		p := kbench.NewPool(t)
		var bfNs float64
		for _, f := range []quantcfg.Format{quantcfg.BF16, quantcfg.I2S, quantcfg.Int2, quantcfg.TL2} {
			set, err := kbench.NewSet(f, sh, 0, 1)
			if err != nil {
				p.Close()
				return nil, err
			}
			r, err := kbench.NewRunner(p, set, n, 2)
			if err != nil {
				set.Free()
				p.Close()
				return nil, err
			}
			tm := r.Measure(3, 100*time.Millisecond)
			set.Free()
			rec := benchRecord{Op: "gemm", Format: string(f), M: sh.M, K: sh.K, N: n, Threads: t, Impl: tm.Impl,
				GBps: tm.GBps, NsPerOp: tm.NsPerOp, WorkingSetBytes: tm.BytesOp}
			peak, peakName := vnniPeak, e.machine.Int8Peak+" int8"
			if strings.HasSuffix(rec.Impl, "+amx") {
				peak, peakName = amxPeak, "amx-int8"
			}
			rec.againstPeak(peak)
			rec.RooflinePct = rec.Int8PeakPct
			if f == quantcfg.BF16 {
				bfNs = tm.NsPerOp
			}
			if bfNs > 0 {
				rec.SpeedupVsBF16 = bfNs / tm.NsPerOp
			}
			recs = append(recs, rec)
			fmt.Fprintf(e.log, "gemm  %-5s %s n=%d t=%d %-22s %7.0f Gops (%.0f%% of the %.0f Gops %s peak) %10.0f ns  x%.2f vs bf16\n",
				f, sh, n, t, rec.Impl, rec.Gops, rec.RooflinePct, peak, peakName, tm.NsPerOp, rec.SpeedupVsBF16)
		}
		p.Close()
	}
	return recs, nil
}

func printTable(w io.Writer, rep benchReport) {
	m := rep.Machine
	fmt.Fprintf(w, "cpu %s, %d threads, kernel tuning %s\nread bandwidth: DRAM %.1f GB/s (1 thread), %.1f GB/s (%d threads); L3-resident %.1f GB/s\n\n",
		m.CPU, m.Threads, m.Tuning, m.ReadGBps.DRAM1T, m.ReadGBps.DRAMAll, m.Threads, m.ReadGBps.L3All)
	// With several tunings (--tuning) each GEMV's impl names its tuning, and a last column
	// gives its speed-up over the first tuning's.
	tunings := slices.ContainsFunc(rep.Results, func(r benchRecord) bool { return r.SpeedupVsTuning > 0 })
	implW, head := 18, ""
	if tunings {
		implW, head = 26, "  vs tuning"
	}
	fmt.Fprintf(w, "%-15s %-6s %-11s %3s %3s %-*s %8s %6s %12s %8s %6s %6s %6s %6s %6s%s\n", "op", "format", "shape", "n", "thr", implW, "impl", "GB/s", "roof%", "ns/op", "vs bf16", "vs n1", "vs i2s", "read%", "peak%", "cores", head)
	cached, beyond, shared := false, false, false
	for _, r := range rep.Results {
		shape := fmt.Sprintf("%dx%d", r.M, r.K)
		if r.PartlyCached {
			shape, cached = shape+"*", true
		}
		if r.BeyondL3 {
			shape, beyond = shape+"+", true
		}
		impl, vtun := r.Impl, ""
		if tunings && r.SpeedupVsTuning > 0 {
			impl, vtun = r.Impl+"@"+r.Tuning, fmt.Sprintf("  %9.3f", r.SpeedupVsTuning)
		}
		n1, vi2s, vread, vnni := "", "", "", ""
		if r.TimeVsN1 > 0 {
			n1 = fmt.Sprintf("%.2f", r.TimeVsN1)
		}
		if r.SpeedupVsI2S > 0 {
			vi2s = fmt.Sprintf("%.3f", r.SpeedupVsI2S)
		}
		if r.VsReadPct > 0 {
			vread = fmt.Sprintf("%.1f", r.VsReadPct)
		}
		if r.Int8PeakPct > 0 {
			vnni = fmt.Sprintf("%6.1f", r.Int8PeakPct)
		}
		cores := ""
		if r.ComputeScale > 0 {
			cores = fmt.Sprintf("%.2f", r.ComputeScale)
			if sharedCores(r.ComputeScale, r.Threads) {
				cores, shared = cores+"!", true
			}
		}
		fmt.Fprintf(w, "%-15s %-6s %-11s %3d %3d %-*s %8.1f %6.1f %12.0f %8.2f %6s %6s %6s %6s %6s%s\n", r.Op, r.Format, shape, r.N, r.Threads, implW, impl, r.GBps, r.RooflinePct, r.NsPerOp, r.SpeedupVsBF16, n1, vi2s, vread, vnni, cores, vtun)
	}
	if cached || beyond || shared {
		fmt.Fprintln(w)
	}
	if shared {
		fmt.Fprintf(w, "! cores: the threads shared cores around most of the record's trials (a compute-bound GEMV on all of them ran under %gx the thread count times one thread's rate): formats bound by their vector work had about one core's\n", sharedScale)
	}
	if cached {
		fmt.Fprintf(w, "* the shape's blob is too small for a DRAM working set within %d matrices: its rates are partly cache-resident\n", kbench.MaxSetLayers)
	}
	if beyond {
		fmt.Fprintf(w, "+ the matrix is larger than the L3 (%s): its cache variant reads DRAM\n", l3Text(m.L3Bytes))
	}
	printAdaptive(w, rep.Adaptive)
}

// printAdaptive lists where the adaptive tuning's one-token kernel choices ended (nothing
// when none ran).
func printAdaptive(w io.Writer, cs []kernels.AdaptChoice) {
	if len(cs) == 0 {
		return
	}
	fmt.Fprintln(w, "\nadaptive one-token kernels at the end (ns per KiB of weights, moving averages):")
	for _, c := range cs {
		fmt.Fprintf(w, "  %-5s %11s  %d thread(s)  %-17s  hardware prefetch %6.1f  software %6.1f  %d pieces, %d switches\n",
			c.Format, fmt.Sprintf("%dx%d", c.M, c.K), c.Threads, c.Kernel, c.HWNsKiB, c.SWNsKiB, c.Pieces, c.Switches)
	}
}

// rooflineSVG draws achieved GB/s per shape (groups) and format (bars) for each thread
// count's n=1 GEMVs, against the measured read bandwidth.
func rooflineSVG(rep benchReport) string {
	type key struct{ shape, format string }
	byThreads := map[int]map[key]float64{}
	var shapes, formats []string
	seenS, seenF := map[string]bool{}, map[string]bool{}
	for _, r := range rep.Results {
		if (r.Op != "gemv" && r.Op != "gemv_cache") || r.N != rep.Results[0].N {
			continue
		}
		s := fmt.Sprintf("%dx%d", r.M, r.K)
		if byThreads[r.Threads] == nil {
			byThreads[r.Threads] = map[key]float64{}
		}
		byThreads[r.Threads][key{s, r.Format}] = r.GBps
		if !seenS[s] {
			seenS[s], shapes = true, append(shapes, s)
		}
		if !seenF[r.Format] {
			seenF[r.Format], formats = true, append(formats, r.Format)
		}
	}
	var threads []int
	for t := range byThreads {
		threads = append(threads, t)
	}
	sort.Ints(threads)
	const pw, ph, left, top = 900, 320, 60, 40
	colors := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}
	var b strings.Builder
	height := top + len(threads)*(ph+60) + 40
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", pw+left+150, height)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14">GEMV weight read rate vs. measured read bandwidth (%s)</text>`+"\n", left, rep.Machine.CPU)
	for pi, t := range threads {
		y0 := top + pi*(ph+60)
		roof := rep.Machine.ReadGBps.DRAM1T
		if t > 1 {
			roof = rep.Machine.ReadGBps.DRAMAll
		}
		ymax := roof * 1.3
		for _, v := range byThreads[t] {
			ymax = math.Max(ymax, v*1.1)
		}
		ymax = math.Max(ymax, 1)
		sy := func(v float64) float64 { return float64(y0+ph) - v/ymax*float64(ph) }
		fmt.Fprintf(&b, `<text x="%d" y="%d">%d thread(s), n=%d</text>`+"\n", left, y0-8, t, rep.Results[0].N)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, y0+ph, left+pw, y0+ph)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, y0, left, y0+ph)
		for g := 0.0; g <= ymax; g += niceStep(ymax) {
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%.0f</text>`+"\n", left-4, sy(g)+4, g)
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="red" stroke-dasharray="6,3"/>`+"\n", left, sy(roof), left+pw, sy(roof))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" fill="red">read bandwidth %.1f GB/s</text>`+"\n", left+pw+4, sy(roof)+4, roof)
		gw := float64(pw) / float64(max(len(shapes), 1))
		bw := gw * 0.8 / float64(max(len(formats), 1))
		for si, s := range shapes {
			x0 := float64(left) + gw*float64(si) + gw*0.1
			for fi, f := range formats {
				v, ok := byThreads[t][key{s, f}]
				if !ok {
					continue
				}
				x := x0 + bw*float64(fi)
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s %.1f GB/s</title></rect>`+"\n",
					x, sy(v), bw*0.9, float64(y0+ph)-sy(v), colors[fi%len(colors)], f, s, v)
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x0+gw*0.4, y0+ph+14, s)
		}
	}
	for fi, f := range formats {
		y := top + 20*fi
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", left+pw+10, y+40, colors[fi%len(colors)], left+pw+24, y+49, f)
	}
	fmt.Fprintf(&b, `<text x="14" y="%d" transform="rotate(-90 14,%d)">GB/s of weights</text>`+"\n", top+ph/2, top+ph/2)
	b.WriteString("</svg>\n")
	return b.String()
}

func niceStep(max float64) float64 {
	s := math.Pow(10, math.Floor(math.Log10(max/5)))
	for _, m := range []float64{1, 2, 5, 10} {
		if max/(s*m) <= 8 {
			return s * m
		}
	}
	return s * 10
}

// l3Text names an L3 size for the table ("32 MiB", or that the CPU reports none).
func l3Text(n int) string {
	if n == 0 {
		return fmt.Sprintf("none reported; %d MiB assumed", kbench.L3ReadBytes>>20)
	}
	return fmt.Sprintf("%d MiB", n>>20)
}
