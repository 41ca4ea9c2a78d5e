package main

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"bitgo/engine"
	"bitgo/ipc"
	"bitgo/kernels"
)

// serveMetrics are bitd serve's Prometheus metrics, registered on an injected registry.
// It implements ipc.Observer. Achieved weight bandwidth per format is
// rate(bitd_engine_weight_read_bytes_total) / rate(bitd_engine_compute_seconds_total).
type serveMetrics struct {
	calls     *prometheus.HistogramVec // op, format
	errors    *prometheus.CounterVec   // op, code
	sessions  prometheus.Gauge
	opened    prometheus.Counter
	freed     prometheus.Counter
	readBytes *prometheus.CounterVec // format
	compute   *prometheus.CounterVec // format
	tokens    *prometheus.CounterVec // format
	bandwidth *prometheus.GaugeVec   // format
}

func newServeMetrics(reg prometheus.Registerer, e *engine.Engine, shared int) *serveMetrics {
	f := promauto.With(reg)
	m := &serveMetrics{
		calls: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bitd_ipc_call_duration_seconds",
			Help:    "Time the daemon spent on one call, from decoding the request to writing the response, by op and layer format.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 13), // 1 us .. 17 s
		}, []string{"op", "format"}),
		errors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "bitd_ipc_errors_total",
			Help: "Calls answered with an error status, by op and status name.",
		}, []string{"op", "code"}),
		sessions: f.NewGauge(prometheus.GaugeOpts{
			Name: "bitd_ipc_sessions",
			Help: "Client sessions open now.",
		}),
		opened: f.NewCounter(prometheus.CounterOpts{
			Name: "bitd_ipc_sessions_opened_total",
			Help: "Client sessions opened since start.",
		}),
		freed: f.NewCounter(prometheus.CounterOpts{
			Name: "bitd_ipc_session_layers_freed_total",
			Help: "Layers freed because the session that registered them ended.",
		}),
		readBytes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "bitd_engine_weight_read_bytes_total",
			Help: "Bytes of packed weights, scales and biases read by forward calls, by format.",
		}, []string{"format"}),
		compute: f.NewCounterVec(prometheus.CounterOpts{
			Name: "bitd_engine_compute_seconds_total",
			Help: "Time spent computing forward calls, by format.",
		}, []string{"format"}),
		tokens: f.NewCounterVec(prometheus.CounterOpts{
			Name: "bitd_engine_tokens_total",
			Help: "Tokens (activation rows) computed by forward calls, by format.",
		}, []string{"format"}),
		bandwidth: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bitd_engine_weight_bandwidth_bytes",
			Help: "Achieved weight bandwidth (bytes read per second of compute) of the last forward call, by format.",
		}, []string{"format"}),
	}
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bitd_engine_layers",
		Help: "Layers registered in the engine (shared and per-session).",
	}, func() float64 { return float64(e.Stats().Layers) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bitd_engine_shared_layers",
		Help: "Layers loaded from pack files, shared by every session.",
	}, func() float64 { return float64(shared) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bitd_engine_resident_bytes",
		Help: "Bytes of packed weights resident in the engine.",
	}, func() float64 { return float64(e.Stats().WeightBytes) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bitd_engine_huge_page_bytes",
		Help: "Bytes of the engine's own weight memory (uploads, copied packs) the kernel maps with huge pages, from /proc/self/smaps (-1: unknown); packs used in place are not counted (their load logs huge_mapped).",
	}, func() float64 { return float64(e.HugePageBytes()) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bitd_engine_threads",
		Help: "Threads computing each call.",
	}, func() float64 { return float64(e.Threads()) })
	reg.MustRegister(adaptCollector{})
	return m
}

// adaptCollector reports the adaptive tuning's one-token kernel choices
// (kernels.AdaptChoices), one series per format, shape and thread count that ran ("4":
// four or more).
type adaptCollector struct{}

var (
	adaptHWDesc = prometheus.NewDesc("bitd_kernel_adaptive_hardware_prefetch",
		"1 where the one-token GEMVs of a format and shape run the kernel that leaves prefetching to the hardware, 0 where they run the one that prefetches in software (adaptive tunings).",
		[]string{"format", "shape", "threads"}, nil)
	adaptRateDesc = prometheus.NewDesc("bitd_kernel_adaptive_seconds_per_kib",
		"Moving average of the time per KiB of weights of each of the two one-token kernels of a format and shape (adaptive tunings).",
		[]string{"format", "shape", "threads", "prefetch"}, nil)
	adaptSwitchDesc = prometheus.NewDesc("bitd_kernel_adaptive_switches_total",
		"Times the one-token GEMVs of a format and shape switched kernel (adaptive tunings).",
		[]string{"format", "shape", "threads"}, nil)
)

func (adaptCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- adaptHWDesc
	ch <- adaptRateDesc
	ch <- adaptSwitchDesc
}

func (adaptCollector) Collect(ch chan<- prometheus.Metric) {
	for _, c := range kernels.AdaptChoices() {
		shape, threads := fmt.Sprintf("%dx%d", c.M, c.K), strconv.Itoa(c.Threads)
		hw := 0.0
		if c.Kernel == "hardware-prefetch" {
			hw = 1
		}
		ch <- prometheus.MustNewConstMetric(adaptHWDesc, prometheus.GaugeValue, hw, c.Format, shape, threads)
		ch <- prometheus.MustNewConstMetric(adaptRateDesc, prometheus.GaugeValue, c.HWNsKiB*1e-9, c.Format, shape, threads, "hardware")
		ch <- prometheus.MustNewConstMetric(adaptRateDesc, prometheus.GaugeValue, c.SWNsKiB*1e-9, c.Format, shape, threads, "software")
		ch <- prometheus.MustNewConstMetric(adaptSwitchDesc, prometheus.CounterValue, float64(c.Switches), c.Format, shape, threads)
	}
}

// Call records one finished request (ipc.Observer).
func (m *serveMetrics) Call(c ipc.CallEvent) {
	op, format := c.Op.String(), string(c.Format)
	m.calls.WithLabelValues(op, format).Observe(c.Duration.Seconds())
	if c.Status != ipc.StatusOK {
		m.errors.WithLabelValues(op, c.Status.String()).Inc()
		return
	}
	if c.Op == ipc.OpForward && c.Handler > 0 {
		m.readBytes.WithLabelValues(format).Add(float64(c.Bytes))
		m.compute.WithLabelValues(format).Add(c.Handler.Seconds())
		m.tokens.WithLabelValues(format).Add(float64(c.Tokens))
		m.bandwidth.WithLabelValues(format).Set(float64(c.Bytes) / c.Handler.Seconds())
	}
}

// Session records a session opening (+1) or ending (-1, with the layers it freed).
func (m *serveMetrics) Session(delta int, layers int, _ int64) {
	m.sessions.Add(float64(delta))
	if delta > 0 {
		m.opened.Inc()
	} else {
		m.freed.Add(float64(layers))
	}
}
