package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

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
