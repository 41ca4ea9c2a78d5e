package main

import (
	"fmt"
	"os"
	"strings"

	"bitgo/xe2"
)

func init() { registerInfo(40, xe2Info) }

// xe2Info reports OpenCL: what was found, which devices xe2 uses (xe2:N) and why the
// others are not used. Candidates run the known-answer kernels (compiled once, cached).
func xe2Info() infoSection {
	o, _ := xe2.DefaultOptions()
	rep := xe2.Probe(o, true)
	var text []string
	if !rep.Available {
		text = append(text, "unavailable: "+rep.Reason, "the CPU backend serves every layer")
		return infoSection{Name: "opencl", Value: rep, Text: text}
	}
	for _, d := range rep.Devices {
		tag := "[--]   "
		if d.Usable {
			tag = fmt.Sprintf("[xe2:%d]", d.Index)
		}
		kind := "discrete"
		if d.Integrated {
			kind = "integrated"
		}
		line := fmt.Sprintf("%s %s (%s, %s %s), driver %s", tag, d.Name, d.Platform, kind, d.Type, d.Driver)
		if d.IPVersion != "" {
			line += ", IP " + d.IPVersion
		}
		if d.PCI != "" {
			line += ", pci " + d.PCI
		}
		text = append(text, line)
		if d.Usable {
			detail := fmt.Sprintf("        path %s, known-answer %s, %d CUs @ %d MHz, %.1f GiB", d.Path, d.KnownAnswer, d.ComputeUnits, d.ClockMHz, float64(d.GlobalMem)/(1<<30))
			if p := d.PeakInt8TOPS(); p > 0 {
				detail += fmt.Sprintf(", int8 peak ~%.0f TOPS", p)
			}
			text = append(text, detail)
		}
		var ext []string
		for _, e := range []string{"cl_intel_subgroups", "cl_intel_required_subgroup_size", "cl_intel_subgroup_matrix_multiply_accumulate", "cl_intel_subgroup_2d_block_io"} {
			mark := "no"
			if d.Extensions[e] {
				mark = "yes"
			}
			ext = append(ext, strings.TrimPrefix(e, "cl_intel_")+" "+mark)
		}
		text = append(text, fmt.Sprintf("        %s; DPAS flag %v; subgroup sizes %v", strings.Join(ext, ", "), d.DPASFlag, d.SubGroupSizes))
		for _, r := range d.Reasons {
			prefix := "note: "
			if !d.Usable {
				prefix = "not used: "
			}
			text = append(text, "        "+prefix+r)
		}
	}
	if rep.Reason != "" {
		text = append(text, rep.Reason)
	}
	if len(rep.Usable()) == 0 && os.Getenv("BITD_XE2_ALLOW_ANY_DEVICE") == "" {
		text = append(text, "the CPU backend serves every layer")
	}
	return infoSection{Name: "opencl", Value: rep, Text: text}
}
