package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"bitgo/kernels"
	"bitgo/kernels/kbench"
	"bitgo/quantcfg"
)

func TestBenchFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--format", "i3s"}, `format "i3s"`},
		{[]string{"--shape", "12x"}, `shape "12x"`},
		{[]string{"--threads", "0"}, `"0" is not an integer`},
		{[]string{"--n", "1,x"}, "--n"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		// checked before the minutes of measuring, not after them
		{[]string{"--plot", "/nonexistent-dir/r.svg"}, "--plot /nonexistent-dir/r.svg: open /nonexistent-dir/.r.svg."},
		{[]string{"--model", "bitnet-2b", "--plot", "r.svg"}, "--plot draws the GEMV records"},
		{[]string{"--plot", os.TempDir()}, "--plot " + os.TempDir() + ": invalid argument: is a directory"},
		{[]string{"--tuning", "zen4,zen5"}, `--tuning: unknown kernel tuning "zen5" (want one of default, zen4, zen3, default+adapt, zen4+adapt, zen3+adapt)`},
		{[]string{"--model", "bitnet-2b", "--tuning", "zen4"}, "--tuning compares the GEMVs"},
		{[]string{"--model", "bitnet-2b", "--shape", "5x5", "--cache"}, `bench: --cache, --shape set the GEMV benchmarks; --model "bitnet-2b" measures`},
		{[]string{"--model", "bitnet-2b", "--n", "0"}, "bench: --n: "},
		{[]string{"--rounds", "2"}, "bench: --rounds 2: want 3 to 99 rounds"},
		{[]string{"--rounds", "0", "--quick"}, "bench: --rounds 0: want 3 to 99 rounds"},
		{[]string{"--rounds", "x"}, `invalid value "x" for flag -rounds`},
		{[]string{"--model", "bitnet-2b", "--rounds", "9"}, "bench: --rounds set the GEMV benchmarks"},
	} {
		var stderr bytes.Buffer
		if code := run(append([]string{"bench"}, c.args...), &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("bench %v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}
}

// TestBenchAdaptive: under an adaptive tuning, --json ends with where the one-token GEMVs'
// kernel choices stood, and the table lists them.
func TestBenchAdaptive(t *testing.T) {
	if testing.Short() {
		t.Skip("measures bandwidth over 1 GiB")
	}
	if tn, _ := kernels.CurrentTuning(); !tn.Adaptive() || tn.Idle() != "" {
		t.Skipf("tuning %s: no adaptive kernels run", tn)
	}
	for _, asJSON := range []bool{true, false} {
		args := []string{"bench", "--cache", "--format", "i2s", "--shape", "2560x2560", "--threads", "1", "--n", "1", "--rounds", "3"}
		if asJSON {
			args = append(args, "--json")
		}
		var out, stderr bytes.Buffer
		if code := run(args, &out, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		if !asJSON {
			if !regexp.MustCompile(`(?m)^  i2s +2560x2560  1 thread\(s\)  (hardware|software)-prefetch +hardware prefetch +[0-9.]+ +software +[0-9.]+ +[0-9]+ pieces, [0-9]+ switches$`).Match(out.Bytes()) {
				t.Errorf("the table lists no adaptive choice of i2s 2560x2560:\n%s", out.String())
			}
			continue
		}
		var rep struct {
			Adaptive []kernels.AdaptChoice `json:"adaptive"`
		}
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out.String())
		}
		ran := map[string]bool{}
		for _, c := range rep.Adaptive {
			if c.M == 2560 && c.K == 2560 && c.Threads == 1 && c.Pieces > 0 && c.Kernel != "" && c.HWNsKiB+c.SWNsKiB > 0 {
				ran[c.Format] = true
			}
		}
		if !ran["i2s"] || !ran["bf16"] {
			t.Errorf("adaptive %+v, want the choices of i2s and bf16 (the baseline) on 2560x2560", rep.Adaptive)
		}
	}
}

// TestBenchJSON runs a tiny cache-resident bench and checks the --json schema.
func TestBenchJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("measures bandwidth over 1 GiB")
	}
	plot := filepath.Join(t.TempDir(), "r.svg")
	var out, stderr bytes.Buffer
	// i2s twice and no bf16: i2s is measured once, and bf16 beside it (the baseline of every
	// record's speed-up); the token counts are measured once each too. tl2 is measured
	// against i2s as well, and each format's weights are read in the same calls (--reads).
	code := run([]string{"bench", "--json", "--cache", "--reads", "--format", "i2s,tl2,i2s", "--shape", "64x256,64x256", "--threads", "1,1", "--n", "1,2,1", "--plot", plot}, &out, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var rep map[string]any
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	m := rep["machine"].(map[string]any)
	for _, k := range []string{"cpu", "features", "threads", "read_gbps"} {
		if _, ok := m[k]; !ok {
			t.Errorf("machine lacks %q", k)
		}
	}
	for _, k := range []string{"dram_1t", "dram_all", "l3_all"} {
		if v, ok := m["read_gbps"].(map[string]any)[k].(float64); !ok || v <= 0 {
			t.Errorf("read_gbps.%s = %v", k, v)
		}
	}
	// the int8 peak loop's path: the widest multiply path this CPU runs
	peakPath, _ := m["int8_peak"].(string)
	if isa, ok := kernels.Int8PeakPath(); ok != (peakPath != "") || ok && peakPath != isa.String() {
		t.Errorf("machine int8_peak %q, want %v (%v)", peakPath, isa, ok)
	}
	res := rep["results"].([]any)
	if len(res) != 9 {
		t.Fatalf("%d results, want 9 (i2s, tl2 and bf16 x 2 n, and a read of each): %s", len(res), out.String())
	}
	reads := map[string]bool{}
	var i2sGBps float64 // the i2s GEMV's at n = 1: its bar in the plot
	for _, r := range res {
		r := r.(map[string]any)
		for _, k := range []string{"op", "format", "m", "k", "n", "threads", "impl", "gbps", "roofline_pct", "ns_per_op", "speedup_vs_bf16", "working_set_bytes"} {
			if _, ok := r[k]; !ok {
				t.Errorf("result lacks %q: %v", k, r)
			}
		}
		if r["ns_per_op"].(float64) <= 0 {
			t.Errorf("bad record %v", r)
		}
		if tn, _ := kernels.CurrentTuning(); r["tuning"] != nil && r["tuning"] != tn.String() || r["op"] == "gemv_cache" && r["tuning"] == nil || r["speedup_vs_tuning"] != nil {
			t.Errorf("tuning %v, speedup_vs_tuning %v, want %s and none: %v", r["tuning"], r["speedup_vs_tuning"], tn, r)
		}
		if r["op"] == "gemv_cache_read" {
			// a plain read of the format's weights in the same calls: one token, no ratios but
			// the speed-up over bf16 (the most the format's kernels could show)
			if r["impl"] != "read" || r["n"].(float64) != 1 || r["roofline_pct"].(float64) <= 0 || r["speedup_vs_bf16"].(float64) <= 0 || reads[r["format"].(string)] {
				t.Errorf("bad read record %v", r)
			}
			for _, k := range []string{"vs_read_pct", "time_vs_n1", "speedup_vs_i2s", "gops"} {
				if _, ok := r[k]; ok {
					t.Errorf("read record with %s: %v", k, r)
				}
			}
			reads[r["format"].(string)] = true
			continue
		}
		if r["op"] != "gemv_cache" {
			t.Errorf("bad record %v", r)
		}
		if r["format"] == "i2s" && r["n"].(float64) == 1 {
			i2sGBps = r["gbps"].(float64)
		}
		if v, _ := r["vs_read_pct"].(float64); v <= 0 {
			t.Errorf("no share of the read of the same calls: %v", r)
		}
		// The roofline read around the trials (here the L3-resident buffer) and the best of the run.
		if rg, _ := r["roofline_gbps"].(float64); rg <= 0 || r["roofline_pct"].(float64) <= 0 {
			t.Errorf("no roofline read around the trials: %v", r)
		}
		if best, _ := r["best_roofline_pct"].(float64); best <= 0 {
			t.Errorf("no share of the best read rate: %v", r)
		}
		if rr, rounds := r["roofline_rounds"].(float64), r["rounds"].(float64); rr < 1 || rr > rounds {
			t.Errorf("roofline from %v of %v rounds: %v", rr, rounds, r)
		}
		// n = 2 against n = 1 of the same format, from the same rounds.
		if vs, _ := r["time_vs_n1"].(float64); (r["n"].(float64) == 2) != (vs > 0) {
			t.Errorf("time_vs_n1 %v on n = %v: %v", vs, r["n"], r)
		}
		if r["format"] == "bf16" && r["speedup_vs_bf16"].(float64) != 1 {
			t.Errorf("bf16 against itself: %v", r)
		}
		if r["format"] != "bf16" && r["speedup_vs_bf16"].(float64) <= 0 {
			t.Errorf("%v without a speed-up over bf16: %v", r["format"], r)
		}
		// tl2 against i2s at the same n, from the same rounds; no other record has it.
		if vs, _ := r["speedup_vs_i2s"].(float64); (r["format"] == "tl2") != (vs > 0) {
			t.Errorf("speedup_vs_i2s %v on %v: %v", vs, r["format"], r)
		}
		// i2s with two tokens on the kernels of the int8 peak loop's path is measured against
		// that peak too.
		wantPeak := r["format"] == "i2s" && r["n"].(float64) == 2 && peakPath != "" && strings.HasPrefix(r["impl"].(string), peakPath+"/")
		gops, hasGops := r["gops"].(float64)
		peak, _ := r["int8_peak_gops"].(float64)
		pct, _ := r["int8_peak_pct"].(float64)
		if !wantPeak {
			if hasGops || peak != 0 || pct != 0 {
				t.Errorf("int8 peak figures on a record not measured against the peak: %v", r)
			}
			continue
		}
		ops := 2 * r["m"].(float64) * r["k"].(float64) * r["n"].(float64) / r["ns_per_op"].(float64)
		if peak <= 0 || math.Abs(gops-ops) > 1e-9*ops || math.Abs(pct-100*gops/peak) > 1e-9*pct {
			t.Errorf("int8 peak figures: gops %v (2mkn/ns %v), peak %v, pct %v: %v", gops, ops, peak, pct, r)
		}
	}
	if len(reads) != 3 {
		t.Errorf("reads of %v, want i2s, tl2 and bf16", reads)
	}
	if tn, _ := kernels.CurrentTuning(); !tn.Adaptive() && rep["adaptive"] != nil {
		t.Errorf("adaptive %v under %s", rep["adaptive"], tn)
	}
	if b, err := os.ReadFile(plot); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Errorf("plot: %v", err)
	} else if n, bar := bytes.Count(b, []byte("<title>i2s 64x256 ")), fmt.Sprintf("<title>i2s 64x256 %.1f GB/s</title>", i2sGBps); n != 1 || !bytes.Contains(b, []byte(bar)) {
		t.Errorf("the plot has %d bars of i2s on 64x256, want 1: %s (the GEMV's, not the read's)", n, bar)
	}
	// written through a temporary file beside it, renamed over it: nothing else is left
	if ents, err := os.ReadDir(filepath.Dir(plot)); err != nil || len(ents) != 1 {
		t.Errorf("the plot's directory holds %v (%v), want r.svg alone", ents, err)
	}
	if st, err := os.Stat(plot); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("plot mode: %v %v", st, err)
	}
}

// TestBenchTunings: --tuning runs every GEMV under each tuning named (once each, in the
// order given), each record names its tuning and carries the first one's time over its
// own, the ratios between formats and token counts stay within a tuning, and the tuning
// the kernels run with afterwards is the one before.
func TestBenchTunings(t *testing.T) {
	if testing.Short() {
		t.Skip("measures bandwidth over 1 GiB")
	}
	before, _ := kernels.CurrentTuning()
	var out, stderr bytes.Buffer
	code := run([]string{"bench", "--json", "--cache", "--format", "i2s", "--shape", "64x256", "--threads", "1", "--n", "1,2", "--tuning", "zen4,default,zen4"}, &out, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if now, _ := kernels.CurrentTuning(); now != before {
		t.Errorf("the bench left the kernels on tuning %s, was %s", now, before)
	}
	var rep struct {
		Machine struct{ Tuning string }
		Results []benchRecord
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	if rep.Machine.Tuning != before.String() {
		t.Errorf("machine tuning %q, want %q", rep.Machine.Tuning, before)
	}
	seen := map[string]int{}
	for _, r := range rep.Results {
		key := fmt.Sprintf("%s n=%d %s", r.Format, r.N, r.Tuning)
		seen[key]++
		if r.Tuning == "zen4" && r.SpeedupVsTuning != 1 || r.Tuning == "default" && r.SpeedupVsTuning <= 0 {
			t.Errorf("%s: speedup_vs_tuning %v (the first tuning's time over its own)", key, r.SpeedupVsTuning)
		}
		if r.Format == "bf16" && r.SpeedupVsBF16 != 1 || r.N == 2 && r.TimeVsN1 <= 0 {
			t.Errorf("%s: ratios across tunings: vs bf16 %v, vs n1 %v", key, r.SpeedupVsBF16, r.TimeVsN1)
		}
	}
	if len(rep.Results) != 8 || len(seen) != 8 {
		t.Errorf("records %v, want i2s and bf16 at n = 1 and 2 under zen4 and default, once each", seen)
	}
	var table bytes.Buffer
	printTable(&table, benchReport{Results: rep.Results})
	if !strings.Contains(table.String(), "avx512vnni/i2s@default") && kernels.ISAAvailable(kernels.ISAAVX512) || !strings.Contains(table.String(), "vs tuning") {
		t.Errorf("the table does not name the tunings:\n%s", table.String())
	}
}

// TestBenchModelJSON runs --model on a tiny two-layer model and checks the JSON records.
func TestBenchModelJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("measures bandwidth over 1 GiB")
	}
	benchModels["tiny"] = benchModel{Name: "tiny", Layers: 4, Mats: []benchMat{{"q", 64, 96, 1}, {"up", 96, 64, 2}}}
	defer delete(benchModels, "tiny")
	var out, stderr bytes.Buffer
	if code := run([]string{"bench", "--json", "--quick", "--model", "tiny", "--format", "bf16,i2s,int2", "--n", "1,3"}, &out, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var rep struct {
		Machine map[string]any `json:"machine"`
		Results []map[string]any
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(rep.Results) != 6 {
		t.Fatalf("%d records, want 6 (three formats, n = 1 and 3): %s", len(rep.Results), out.String())
	}
	for i, r := range rep.Results { // by format, then n, each n with the same prefill figure
		if n, want := r["n"].(float64), float64(1+2*(i%2)); n != want || i%2 == 1 && r["prefill_tok_s"] != rep.Results[i-1]["prefill_tok_s"] {
			t.Fatalf("record %d: n %v, want %v; prefill_tok_s %v (n = 1: %v)", i, n, want, r["prefill_tok_s"], rep.Results[i-i%2]["prefill_tok_s"])
		}
	}
	for _, r := range rep.Results {
		for _, k := range []string{"op", "model", "format", "threads", "decode_tok_s", "prefill_tok_s", "speedup_vs_bf16", "huge_page_pct"} {
			if _, ok := r[k]; !ok {
				t.Fatalf("record lacks %q: %v", k, r)
			}
		}
		if h := r["huge_page_pct"].(float64); h != -1 && (h < 0 || h > 100) {
			t.Fatalf("huge_page_pct %v: want -1 (unknown) or a share in [0, 100]", h)
		}
		if r["op"] != "model" || r["model"] != "tiny" || r["decode_tok_s"].(float64) <= 0 || r["prefill_tok_s"].(float64) <= 0 || r["speedup_vs_bf16"].(float64) <= 0 {
			t.Fatalf("bad record %v", r)
		}
		// The tiny model's weights stay in the L3: a rate, but no share of the DRAM roofline.
		if gb := r["weight_bytes"].(float64) * r["decode_tok_s"].(float64) / r["n"].(float64) / 1e9; math.Abs(r["decode_gbps"].(float64)-gb) > 1e-9*gb || r["decode_roofline_pct"].(float64) != 0 {
			t.Fatalf("decode_gbps %v (want %v), decode_roofline_pct %v (want 0): %v", r["decode_gbps"], gb, r["decode_roofline_pct"], r)
		}
	}
	// A model of more than twice the L3 is compared with reads of the DRAM buffer.
	layers := 2*max(kbench.L3Bytes, kbench.L3ReadBytes)/(8<<20) + 2 // 8 MiB of i2s a layer
	benchModels["big"] = benchModel{Name: "big", Layers: layers, Mats: []benchMat{{"w", 8192, 4096, 1}}}
	defer delete(benchModels, "big")
	out.Reset()
	threads := []string{"1"} // and at two threads, how they shared the cores (compute_scale)
	if runtime.NumCPU() >= 2 {
		threads = append(threads, "2")
	}
	if code := run([]string{"bench", "--json", "--quick", "--model", "big", "--format", "i2s", "--threads", strings.Join(threads, ",")}, &out, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	rep.Results = nil
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || len(rep.Results) != len(threads) {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, r := range rep.Results {
		if r["decode_roofline_pct"].(float64) <= 0 {
			t.Fatalf("%d layers of 8192x4096 i2s: no share of the roofline: %v", layers, r)
		}
		// (0 also at two threads when another process took a CPU beside every pass)
		if scale, _ := r["compute_scale"].(float64); r["threads"].(float64) == 1 && scale != 0 || scale < 0 || scale > 3 {
			t.Errorf("compute_scale %v at %v threads", scale, r["threads"])
		}
	}
	// The progress lines compare with bf16 where the run measured it, and only there (no
	// "x0.00 vs bf16").
	for _, c := range []struct {
		formats string
		vs      bool
	}{{"bf16,i2s", true}, {"i2s", false}} {
		stderr.Reset()
		if code := run([]string{"bench", "--quick", "--model", "tiny", "--format", c.formats}, &bytes.Buffer{}, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		var line string
		for _, l := range strings.Split(stderr.String(), "\n") {
			if strings.HasPrefix(l, "model tiny i2s") {
				line = l
			}
		}
		if got := strings.Contains(line, "vs bf16"); line == "" || got != c.vs {
			t.Fatalf("--format %s: the i2s progress line compares with bf16: %v, want %v\n%s", c.formats, got, c.vs, stderr.String())
		}
	}
	var stderr2 bytes.Buffer
	if code := run([]string{"bench", "--model", "gpt5"}, &bytes.Buffer{}, &stderr2); code != 2 || !strings.Contains(stderr2.String(), "known models: ") || !strings.Contains(stderr2.String(), "bitnet-2b, bitnet-2b-merged") {
		t.Fatalf("unknown model: exit %d, %q", code, stderr2.String())
	}
}

// TestBenchModelsMerged: bitnet-2b-merged is bitnet-2b with q, k and v, and gate and up,
// stacked as vLLM's merged layers hold them: the same layers and weights, fewer matrices.
func TestBenchModelsMerged(t *testing.T) {
	un, mg := benchModels["bitnet-2b"], benchModels["bitnet-2b-merged"]
	mat := func(m benchModel, name string) benchMat {
		for _, b := range m.Mats {
			if b.Name == name {
				return b
			}
		}
		t.Fatalf("%s has no %s", m.Name, name)
		return benchMat{}
	}
	stack := func(names ...string) benchMat {
		var s benchMat
		for _, n := range names {
			b := mat(un, n)
			if s.In != 0 && b.In != s.In || b.Count != 1 {
				t.Fatalf("%s: %+v does not stack", n, b)
			}
			s.Out, s.In, s.Count = s.Out+b.Out, b.In, 1
		}
		return s
	}
	for name, want := range map[string]benchMat{
		"qkv_proj":     stack("q_proj", "k_proj", "v_proj"),
		"o_proj":       stack("o_proj"),
		"gate_up_proj": stack("gate_proj", "up_proj"),
		"down_proj":    stack("down_proj"),
	} {
		want.Name = name
		if got := mat(mg, name); got != want {
			t.Errorf("%s: %+v, want %+v", name, got, want)
		}
	}
	params := func(m benchModel) (n int) {
		for _, b := range m.Mats {
			n += m.Layers * b.Count * b.Out * b.In
		}
		return n
	}
	if len(mg.Mats) != 4 || mg.Layers != un.Layers || params(mg) != params(un) {
		t.Errorf("bitnet-2b-merged: %d matrices, %d layers, %d weights; want 4, %d, %d", len(mg.Mats), mg.Layers, params(mg), un.Layers, params(un))
	}
	// Llama 3 8B's config: hidden 4096, 32 query and 8 KV heads of 128, FFN 14336, 32 layers.
	const hidden, kv, ffn = 4096, 8 * 128, 14336
	want := []benchMat{{"qkv_proj", hidden + 2*kv, hidden, 1}, {"o_proj", hidden, hidden, 1}, {"gate_up_proj", 2 * ffn, hidden, 1}, {"down_proj", hidden, ffn, 1}}
	if l := benchModels["llama3-8b-merged"]; l.Layers != 32 || !slices.Equal(l.Mats, want) {
		t.Errorf("llama3-8b-merged: %d layers, %+v; want 32, %+v", l.Layers, l.Mats, want)
	}
}

// TestBenchModelFits: a format whose weights would not fit in memory is refused before
// any layer is registered when --format asks for it, and left out (the rest measured) when it
// is one of the defaults.
func TestBenchModelFits(t *testing.T) {
	if testing.Short() {
		t.Skip("measures bandwidth over 1 GiB")
	}
	benchModels["fat"] = benchModel{Name: "fat", Layers: 1, Mats: []benchMat{{"w", 4096, 8192, 1}}} // bf16 64 MiB, i2s 8
	defer delete(benchModels, "fat")
	defer func(f func() (int, bool)) { memAvailable = f }(memAvailable)
	memAvailable = func() (int, bool) { return 64 << 20, true }
	var out, stderr bytes.Buffer
	want := "bench: --model fat --format bf16: bf16 weights of fat take 0.1 GiB, more than 3/4 of the 0.1 GiB available (MemAvailable)"
	if code := run([]string{"bench", "--model", "fat", "--format", "i2s,bf16"}, &out, &stderr); code != 1 || !strings.Contains(stderr.String(), want) || strings.Contains(stderr.String(), "model fat i2s") {
		t.Fatalf("exit %d, want 1 with %q before any layer is measured:\n%s", code, want, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"bench", "--json", "--model", "fat"}, &out, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var rep struct{ Results []modelRecord }
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(rep.Results) != 2 || rep.Results[0].Format != "i2s" || rep.Results[1].Format != "tl2" || rep.Results[0].SpeedupVsBF16 != 0 {
		t.Fatalf("default formats with bf16 too large: %+v", rep.Results)
	}
	memAvailable = func() (int, bool) { return 1 << 20, true }
	stderr.Reset()
	if code := run([]string{"bench", "--model", "fat"}, &out, &stderr); code != 1 || !strings.Contains(stderr.String(), "bench: --model fat: no format's weights fit in memory") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}

// TestBenchTinyShape: a shape whose blob is a few bytes is measured in a bounded rotation
// (it once took millions of matrices and minutes before the first call), and its records
// and the table say that it was partly cache-resident. It also runs --rounds 3: its records
// say 3 rounds.
func TestBenchTinyShape(t *testing.T) {
	if testing.Short() {
		t.Skip("measures bandwidth over 1 GiB")
	}
	var out, stderr bytes.Buffer
	if code := run([]string{"bench", "--json", "--format", "tl2", "--shape", "3x3", "--threads", "1", "--n", "1", "--rounds", "3"}, &out, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var rep benchReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	if len(rep.Results) != 2 {
		t.Fatalf("%d records, want bf16 and tl2: %+v", len(rep.Results), rep.Results)
	}
	for _, r := range rep.Results {
		ly, err := kernels.NewLayout(quantcfg.Format(r.Format), 3, 3)
		if err != nil {
			t.Fatal(err)
		}
		if !r.PartlyCached || r.WorkingSetBytes != kbench.MaxSetLayers*ly.Bytes() || !(r.NsPerOp > 0) {
			t.Errorf("%s 3x3: partly_cached %v, working set %d (want %d), %.0f ns", r.Format, r.PartlyCached, r.WorkingSetBytes, kbench.MaxSetLayers*ly.Bytes(), r.NsPerOp)
		}
		if r.Rounds != 3 { // (--rounds)
			t.Errorf("%s 3x3: %d rounds, want 3", r.Format, r.Rounds)
		}
	}
	var table bytes.Buffer
	printTable(&table, rep)
	if !strings.Contains(table.String(), "3x3*") || !strings.Contains(table.String(), "* the shape's blob is too small") {
		t.Errorf("the table does not mark the partly cached shape:\n%s", table.String())
	}
}

// TestBenchBeyondL3: a cache variant's record of a matrix larger than the L3 says that it
// read DRAM, in the JSON and in the table; one that fits, and DRAM records, do not.
func TestBenchBeyondL3(t *testing.T) {
	big, err := kbench.NewSet(quantcfg.BF16, kbench.Shape{M: 4096, K: 14336}, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Free()
	if kbench.FitsL3(big.WorkingSet()) {
		t.Skipf("the L3 (%d bytes) holds a %d-byte matrix", kbench.L3Bytes, big.WorkingSet())
	}
	small, err := kbench.NewSet(quantcfg.I2S, kbench.Shape{M: 64, K: 256}, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer small.Free()
	tm := kbench.Timing{Impl: "test", NsPerOp: 1}
	if r := timedRecord("gemv_cache", small, 1, 1, tm); r.BeyondL3 {
		t.Error("a 64x256 i2s matrix is marked beyond the L3")
	}
	if r := timedRecord("gemv", big, 1, 1, tm); r.BeyondL3 {
		t.Error("a DRAM record is marked beyond the L3")
	}
	rec := timedRecord("gemv_cache", big, 1, 1, tm)
	if !rec.BeyondL3 {
		t.Fatalf("a %d-byte matrix's cache variant is not marked beyond the L3 (%d bytes)", big.WorkingSet(), kbench.L3Bytes)
	}
	b, err := json.Marshal(rec)
	if err != nil || !strings.Contains(string(b), `"beyond_l3":true`) {
		t.Errorf("JSON %s (%v) lacks beyond_l3", b, err)
	}
	var table bytes.Buffer
	printTable(&table, benchReport{Machine: benchMachine{L3Bytes: kbench.L3Bytes}, Results: []benchRecord{rec}})
	if !strings.Contains(table.String(), "4096x14336+") || !strings.Contains(table.String(), "+ the matrix is larger than the L3") {
		t.Errorf("the table does not mark the matrix beyond the L3:\n%s", table.String())
	}
}

// TestBenchComputeScale: a GEMV measured on two threads carries how they shared the cores
// around its trials (compute_scale, from kbench.CoreProbe), one on one thread does not; the
// table shows it in the cores column and marks a record whose threads shared cores.
func TestBenchComputeScale(t *testing.T) {
	if testing.Short() {
		t.Skip("measures bandwidth over 1 GiB")
	}
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU")
	}
	var out, stderr bytes.Buffer
	args := []string{"bench", "--cache", "--format", "i2s", "--shape", "256x2048", "--threads", "1,2", "--n", "1", "--rounds", "3", "--json"}
	if code := run(args, &out, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var rep benchReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	if len(rep.Results) != 4 {
		t.Fatalf("%d results, want i2s and bf16 at one and two threads: %s", len(rep.Results), out.String())
	}
	scaled := 0
	for _, r := range rep.Results {
		// Two threads run a compute-bound GEMV at most about twice one's rate.
		if r.Threads == 1 && r.ComputeScale != 0 || r.ComputeScale < 0 || r.ComputeScale > 3 {
			t.Errorf("%s at %d threads: compute_scale %g", r.Format, r.Threads, r.ComputeScale)
		}
		if r.ComputeScale > 0 {
			scaled++
		}
	}
	if scaled == 0 {
		// A probe that loses a CPU to another process gives nothing, and go test runs
		// packages side by side (kbench's TestInterleavedProbe covers the pairing).
		t.Log("no two-thread record has a compute_scale: every probe lost a CPU")
	}

	recs := []benchRecord{
		{Op: "gemv", Format: "i2s", M: 64, K: 64, N: 1, Threads: 2, Impl: "x", NsPerOp: 1, ComputeScale: 1.7},
		{Op: "gemv", Format: "tl2", M: 64, K: 64, N: 1, Threads: 2, Impl: "x", NsPerOp: 1, ComputeScale: 1.2},
		{Op: "gemv", Format: "int1", M: 64, K: 64, N: 1, Threads: 1, Impl: "x", NsPerOp: 1},
	}
	var table bytes.Buffer
	printTable(&table, benchReport{Results: recs[:1]})
	if !regexp.MustCompile(`(?m)^gemv +i2s .* 1\.70$`).MatchString(table.String()) || strings.Contains(table.String(), "!") {
		t.Errorf("threads on cores of their own:\n%s", table.String())
	}
	table.Reset()
	printTable(&table, benchReport{Results: recs})
	if !regexp.MustCompile(`(?m)^gemv +tl2 .* 1\.20!$`).MatchString(table.String()) || !strings.Contains(table.String(), "! cores: the threads shared cores") ||
		!regexp.MustCompile(`(?m)^gemv +int1 .*[0-9] *$`).MatchString(table.String()) {
		t.Errorf("threads that shared cores:\n%s", table.String())
	}
	for _, c := range []struct {
		rec  benchRecord
		want string
	}{
		{recs[0], "compute x1.70 of one thread"},
		{recs[1], "compute x1.20 of one thread: the threads shared cores"},
		{recs[2], ""},
	} {
		if got := coresNote(c.rec.ComputeScale, c.rec.Threads); got != c.want {
			t.Errorf("%s: note %q, want %q", c.rec.Format, got, c.want)
		}
	}
}
