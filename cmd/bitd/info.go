package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"

	"github.com/klauspost/cpuid/v2"

	"bitgo/quantcfg"
)

func init() {
	register(command{name: "info", summary: "CPU features, core types, formats, kernels and GPU devices", run: runInfo})
}

// infoSection is one part of `bitd info`, contributed by a package's file in cmd/bitd
// through registerInfo: Value goes into the JSON under Name, Text lines are printed.
type infoSection struct {
	Name  string
	Value any
	Text  []string
}

// infoSections are extra sections (kernels, cores, OpenCL devices), in registration order
// sorted by priority.
var infoSections []struct {
	prio int
	fn   func() infoSection
}

func registerInfo(prio int, fn func() infoSection) {
	infoSections = append(infoSections, struct {
		prio int
		fn   func() infoSection
	}{prio, fn})
	sort.SliceStable(infoSections, func(i, j int) bool { return infoSections[i].prio < infoSections[j].prio })
}

// cpuFeatures lists the features bitgo's kernels care about, in display order.
var cpuFeatures = []struct {
	name string
	id   cpuid.FeatureID
}{
	{"AVX2", cpuid.AVX2}, {"FMA3", cpuid.FMA3},
	{"AVX512F", cpuid.AVX512F}, {"AVX512BW", cpuid.AVX512BW}, {"AVX512VL", cpuid.AVX512VL},
	{"AVX512VNNI", cpuid.AVX512VNNI}, {"AVX512BF16", cpuid.AVX512BF16}, {"AVX512VBMI", cpuid.AVX512VBMI},
	{"AVX512VBMI2", cpuid.AVX512VBMI2}, {"GFNI", cpuid.GFNI},
	{"AVXVNNI", cpuid.AVXVNNI}, {"AVXVNNIINT8", cpuid.AVXVNNIINT8},
	{"ASIMD", cpuid.ASIMD}, {"ASIMDDP", cpuid.ASIMDDP},
}

type cpuInfo struct {
	Model          string   `json:"model"`
	Arch           string   `json:"arch"`
	Features       []string `json:"features"`
	Missing        []string `json:"missing"`
	LogicalCores   int      `json:"logical_cores"`
	PhysicalCores  int      `json:"physical_cores"`
	ThreadsPerCore int      `json:"threads_per_core"`
	L1DBytes       int      `json:"l1d_bytes"`
	L2Bytes        int      `json:"l2_bytes"`
	L3Bytes        int      `json:"l3_bytes"`
}

type formatInfo struct {
	Name    string   `json:"name"`
	Bits    float64  `json:"bits_per_weight"`
	Scales  []string `json:"scales"`
	Acts    []string `json:"acts"`
	MaxK    int      `json:"max_k"`
	Summary string   `json:"summary"`
}

func gatherCPU() cpuInfo {
	c := cpuid.CPU
	ci := cpuInfo{Model: strings.TrimSpace(c.BrandName), Arch: runtime.GOARCH, LogicalCores: c.LogicalCores,
		PhysicalCores: c.PhysicalCores, ThreadsPerCore: c.ThreadsPerCore,
		L1DBytes: c.Cache.L1D, L2Bytes: c.Cache.L2, L3Bytes: c.Cache.L3, Features: []string{}, Missing: []string{}}
	for _, f := range cpuFeatures {
		if c.Supports(f.id) {
			ci.Features = append(ci.Features, f.name)
		} else {
			ci.Missing = append(ci.Missing, f.name)
		}
	}
	return ci
}

func gatherFormats() []formatInfo {
	var out []formatInfo
	for _, fi := range quantcfg.Formats() {
		f := formatInfo{Name: string(fi.Format), Bits: fi.Bits(), MaxK: fi.MaxK, Summary: fi.Summary}
		for _, s := range fi.Scales {
			f.Scales = append(f.Scales, string(s))
		}
		for _, a := range fi.Acts {
			f.Acts = append(f.Acts, string(a))
		}
		out = append(out, f)
	}
	return out
}

func runInfo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("info", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print one JSON object")
	if !parseFlags(fs, args, stderr) {
		return 2
	}
	ci := gatherCPU()
	formats := gatherFormats()
	var sections []infoSection
	for _, s := range infoSections {
		sections = append(sections, s.fn())
	}
	if *asJSON {
		obj := map[string]any{"cpu": ci, "formats": formats}
		for _, s := range sections {
			obj[s.Name] = s.Value
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(obj); err != nil {
			fmt.Fprintln(stderr, "bitd info:", err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(stdout, "CPU        %s (%s)\n", ci.Model, ci.Arch)
	fmt.Fprintf(stdout, "cores      %d logical, %d physical, %d thread(s) per core\n", ci.LogicalCores, ci.PhysicalCores, ci.ThreadsPerCore)
	fmt.Fprintf(stdout, "caches     L1d %s, L2 %s, L3 %s\n", kib(ci.L1DBytes), kib(ci.L2Bytes), kib(ci.L3Bytes))
	fmt.Fprintf(stdout, "features   %s\n", strings.Join(ci.Features, " "))
	fmt.Fprintf(stdout, "missing    %s\n", strings.Join(ci.Missing, " "))
	fmt.Fprintln(stdout, "\nformats")
	for _, f := range formats {
		fmt.Fprintf(stdout, "  %-5s %5.2f bits/w  scales %-18s act %-34s %s\n", f.Name, f.Bits,
			strings.Join(f.Scales, "|"), strings.Join(f.Acts, "|"), f.Summary)
	}
	for _, s := range sections {
		fmt.Fprintf(stdout, "\n%s\n", s.Name)
		for _, line := range s.Text {
			fmt.Fprintf(stdout, "  %s\n", line)
		}
	}
	return 0
}

func kib(n int) string {
	switch {
	case n <= 0:
		return "?"
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}
