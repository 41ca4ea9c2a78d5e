package main

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"time"

	"bitgo/engine"
	"bitgo/kernels"
	"bitgo/kernels/kbench"
	"bitgo/quantcfg"
	"bitgo/sched"
)

// A benchModel is the linear layers of a transformer: Layers repetitions of Mats.
type benchModel struct {
	Name   string
	Layers int
	Mats   []benchMat
}

type benchMat struct {
	Name  string
	Out   int
	In    int
	Count int // how many matrices of this shape a layer has
}

// benchModels are the real models `bitd bench --model` knows.
var benchModels = map[string]benchModel{
	// BitNet b1.58 2B4T: hidden 2560, FFN 6912, 20 query heads and 5 KV heads of 128.
	"bitnet-2b": {Name: "bitnet-2b", Layers: 30, Mats: []benchMat{
		{"q_proj", 2560, 2560, 1}, {"k_proj", 640, 2560, 1}, {"v_proj", 640, 2560, 1}, {"o_proj", 2560, 2560, 1},
		{"gate_proj", 6912, 2560, 1}, {"up_proj", 6912, 2560, 1}, {"down_proj", 2560, 6912, 1},
	}},
	// The same model as vLLM runs it: QKVParallelLinear and MergedColumnParallelLinear hold
	// q, k and v, and gate and up, as one matrix each, so bitgo's vLLM method registers
	// 3840x2560 and 13824x2560 layers (bitgo.vllm, create_weights) where a torch model's
	// nn.Linear drop-ins (bitnet-2b) have five.
	"bitnet-2b-merged": {Name: "bitnet-2b-merged", Layers: 30, Mats: []benchMat{
		{"qkv_proj", 3840, 2560, 1}, {"o_proj", 2560, 2560, 1},
		{"gate_up_proj", 13824, 2560, 1}, {"down_proj", 2560, 6912, 1},
	}},
	// Llama 3 8B's shapes, as the ternary Llama3-8B-1.58 checkpoints have them and vLLM
	// merges them: hidden 4096, FFN 14336, 32 query heads and 8 KV heads of 128, 32 layers
	// (1.7 GiB of i2s; bf16's 14 GiB need the memory for it: modelFits).
	"llama3-8b-merged": {Name: "llama3-8b-merged", Layers: 32, Mats: []benchMat{
		{"qkv_proj", 6144, 4096, 1}, {"o_proj", 4096, 4096, 1},
		{"gate_up_proj", 28672, 4096, 1}, {"down_proj", 4096, 14336, 1},
	}},
}

// modelBytes is the bytes of model's packed weights in format f.
func modelBytes(model benchModel, f quantcfg.Format) (int64, error) {
	var n int64
	for _, m := range model.Mats {
		l, err := kernels.NewLayout(f, m.Out, m.In)
		if err != nil {
			return 0, fmt.Errorf("%s %dx%d: %w", m.Name, m.Out, m.In, err)
		}
		n += int64(l.Bytes()) * int64(m.Count) * int64(model.Layers)
	}
	return n, nil
}

// memAvailable is kbench.MemAvailable (a variable for the tests).
var memAvailable = kbench.MemAvailable

// modelFits returns an error unless model's weights in format f take at most 3/4 of the
// memory available: the engine holds them all (and the run a 1 GiB read buffer besides),
// and beyond what the system has the pages would swap, or the OOM killer end the process.
func modelFits(model benchModel, f quantcfg.Format) error {
	n, err := modelBytes(model, f)
	if err != nil {
		return err
	}
	if avail, ok := memAvailable(); ok && n > int64(avail)/4*3 {
		return fmt.Errorf("%s weights of %s take %.1f GiB, more than 3/4 of the %.1f GiB available (MemAvailable)",
			f, model.Name, float64(n)/(1<<30), float64(avail)/(1<<30))
	}
	return nil
}

func benchModelNames() string {
	var names []string
	for n := range benchModels {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// modelRecord is one `--model` result (op "model"); it is written as its own JSON object.
type modelRecord struct {
	Op      string `json:"op"`
	Model   string `json:"model"`
	Format  string `json:"format"`
	Threads int    `json:"threads"`
	// N is the tokens a decode pass takes through every layer, one per stream (--n: a
	// batch of n sequences decoding together); DecodeTokS counts all of them.
	N             int     `json:"n"`
	DecodeTokS    float64 `json:"decode_tok_s"`
	PrefillTokS   float64 `json:"prefill_tok_s"`
	SpeedupVsBF16 float64 `json:"speedup_vs_bf16"`
	// PrefillSpeedupVsBF16 is the prefill counterpart of SpeedupVsBF16 (decode). Both are 0
	// when bf16 was not measured in the run (--format without bf16).
	PrefillSpeedupVsBF16 float64 `json:"prefill_speedup_vs_bf16"`
	WeightBytes          int64   `json:"weight_bytes"`
	// DecodeGBps is the weight bytes decode reads per second (WeightBytes x DecodeTokS / N),
	// and DecodeRooflinePct its share of the DRAM read rate: the median over the decode
	// passes of each pass's rate over the mean of reads of the 1 GiB buffer with as many
	// threads just before and just after it (the machine's bandwidth drifts within seconds).
	// It is the whole model's efficiency, every call's activation quantization, fork and
	// join included; 0 where the weights would fit twice in the L3 (decode then reads them
	// from cache as much as from DRAM; modelCacheResident).
	DecodeGBps        float64 `json:"decode_gbps"`
	DecodeRooflinePct float64 `json:"decode_roofline_pct"`
	// ComputeScale: at two threads or more, how they shared the cores around the decode
	// passes (benchRecord.ComputeScale), the median over the passes of the mean of the
	// probes beside the reads just before and after each; 0 where there are no reads.
	ComputeScale float64 `json:"compute_scale,omitempty"`
	// HugePagePct is the share of the weights the kernel mapped with huge pages once they
	// were registered (engine.HugePageBytes over WeightBytes; 4 KiB pages cost decode up to
	// 1.13x its time), -1 when it could not tell.
	HugePagePct float64 `json:"huge_page_pct"`
}

// modelProbeTime is the time of each core probe beside a decode pass's reads.
const modelProbeTime = 20 * time.Millisecond

// modelCacheResident tells whether weights of n bytes may be read from the L3 in part
// between two decode passes: less than twice its size (kbench.FitsL3).
func modelCacheResident(n int64) bool { return kbench.FitsL3(int(n / 2)) }

// prefillTokens is the prompt length of the prefill measurement.
const prefillTokens = 512

// prefillLayers is how many of the model's layers the prefill pass times: prefill is
// compute-bound (each weight is reused by 512 tokens), so the time of a few layers times
// Layers/prefillLayers is the whole model's, and bf16 stays within the time budget.
const prefillLayers = 3

// modelSuite registers the model's linear layers (random weights, every layer in its own
// memory, so decode reads the whole model from DRAM) in an engine on sched's pinned pool,
// and measures decode (n tokens through every layer, --n: 1 by default; the median over
// passes) and prefill (512 tokens) for each format.
func modelSuite(e *benchEnv) ([]modelRecord, error) {
	model := benchModels[e.opt.model]
	formats := e.opt.formats
	if !e.opt.formatsSet {
		formats = []quantcfg.Format{quantcfg.BF16, quantcfg.I2S, quantcfg.TL2}
	}
	// Every format's weights must fit before any is measured; of the default formats one
	// that does not (bf16 of a large model) is left out, and the speed-ups with it.
	kept := formats[:0:0]
	for _, f := range formats {
		if err := modelFits(model, f); err != nil {
			if e.opt.formatsSet {
				return nil, fmt.Errorf("--model %s --format %s: %w", model.Name, f, err)
			}
			fmt.Fprintf(e.log, "model %s: leaving %s out: %v\n", model.Name, f, err)
			continue
		}
		kept = append(kept, f)
	}
	formats = kept
	if len(formats) == 0 {
		return nil, fmt.Errorf("--model %s: no format's weights fit in memory", model.Name)
	}
	// bf16 first, so every other format's speed-up is known when it is printed.
	slices.SortStableFunc(formats, func(a, b quantcfg.Format) int {
		return map[bool]int{true: 0, false: 1}[a == quantcfg.BF16] - map[bool]int{true: 0, false: 1}[b == quantcfg.BF16]
	})
	threads := []int{runtime.NumCPU()}
	if e.opt.threadsSet {
		threads = e.opt.threads
	}
	ns := []int{1}
	if e.opt.nsSet {
		ns = e.opt.ns
	}
	var recs []modelRecord
	for _, t := range threads {
		sc := sched.Default()
		sc.Threads = min(t, runtime.GOMAXPROCS(0))
		pool, err := sched.New(sc)
		if err != nil {
			return nil, err
		}
		eng, err := engine.New(engine.Config{Runner: sched.Runner{Pool: pool}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			pool.Close()
			return nil, err
		}
		bf := map[int]modelRecord{} // bf16's, by N
		for _, f := range formats {
			rs, err := measureModel(e, eng, model, f, pool.Threads(), ns)
			if err != nil {
				eng.Close()
				pool.Close()
				return nil, err
			}
			for _, r := range rs {
				r.Threads = pool.Threads()
				roof := "cache-resident"
				if r.DecodeRooflinePct > 0 {
					roof = fmt.Sprintf("%.0f%% of the read rate", r.DecodeRooflinePct)
				}
				if note := coresNote(r.ComputeScale, r.Threads); note != "" {
					roof += "; " + note
				}
				if f == quantcfg.BF16 {
					bf[r.N] = r
				}
				vs := "" // without bf16 in the run (or before it) there is nothing to compare with
				if b := bf[r.N]; b.DecodeTokS > 0 {
					r.SpeedupVsBF16 = r.DecodeTokS / b.DecodeTokS
					r.PrefillSpeedupVsBF16 = r.PrefillTokS / b.PrefillTokS
					vs = fmt.Sprintf("  x%.2f / x%.2f vs bf16", r.SpeedupVsBF16, r.PrefillSpeedupVsBF16)
				}
				huge := "huge pages unknown"
				if r.HugePagePct >= 0 {
					huge = fmt.Sprintf("%.0f%% in huge pages", r.HugePagePct)
				}
				fmt.Fprintf(e.log, "model %s %-5s t=%d n=%d  decode %7.1f tok/s (%.1f GB/s, %s)  prefill(%d) %8.1f tok/s%s  (%.0f MiB of weights, %s)\n",
					model.Name, f, r.Threads, r.N, r.DecodeTokS, r.DecodeGBps, roof, prefillTokens, r.PrefillTokS, vs, float64(r.WeightBytes)/(1<<20), huge)
				recs = append(recs, r)
			}
		}
		if err := eng.Close(); err != nil {
			pool.Close()
			return nil, err
		}
		if err := pool.Close(); err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// measureModel registers the model's layers in format f and measures decode at each token
// count of ns (a record each) and prefill (the same figure in every record).
func measureModel(e *benchEnv, eng *engine.Engine, model benchModel, f quantcfg.Format, threads int, ns []int) ([]modelRecord, error) {
	rec := modelRecord{Op: "model", Model: model.Name, Format: string(f)}
	rng := rand.New(rand.NewPCG(uint64(len(f)), 7))
	type mat struct {
		spec   quantcfg.LayerSpec
		blob   []byte
		scales []float32
	}
	// One random template per shape; every layer gets its own copy (distinct memory).
	var templates []mat
	for _, m := range model.Mats {
		spec := quantcfg.LayerSpec{Format: f, Out: m.Out, In: m.In}.WithDefaults()
		w := kernels.RandomWeights(rng, f, m.Out, m.In, 0.02)
		blob, err := kernels.PackNew(f, m.Out, m.In, w)
		if err != nil {
			return nil, err
		}
		scales := make([]float32, spec.NumScales())
		for i := range scales {
			scales[i] = 0.01
		}
		for c := 0; c < m.Count; c++ {
			templates = append(templates, mat{spec, blob, scales})
		}
	}
	ids := make([][]engine.ID, model.Layers)
	defer func() {
		for _, layer := range ids {
			for _, id := range layer {
				_ = eng.Free(id)
			}
		}
		runtime.GC()
		debug.FreeOSMemory()
	}()
	for l := range ids {
		for i, tm := range templates {
			// The engine copies the blob into memory of its own, as it does a client's upload.
			s := engine.Spec{LayerSpec: tm.spec, Packed: tm.blob, Trusted: true, Scales: tm.scales}
			s.Name = fmt.Sprintf("bench/%d/%s/%d", l, model.Mats[min(i, len(model.Mats)-1)].Name, i)
			id, err := eng.Register(s)
			if err != nil {
				return nil, err
			}
			ids[l] = append(ids[l], id)
			rec.WeightBytes += int64(len(tm.blob))
		}
	}
	maxK, maxM := 0, 0
	for _, tm := range templates {
		maxK, maxM = max(maxK, tm.spec.In), max(maxM, tm.spec.Out)
	}
	x := make([]float32, prefillTokens*maxK)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	out := make([]float32, prefillTokens*maxM)
	pass := func(layers, n int) (time.Duration, error) {
		start := time.Now()
		for l := 0; l < layers; l++ {
			for i, id := range ids[l] {
				tm := templates[i]
				if err := eng.ForwardF32(id, x[:n*tm.spec.In], n, out[:n*tm.spec.Out]); err != nil {
					return 0, err
				}
			}
		}
		return time.Since(start), nil
	}
	// decode: n tokens through every layer; warm up, then the median of several passes
	passes := 9
	if f.IsFloat() || e.opt.quick {
		passes = 5
	}
	rec.HugePagePct = -1
	if h := eng.HugePageBytes(); h >= 0 {
		rec.HugePagePct = min(100, 100*float64(h)/float64(rec.WeightBytes))
	}
	var recs []modelRecord
	for _, n := range ns {
		r, err := measureDecode(e, rec, threads, model.Layers, n, passes, pass)
		if err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	// prefill: 512 tokens through prefillLayers layers, scaled to the model; best of two
	// passes after a warm-up of one layer
	if _, err := pass(1, prefillTokens); err != nil {
		return nil, err
	}
	layers := min(prefillLayers, model.Layers)
	best := time.Duration(1<<63 - 1)
	for i := 0; i < 2; i++ {
		d, err := pass(layers, prefillTokens)
		if err != nil {
			return nil, err
		}
		best = min(best, d)
	}
	whole := best.Seconds() * float64(model.Layers) / float64(layers)
	for i := range recs {
		recs[i].PrefillTokS = prefillTokens / whole
	}
	return recs, nil
}

// measureDecode times passes of n tokens through every layer (pass(layers, n)) after one
// to warm up, between reads of the DRAM buffer (their roofline), and fills rec's decode
// figures from the medians.
func measureDecode(e *benchEnv, rec modelRecord, threads, layers, n, passes int, pass func(layers, n int) (time.Duration, error)) (modelRecord, error) {
	rec.N = n
	if _, err := pass(layers, n); err != nil {
		return rec, err
	}
	// The roofline of each pass: the mean of reads just before and just after it (a pass
	// of bf16 weights lasts long enough for the memory's speed to change within it).
	// Beside each read, at two threads or more, the probe of how the threads share the
	// cores (kbench.CoreProbe; 0 at one thread).
	read := func() (bps, scale float64, err error) {
		if modelCacheResident(rec.WeightBytes) {
			return 0, 0, nil
		}
		// A pool of its own, closed at once: its idle workers would spin for milliseconds,
		// on the cores the pass runs on.
		rp := kbench.NewPool(threads)
		defer rp.Close()
		bps, _ = kbench.ReadBandwidth(rp, e.dram.B, 1)
		probe, err := kbench.NewCoreProbe(rp)
		if probe != nil {
			scale = probe.Scale(modelProbeTime)
			probe.Close()
		}
		return bps, scale, err
	}
	var secs, pcts []float64
	before, scale, err := read()
	if err != nil {
		return rec, err
	}
	scales := []float64{scale} // the probes before each pass and after the last
	for i := 0; i < passes; i++ {
		d, err := pass(layers, n)
		if err != nil {
			return rec, err
		}
		secs = append(secs, d.Seconds())
		after, scale, err := read()
		if err != nil {
			return rec, err
		}
		if before > 0 && after > 0 {
			pcts = append(pcts, 100*float64(rec.WeightBytes)/d.Seconds()/((before+after)/2))
		}
		scales = append(scales, scale)
		before = after
	}
	rec.ComputeScale = kbench.ScaleAround(scales, 1, 0)
	med := kbench.Median(secs)
	rec.DecodeTokS = float64(n) / med
	rec.DecodeGBps = float64(rec.WeightBytes) / med / 1e9
	if len(pcts) > 0 {
		rec.DecodeRooflinePct = kbench.Median(pcts)
	}
	return rec, nil
}
