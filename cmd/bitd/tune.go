package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"bitgo/xe2"
)

func init() {
	register(command{name: "tune", summary: "autotune the Xe2 GPU kernels for a device (--device xe2:N)", run: runTune})
}

func runTune(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tune", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var xf xe2Flags
	xf.register(fs, "")
	var rf xe2RunFlags
	rf.register(fs, "1,2,4,8,64,512", "token counts; each selects a bucket (1, 2, 4, 8, then <=32, <=128, ...)", "timed calls per candidate (median kept)")
	codebook := fs.String("codebook", "-2,-1,0,1", "int2 code book (its affinity decides DPAS or conversion)")
	quick := fs.Bool("quick", false, "search a small candidate set (smoke runs)")
	out := fs.String("out", xe2.DefaultTunePath(), "table to write (merged with its current content)")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	if !parseFlags(fs, args, stderr) {
		return 2
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "bitd tune: "+format+"\n", a...)
		return code
	}
	if xf.device == "" {
		return fail(2, "--device xe2:N is required (bitd info lists the devices)")
	}
	idx, err := parseXe2Device(xf.device)
	if err != nil {
		return fail(2, "%v", err)
	}
	w, err := rf.parse()
	if err != nil {
		return fail(2, "%v", err)
	}
	to := xe2.TuneOptions{Quick: *quick, Iters: w.iters, Shapes: w.shapes, Tokens: w.tokens, Act: w.act, Scale: w.scale}
	cb, err := parseCodebook(*codebook)
	if err != nil {
		return fail(2, "%v", err)
	}
	to.Codebook = *cb
	opts := xf.options(stderr)
	opts.TunePath = "" // tune from the heuristic's state, never from an older table
	dev, err := xe2.Open(idx, opts)
	if err != nil {
		return fail(1, "%v", err)
	}
	defer dev.Close()
	fmt.Fprintf(stderr, "bitd tune: %s (%s, driver %s, path %s)\n", dev.Info.Name, dev.Info.Type, dev.Info.Driver, dev.Info.Path)
	if !*asJSON {
		to.Progress = func(s string) { fmt.Fprintln(stdout, s) }
	}
	td, results, err := xe2.Tune(dev, to)
	if err != nil {
		return fail(1, "%v", err)
	}
	table := &xe2.TuneTable{}
	if old, err := xe2.LoadTuneTable(*out); err == nil {
		table = old
	} else if _, statErr := os.Stat(*out); !errors.Is(statErr, os.ErrNotExist) {
		fmt.Fprintf(stderr, "bitd tune: replacing unreadable table: %v\n", err)
	}
	table.Merge(td)
	if err := table.Save(*out); err != nil {
		return fail(1, "writing %s: %v", *out, err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"device": td, "results": results, "table": *out}); err != nil {
			return fail(1, "%v", err)
		}
	} else {
		fmt.Fprintf(stdout, "wrote %d bucket(s) to %s\n", len(results), *out)
	}
	return 0
}
