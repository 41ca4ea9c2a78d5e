package main

import (
	"fmt"
	"strings"

	"bitgo/kernels"
	"bitgo/quantcfg"
)

func init() { registerInfo(20, kernelsInfo) }

type kernelChoice struct {
	Format string `json:"format"`
	N      int    `json:"n"`
	Kernel string `json:"kernel"`
	// Skipped lists the better kernels for this format that declined, with their reasons.
	Skipped []string `json:"skipped,omitempty"`
}

// kernelsInfo reports, per format, the kernel dispatch picks for decode (n=1) and prefill
// (n=512) under the current kill switches, and why better kernels declined.
func kernelsInfo() infoSection {
	var choices []kernelChoice
	var text []string
	for _, n := range []int{1, 512} {
		for _, c := range kernels.Dispatch(n) {
			kc := kernelChoice{Format: string(c.Format), N: n, Kernel: c.Kernel, Skipped: c.Skipped}
			choices = append(choices, kc)
			line := fmt.Sprintf("%-5s n=%-4d %s", kc.Format, n, kc.Kernel)
			for _, s := range kc.Skipped {
				line += "\n             skipped " + s
			}
			text = append(text, line)
		}
	}
	return infoSection{Name: "kernels", Value: choices, Text: text}
}

func init() { registerInfo(21, helpersInfo) }

// helpersInfo is the info section "helpers": the path whose assembly quantizes the
// activations and converts bf16 (each call chooses it as the kill switches say), or "" for
// the Go loops.
func helpersInfo() infoSection {
	p := kernels.HelperPath()
	line := p + " assembly"
	if p == "" {
		line = "the Go loops"
	}
	line = "activation quantizer and bf16 conversions: " + line + " (BITD_DISABLE_AVX512, BITD_DISABLE_AVX2 and BITD_PUREGO reach them as they reach the kernels)"
	return infoSection{Name: "helpers", Value: p, Text: []string{line}}
}

func init() { registerInfo(22, amxInfo) }

// amxState is the info section "amx": whether the integer formats' GEMM runs on AMX-INT8
// tiles (prefill, and batches from MinTokens tokens by format at K = 4096; i2s's small
// batches from MinTokensShortK below that K), and if not, why.
type amxState struct {
	GEMM            bool           `json:"gemm"`
	MinTokens       map[string]int `json:"min_tokens,omitempty"`
	MinTokensShortK map[string]int `json:"min_tokens_short_k,omitempty"`
	Reason          string         `json:"reason,omitempty"`
}

func amxInfo() infoSection {
	r := kernels.AMXReason()
	v := amxState{GEMM: r == "", Reason: r}
	if r != "" {
		return infoSection{Name: "amx", Value: v, Text: []string{"no AMX GEMM: " + r}}
	}
	v.MinTokens, v.MinTokensShortK = map[string]int{}, map[string]int{}
	var from []string
	for _, fi := range quantcfg.Formats() {
		n, short := kernels.AMXMinTokens(fi.Format, 4096), kernels.AMXMinTokens(fi.Format, 2560)
		if n == 0 {
			continue
		}
		v.MinTokens[string(fi.Format)] = n
		if short != n {
			v.MinTokensShortK[string(fi.Format)] = short
			from = append(from, fmt.Sprintf("%s %d (%d where K < 4096)", fi.Format, n, short))
		} else {
			from = append(from, fmt.Sprintf("%s %d", fi.Format, n))
		}
	}
	line := "the integer formats on AMX-INT8 tiles from " + strings.Join(from, ", ") +
		" tokens a call (i2s's small batches on a GEMV of their own, the others' on the prefill GEMM where K and the groups are multiples of 64)"
	return infoSection{Name: "amx", Value: v, Text: []string{line}}
}

func init() { registerInfo(19, tuningInfo) }

// tuningState is the info section "tuning": the kernels' tuning for this CPU
// (kernels.Tuning), why, and what it changes against the default.
type tuningState struct {
	Tuning  string   `json:"tuning"`
	Why     string   `json:"why"`
	Changes []string `json:"changes,omitempty"`
	// Idle says why the tuning's changes reach no kernel that runs (kernels.Tuning.Idle).
	Idle string `json:"idle,omitempty"`
}

func tuningInfo() infoSection {
	t, why := kernels.CurrentTuning()
	v := tuningState{Tuning: t.String(), Why: why, Changes: t.Changes(), Idle: t.Idle()}
	text := []string{fmt.Sprintf("%s (%s; BITD_TUNING=%s forces one)", v.Tuning, v.Why, strings.Join(kernels.TuningNames(), "|"))}
	if v.Idle != "" {
		text = append(text, "  "+v.Idle)
	}
	for _, c := range v.Changes {
		text = append(text, "  "+c)
	}
	return infoSection{Name: "tuning", Value: v, Text: text}
}

func init() { registerInfo(18, layoutInfo) }

// layoutInfo is the info section "blob_layout": the revision of the packed layouts this
// bitd reads and writes (kernels.LayoutRevision), which pack files and packed uploads name.
func layoutInfo() infoSection {
	return infoSection{Name: "blob_layout", Value: kernels.LayoutRevision, Text: []string{
		kernels.LayoutRevision + " (pack files and packed uploads name it; older revisions are read for the formats unchanged since, and `bitd repack` rewrites a tl2 pack file of kernels/2 or kernels/3)"}}
}
