package main

import (
	"fmt"
	"strings"

	"bitgo/sched"
)

func init() { registerInfo(10, coresInfo) }

type coreInfo struct {
	ID   int    `json:"id"`
	Type string `json:"type"`
}

// coresInfo lists the cores this process may run on and their types (P/E from CPUID leaf
// 0x1A on Intel hybrid parts; every core is P elsewhere).
func coresInfo() infoSection {
	cores, err := sched.Cores()
	if err != nil {
		return infoSection{Name: "cores", Value: map[string]string{"error": err.Error()}, Text: []string{"unavailable: " + err.Error()}}
	}
	out := make([]coreInfo, len(cores))
	var parts []string
	for i, c := range cores {
		out[i] = coreInfo{ID: c.ID, Type: c.Type.String()}
		parts = append(parts, fmt.Sprintf("%d:%s", c.ID, c.Type))
	}
	return infoSection{Name: "cores", Value: out, Text: []string{fmt.Sprintf("%d allowed: %s", len(cores), strings.Join(parts, " "))}}
}
