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
