package main

import (
	"fmt"

	"bitgo/kernels"
	"bitgo/quantcfg"
)

func init() { registerInfo(20, kernelsInfo) }

type kernelChoice struct {
	Format string `json:"format"`
	N      int    `json:"n"`
	Kernel string `json:"kernel"`
	// Skipped lists the better kernels that declined, with their reasons.
	Skipped []string `json:"skipped,omitempty"`
}

// kernelsInfo reports, per format, the kernel dispatch picks for decode (n=1) and prefill
// (n=512) on a 4096x4096 layer, and why the kernels ahead of it declined.
func kernelsInfo() infoSection {
	var choices []kernelChoice
	var text []string
	for _, fi := range quantcfg.Formats() {
		spec := quantcfg.LayerSpec{Name: "probe", Format: fi.Format, Out: 4096, In: 4096}.WithDefaults()
		lay, err := kernels.NewLayout(spec.Format, spec.Out, spec.In)
		if err != nil {
			continue
		}
		l, err := kernels.NewLayer(spec, make([]byte, lay.Bytes()), make([]float32, spec.NumScales()), nil)
		if err != nil {
			continue
		}
		for _, n := range []int{1, 512} {
			c := kernelChoice{Format: string(fi.Format), N: n}
			for _, k := range kernels.Kernels() {
				if ok, why := k.CanImplement(l, n); ok {
					c.Kernel = k.Name()
					break
				} else {
					c.Skipped = append(c.Skipped, k.Name()+": "+why)
				}
			}
			choices = append(choices, c)
			line := fmt.Sprintf("%-5s n=%-4d %s", c.Format, n, c.Kernel)
			for _, s := range c.Skipped {
				line += "\n          skipped " + s
			}
			text = append(text, line)
		}
	}
	return infoSection{Name: "kernels", Value: choices, Text: text}
}
