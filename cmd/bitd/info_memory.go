package main

import (
	"fmt"

	"bitgo/paged"
)

func init() { registerInfo(15, memoryInfo) }

// memoryInfo tells whether the weights bitd keeps (paged.Arena) will lie in huge pages.
func memoryInfo() infoSection {
	t, err := paged.ReadTHP()
	if err != nil {
		return infoSection{Name: "memory", Value: map[string]any{"error": err.Error()},
			Text: []string{fmt.Sprintf("transparent huge pages unknown (%v): weights may stay in 4 KiB pages", err)}}
	}
	line := fmt.Sprintf("transparent huge pages %s (defrag %s): ", t.Enabled, t.Defrag)
	if t.Advised() {
		line += "weights are packed into huge pages (bitd advises its weight memory MADV_HUGEPAGE)"
	} else {
		line += "weights stay in 4 KiB pages, and a decode pass through BitNet 2B runs up to 1.13x slower; `madvise` in /sys/kernel/mm/transparent_hugepage/enabled lets bitd have huge pages"
	}
	return infoSection{Name: "memory", Value: map[string]any{"thp": t, "weights_in_huge_pages": t.Advised()}, Text: []string{line}}
}
