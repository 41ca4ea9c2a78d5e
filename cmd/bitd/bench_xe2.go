package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"bitgo/xe2"
)

// benchBackends maps a --device prefix to its benchmark; `bitd bench --device xe2:N`
// dispatches here (runBench).
var benchBackends = map[string]func(args []string, stdout, stderr io.Writer) int{"xe2": runBenchXe2}

func runBenchXe2(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var xf xe2Flags
	xf.register(fs, "")
	var rf xe2RunFlags
	rf.register(fs, "1,8,64,512", "token counts", "timed calls per shape (median reported)")
	asJSON := fs.Bool("json", false, "print JSON")
	if !parseFlags(fs, args, stderr) {
		return 2
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "bitd bench: "+format+"\n", a...)
		return code
	}
	idx, err := parseXe2Device(xf.device)
	if err != nil {
		return fail(2, "%v", err)
	}
	w, err := rf.parse()
	if err != nil {
		return fail(2, "%v", err)
	}
	bo := xe2.BenchOptions{Iters: w.iters, Shapes: w.shapes, Tokens: w.tokens, Act: w.act, Scale: w.scale}
	dev, err := xe2.Open(idx, xf.options(stderr))
	if err != nil {
		return fail(1, "%v", err)
	}
	defer dev.Close()
	bwSize := int(min(uint64(512<<20), max(uint64(64<<20), 8*dev.Info.CacheBytes), dev.Info.MaxAlloc/2))
	bw, err := dev.ReadBandwidth(bwSize, w.iters)
	if err != nil {
		return fail(1, "read bandwidth: %v", err)
	}
	res, err := xe2.Bench(dev, bo, bw)
	if err != nil {
		return fail(1, "%v", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"device": dev.Info, "read_gbps": bw, "peak_int8_tops": dev.Info.PeakInt8TOPS(), "results": res}); err != nil {
			return fail(1, "%v", err)
		}
		return 0
	}
	fmt.Fprintf(stdout, "device   %s (%s, path %s, driver %s)\n", dev.Info.Name, dev.Info.Type, dev.Info.Path, dev.Info.Driver)
	fmt.Fprintf(stdout, "roofline read %.1f GB/s (measured), int8 peak %.0f TOPS (estimated; 0 = unknown)\n\n", bw, dev.Info.PeakInt8TOPS())
	fmt.Fprintf(stdout, "%-12s %5s %10s %9s %8s %8s  %s\n", "shape", "n", "us", "GB/s", "TOPS", "%roof", "tile")
	for _, r := range res {
		fmt.Fprintf(stdout, "%-12s %5d %10.1f %9.2f %8.3f %7.1f%%  %s\n", fmt.Sprintf("%dx%d", r.M, r.K), r.N, r.Micros, r.GBps, r.TOPS, r.Pct, r.Tile)
	}
	return 0
}
