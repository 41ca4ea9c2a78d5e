package main

import (
	"fmt"

	"bitgo/kernels"
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

// amxState is the info section "amx": whether the integer formats' prefill GEMM runs on
// AMX-INT8 tiles, and if not, why.
type amxState struct {
	GEMM   bool   `json:"gemm"`
	Reason string `json:"reason,omitempty"`
}

func amxInfo() infoSection {
	r := kernels.AMXReason()
	v := amxState{GEMM: r == "", Reason: r}
	line := "prefill GEMM of the integer formats on AMX-INT8 tiles (where K and the groups are multiples of 64)"
	if r != "" {
		line = "no AMX prefill GEMM: " + r
	}
	return infoSection{Name: "amx", Value: v, Text: []string{line}}
}
