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

func init() { registerInfo(21, amxInfo) }

// amxState is the info section "amx": whether the integer formats' GEMM runs on AMX-INT8
// tiles (prefill, and batches from MinTokens tokens by format), and if not, why.
type amxState struct {
	GEMM      bool           `json:"gemm"`
	MinTokens map[string]int `json:"min_tokens,omitempty"`
	Reason    string         `json:"reason,omitempty"`
}

func amxInfo() infoSection {
	r := kernels.AMXReason()
	v := amxState{GEMM: r == "", Reason: r}
	if r != "" {
		return infoSection{Name: "amx", Value: v, Text: []string{"no AMX GEMM: " + r}}
	}
	v.MinTokens = map[string]int{}
	var from []string
	for _, fi := range quantcfg.Formats() {
		if n := kernels.AMXMinTokens(fi.Format); n > 0 {
			v.MinTokens[string(fi.Format)] = n
			from = append(from, fmt.Sprintf("%s %d", fi.Format, n))
		}
	}
	line := "GEMM of the integer formats on AMX-INT8 tiles (where K and the groups are multiples of 64), from " +
		strings.Join(from, ", ") + " tokens a call"
	return infoSection{Name: "amx", Value: v, Text: []string{line}}
}
