package main

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"bitgo/sched"
)

// schedCollector exports the dynamic partitioner's performance ratios: one gauge per
// kernel class and worker, labelled with the core the worker is pinned to.
type schedCollector struct{ pool *sched.Pool }

var schedRatioDesc = prometheus.NewDesc("bitd_sched_ratio",
	"Performance ratio of a worker (pinned core) for a kernel class: its share of row blocks is ratio/sum(ratios).",
	[]string{"class", "worker", "core"}, nil)

func (schedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- schedRatioDesc }

func (c schedCollector) Collect(ch chan<- prometheus.Metric) {
	cores := c.pool.WorkerCores()
	for _, class := range c.pool.Classes() {
		for w, r := range c.pool.Ratios(class) {
			core := "unpinned"
			if w < len(cores) && cores[w] >= 0 {
				core = strconv.Itoa(cores[w])
			}
			ch <- prometheus.MustNewConstMetric(schedRatioDesc, prometheus.GaugeValue, r, string(class), strconv.Itoa(w), core)
		}
	}
}
