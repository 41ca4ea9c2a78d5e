package kernels

import (
	"strings"

	"bitgo/quantcfg"
)

// Choice is the dispatch decision for one format: the kernel that runs it, and why every
// kernel ahead of it in the priority list declined.
type Choice struct {
	Format  quantcfg.Format
	Kernel  string
	Skipped []string // "kernel: reason", best first
}

// Dispatch reports, for every format, which kernel runs a layer with the format's default
// settings (4096x4096) for n tokens on this CPU under the current switches, and why better
// kernels were skipped (for `bitd info`).
func Dispatch(n int) []Choice {
	var out []Choice
	for _, fi := range quantcfg.Formats() {
		l, err := probeLayer(quantcfg.LayerSpec{Name: "probe", Format: fi.Format, Out: 4096, In: 4096})
		if err != nil {
			out = append(out, Choice{Format: fi.Format, Kernel: "", Skipped: []string{err.Error()}})
			continue
		}
		c := Choice{Format: fi.Format}
		for _, k := range kernelList {
			ok, why := k.CanImplement(l, n)
			if ok {
				c.Kernel = k.Name()
				break
			}
			if !strings.HasPrefix(why, "format ") {
				c.Skipped = append(c.Skipped, k.Name()+": "+why)
			}
		}
		out = append(out, c)
	}
	return out
}

// probeLayer is a layer with spec's settings and no weights: enough for CanImplement.
func probeLayer(spec quantcfg.LayerSpec) (*Layer, error) {
	spec = spec.WithDefaults()
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	ly, err := NewLayout(spec.Format, spec.Out, spec.In)
	if err != nil {
		return nil, err
	}
	l := &Layer{Spec: spec, Layout: ly, Levels: spec.Codebook}
	switch {
	case spec.Act.Kind == quantcfg.ActPerGroup && spec.Scale.Kind == quantcfg.ScaleGroup:
		l.SegLen = min(spec.Act.Group, spec.Scale.Group)
	case spec.Act.Kind == quantcfg.ActPerGroup:
		l.SegLen = spec.Act.Group
	case spec.Scale.Kind == quantcfg.ScaleGroup:
		l.SegLen = spec.Scale.Group
	}
	return l, nil
}
