package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"bitgo/quantcfg"
	"bitgo/xe2"
)

// xe2Flags are the flags every xe2 subcommand shares (tune, bench --device xe2:N).
type xe2Flags struct {
	device   string
	allowAny bool
	cache    string
	tune     string
}

func (f *xe2Flags) register(fs *flag.FlagSet, tunePathDefault string) {
	fs.StringVar(&f.device, "device", "", "GPU to use: xe2:N (see bitd info)")
	fs.BoolVar(&f.allowAny, "allow-any-device", false, "also accept OpenCL devices that are not Intel Xe2 GPUs (e.g. PoCL in CI); env BITD_XE2_ALLOW_ANY_DEVICE")
	fs.StringVar(&f.cache, "cache", "", "kernel binary cache directory (default $XDG_CACHE_HOME/bitgo/xe2; env BITD_XE2_CACHE)")
	fs.StringVar(&f.tune, "tune", tunePathDefault, "tune table (bitd tune's output)")
}

// options builds xe2.Options: environment first, then flags.
func (f *xe2Flags) options(stderr io.Writer) xe2.Options {
	o, warns := xe2.DefaultOptions()
	for _, w := range warns {
		fmt.Fprintln(stderr, "bitd: warning:", w)
	}
	if f.allowAny {
		o.AllowAnyDevice = true
	}
	if f.cache != "" {
		o.CacheDir = f.cache
	}
	if f.tune != "" {
		o.TunePath = f.tune
	}
	return o
}

// parseXe2Device reads "xe2:N".
func parseXe2Device(s string) (int, error) {
	v, ok := strings.CutPrefix(s, "xe2:")
	n, err := strconv.Atoi(v)
	if !ok || err != nil || n < 0 {
		return 0, fmt.Errorf("--device %q: want xe2:N with N >= 0 (bitd info lists the devices)", s)
	}
	return n, nil
}

// parseShapes reads "MxK,MxK".
func parseShapes(s string) ([][2]int, error) {
	var out [][2]int
	for _, f := range strings.Split(s, ",") {
		m, k, ok := strings.Cut(strings.TrimSpace(f), "x")
		mi, err1 := strconv.Atoi(m)
		ki, err2 := strconv.Atoi(k)
		if !ok || err1 != nil || err2 != nil || mi < 1 || ki < 1 {
			return nil, fmt.Errorf("--shapes: %q is not MxK (for example 4096x4096)", f)
		}
		out = append(out, [2]int{mi, ki})
	}
	return out, nil
}

// parseInts reads "1,2,8".
func parseInts(name, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--%s: %q is not a positive integer", name, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// modelShapes are the decode shapes of BitNet b1.58 2B4T and Llama-3-8B's linear layers.
const modelShapes = "2560x2560,640x2560,6912x2560,2560x6912,4096x4096,1024x4096,14336x4096,4096x14336"

// xe2RunFlags are the workload flags tune and bench --device xe2:N share: the shapes, the
// token counts, the activation and scale modes and the timed calls.
type xe2RunFlags struct {
	shapes, tokens, act, scale *string
	iters                      *int
}

func (r *xe2RunFlags) register(fs *flag.FlagSet, tokens, tokensHelp, itersHelp string) {
	r.shapes = fs.String("shapes", modelShapes, "layer shapes MxK (out x in features), comma-separated")
	r.tokens = fs.String("tokens", tokens, tokensHelp)
	r.act = fs.String("act", "per-token", "activation quantization: per-token, per-tensor, per-group:G")
	r.scale = fs.String("scale", "row", "weight scales: row, tensor, group:G")
	r.iters = fs.Int("iters", 20, itersHelp)
}

// xe2Run is the parsed workload.
type xe2Run struct {
	shapes [][2]int
	tokens []int
	act    quantcfg.ActMode
	scale  quantcfg.ScaleGran
	iters  int
}

func (r *xe2RunFlags) parse() (xe2Run, error) {
	var w xe2Run
	var err error
	if w.shapes, err = parseShapes(*r.shapes); err != nil {
		return w, err
	}
	if w.tokens, err = parseInts("tokens", *r.tokens); err != nil {
		return w, err
	}
	if w.act, err = quantcfg.ParseActMode(*r.act); err != nil {
		return w, fmt.Errorf("--act: %w", err)
	}
	if w.scale, err = quantcfg.ParseScaleGran(*r.scale); err != nil {
		return w, fmt.Errorf("--scale: %w", err)
	}
	if w.iters = *r.iters; w.iters < 1 {
		return w, fmt.Errorf("--iters %d: must be >= 1", w.iters)
	}
	return w, nil
}
