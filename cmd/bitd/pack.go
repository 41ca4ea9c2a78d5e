package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"bitgo/quantcfg"
)

func init() {
	register(command{name: "pack", summary: "convert a checkpoint (safetensors + config.json) to a .bitgo pack file", run: runPack})
}

const packUsage = `usage: bitd pack MODEL_DIR -o OUT.bitgo [flags]

Converts a Hugging Face checkpoint directory (config.json and model.safetensors, or shards
listed by model.safetensors.index.json) into a .bitgo pack file that bitd maps read-only.

  transformers BitNet checkpoints (quant_method "bitnet"): the uint8-packed ternary weights
    are repacked without going through floats (default format i2s, lossless); the scale is
    1/weight_scale for linear_class bitlinear and weight_scale for autobitlinear.
  float checkpoints (F32, F16, BF16; no quantization_config, or quant_method "bitgo"):
    linear weights are ternarized by absmean (--format i2s|tl1|tl2, BitNet b1.58's
    recipe) or quantized to int2/int1/int8 (round to nearest, --scale row|tensor|group:G),
    or kept as bf16/f32.

Embeddings, lm_head, norms and every other tensor stay unquantized: by default they are
left to the host framework (listed in the pack as external, not stored); with
--keep-unquantized they are stored, floats as BF16.

flags:
`

// packOptions are the flags of `bitd pack`.
type packOptions struct {
	Dir, Out        string
	Format          string // "" = from config.json (or i2s for BitNet)
	Act, Scale      string // "" = from config.json or the format's default
	Codebook        string // "a,b,c,d" for int2
	Skip            []string
	KeepUnquantized bool
	Model           string
	Align           int64
	Threads         int
	Verify          bool
	Progress        string // auto, bar, log, off
	NoSync          bool
}

func runPack(args []string, stdout, stderr io.Writer) int {
	fs := usageFlagSet("pack", packUsage, stderr)
	var o packOptions
	var skip string
	fs.StringVar(&o.Out, "o", "", "output pack file (required)")
	fs.StringVar(&o.Format, "format", "", "target format: i2s, tl1, tl2, int2, int1, int8, bf16, f32 (default: config.json's, i2s for BitNet; required for float checkpoints)")
	fs.StringVar(&o.Act, "act", "", "activation quantization: per-token, per-tensor, per-group:G (default: the format's)")
	fs.StringVar(&o.Scale, "scale", "", "weight scale granularity: tensor, row, group:G (default: the format's)")
	fs.StringVar(&o.Codebook, "codebook", "", "int2 code book, four int8 levels, e.g. -2,-1,0,1")
	fs.StringVar(&skip, "skip", "", "comma-separated module-name fragments to keep unquantized, in addition to lm_head and config.json's modules_to_not_convert")
	fs.BoolVar(&o.KeepUnquantized, "keep-unquantized", false, "store embeddings, lm_head, norms... in the pack (floats as BF16) instead of leaving them to the host framework")
	fs.StringVar(&o.Model, "model", "", "model name recorded in the pack (default: the directory name)")
	fs.Int64Var(&o.Align, "align", 0, "blob alignment in bytes, a power of two >= 4096 (default 2 MiB, the huge-page size)")
	fs.IntVar(&o.Threads, "threads", runtime.GOMAXPROCS(0), "conversion threads")
	fs.BoolVar(&o.Verify, "verify", false, "re-read the written file and check every layer against a fresh conversion")
	fs.StringVar(&o.Progress, "progress", "auto", "progress display: auto (a bar on a terminal, log lines otherwise), bar, log, off")
	// Flags may come before or after MODEL_DIR.
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return exitForParse(err)
	}
	if len(pos) != 1 || o.Out == "" {
		fmt.Fprintln(stderr, "bitd pack: want exactly one MODEL_DIR and -o OUT.bitgo")
		fs.Usage()
		return 2
	}
	o.Dir = pos[0]
	if skip != "" {
		for _, s := range strings.Split(skip, ",") {
			if s = strings.TrimSpace(s); s != "" {
				o.Skip = append(o.Skip, s)
			}
		}
	}
	switch o.Progress {
	case "auto", "bar", "log", "off":
	default:
		fmt.Fprintf(stderr, "bitd pack: --progress %q: allowed: auto, bar, log, off\n", o.Progress)
		return 2
	}
	if o.Threads < 1 {
		fmt.Fprintf(stderr, "bitd pack: --threads %d: must be at least 1\n", o.Threads)
		return 2
	}
	// The conversion produces tens of MB of short-lived garbage per layer (inside
	// kernels' packers) over a small live heap: collect less often.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	rep, err := packModel(o, newProgress(o.Progress, stderr))
	if err != nil {
		fmt.Fprintf(stderr, "bitd pack: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, rep)
	return 0
}

// packReport summarizes a conversion.
type packReport struct {
	Out                     string
	Layers, Stored, Extern  int
	InBytes, OutBytes, Disk int64
	Took, VerifyTook        time.Duration
	Verified                bool
}

func (r *packReport) String() string {
	s := fmt.Sprintf("wrote %s: %d layers (%s of packed weights), %d unquantized tensors stored, %d left to the host framework; read %s in %.2f s (%s/s)",
		r.Out, r.Layers, humanBytes(r.OutBytes), r.Stored, r.Extern, humanBytes(r.InBytes), r.Took.Seconds(), humanBytes(int64(float64(r.InBytes)/max(r.Took.Seconds(), 1e-9))))
	if r.Verified {
		s += fmt.Sprintf("\nverified: every layer and stored tensor matches a fresh conversion (%.2f s)", r.VerifyTook.Seconds())
	}
	return s
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return strconv.FormatFloat(float64(n)/(1<<30), 'f', 2, 64) + " GiB"
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}

// packModel runs the conversion: plan (read config.json and the tensor index, decide
// every tensor's fate, validate every layer before any work), convert in parallel and
// write in order, then optionally verify.
func packModel(o packOptions, prog progress) (*packReport, error) {
	start := time.Now()
	pl, err := planPack(o)
	if err != nil {
		return nil, err
	}
	defer pl.ckpt.Close()
	rep := &packReport{Out: o.Out, Layers: len(pl.layers), InBytes: pl.inBytes}
	for _, t := range pl.tensors {
		if t.store {
			rep.Stored++
		} else {
			rep.Extern++
		}
	}
	if err := writePack(pl, o, prog); err != nil {
		return nil, err
	}
	rep.Took = time.Since(start)
	for _, l := range pl.layers {
		rep.OutBytes += int64(l.outBytes)
	}
	if st, err := os.Stat(o.Out); err == nil {
		rep.Disk = st.Size()
	}
	if o.Verify {
		vstart := time.Now()
		if err := verifyPack(pl, o); err != nil {
			return nil, err
		}
		rep.Verified, rep.VerifyTook = true, time.Since(vstart)
	}
	return rep, nil
}

// defaultModelName is the directory's base name.
func defaultModelName(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return dir
	}
	return filepath.Base(abs)
}

// parseCodebook reads "a,b,c,d".
func parseCodebook(s string) (*quantcfg.Codebook, error) {
	parts := strings.Split(s, ",")
	if len(parts) != 4 {
		return nil, fmt.Errorf("--codebook %q: want four comma-separated int8 levels, e.g. -2,-1,0,1", s)
	}
	var cb quantcfg.Codebook
	for i, p := range parts {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || v < -128 || v > 127 {
			return nil, fmt.Errorf("--codebook %q: level %d (%q) is not an integer in [-128, 127]", s, i, p)
		}
		cb[i] = int8(v)
	}
	return &cb, cb.Validate()
}
