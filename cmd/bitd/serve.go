package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"bitgo/engine"
	"bitgo/ipc"
	"bitgo/paged"
	"bitgo/sched"
)

func init() {
	register(command{name: "serve", summary: "run the service: layers for clients over a unix socket and shared memory, /metrics", run: runServe})
}

const serveUsage = `usage: bitd serve [flags] [--pack] [FILE.bitgo...]

Serves linear layers to clients (the Python package bitgo, Go programs using package ipc)
over a unix socket and a shared-memory region per client (ipc/PROTOCOL.md). Layers come
from pack files (--pack, shared by every client) or are uploaded by clients (private to
the client's session, freed when it disconnects). SIGTERM or SIGINT drains: calls in
flight finish, new ones are refused, then bitd exits 0.

Every flag has an environment variable (BITD_SOCKET, BITD_THREADS, BITD_PACK,
BITD_PACK_COPY, BITD_METRICS_ADDR, BITD_ALLOW_GID, BITD_LOG_LEVEL, BITD_LOG_FORMAT, BITD_REGION,
BITD_MAX_REGION, BITD_MAX_SESSION_BYTES, BITD_MAX_LAYERS, BITD_MAX_SESSIONS,
BITD_DRAIN_TIMEOUT); flags win over the environment, and a variable with a bad value is
reported and ignored. Sizes take K/M/G suffixes (powers of 1024).

flags:
`

// listFlag is a repeatable flag that also takes comma-separated values. The first use
// on the command line replaces what the environment gave.
type listFlag struct {
	vals *[]string
	set  bool
}

func (f *listFlag) String() string {
	if f.vals == nil {
		return ""
	}
	return strings.Join(*f.vals, ",")
}

func (f *listFlag) Set(s string) error {
	if !f.set {
		*f.vals, f.set = nil, true
	}
	*f.vals = append(*f.vals, splitList(s)...)
	return nil
}

type gidFlag struct {
	vals *[]uint32
	set  bool
}

func (f *gidFlag) String() string {
	if f.vals == nil {
		return ""
	}
	s := make([]string, len(*f.vals))
	for i, g := range *f.vals {
		s[i] = strconv.FormatUint(uint64(g), 10)
	}
	return strings.Join(s, ",")
}

func (f *gidFlag) Set(s string) error {
	g, err := parseGIDs(s)
	if err != nil {
		return err
	}
	if !f.set {
		*f.vals, f.set = nil, true
	}
	*f.vals = append(*f.vals, g...)
	return nil
}

type sizeFlag struct{ p *int64 }

func (f sizeFlag) String() string {
	if f.p == nil {
		return "0"
	}
	return strconv.FormatInt(*f.p, 10)
}

func (f sizeFlag) Set(s string) error {
	v, err := parseSize(s)
	if err == nil {
		*f.p = v
	}
	return err
}

// parseServeFlags builds the configuration: defaults, then the environment, then args.
func parseServeFlags(args []string, lookupEnv func(string) (string, bool), stderr io.Writer) (serveConfig, []string, error) {
	cfg := defaultServeConfig()
	warns := cfg.applyEnv(lookupEnv)
	fs := usageFlagSet("serve", serveUsage, stderr)
	fs.StringVar(&cfg.Socket, "socket", cfg.Socket, "unix socket path clients dial")
	fs.IntVar(&cfg.Threads, "threads", cfg.Threads, "threads computing each call (0 = every core)")
	fs.StringVar(&cfg.Device, "device", cfg.Device, "cpu, or xe2:N to run int2 and ternary layers on that Intel GPU (env BITD_DEVICE)")
	packFlag := &listFlag{vals: &cfg.Packs}
	fs.Var(packFlag, "pack", "pack `FILE` (.bitgo, see bitd pack) to load at start, its layers shared by every client (repeat, or comma-separate)")
	fs.BoolVar(&cfg.PackCopy, "pack-copy", cfg.PackCopy, "copy the packs' weights into bitd's own huge pages instead of using the file mappings in place (faster decode where the page cache maps the file in 4 KiB pages; bitd serve logs how much of each mapping is in huge pages)")
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", cfg.MetricsAddr, "HOST:PORT for /metrics (empty disables)")
	fs.Var(&gidFlag{vals: &cfg.AllowGIDs}, "allow-gid", "numeric `GID` whose members may connect besides this uid (repeat, or comma-separate); makes the socket 0660")
	fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "debug, info, warn or error")
	fs.StringVar(&cfg.LogFormat, "log-format", cfg.LogFormat, "text or json")
	fs.Var(sizeFlag{&cfg.Region}, "region", "shared region `bytes` of a client that does not ask for a size")
	fs.Var(sizeFlag{&cfg.MaxRegion}, "max-region", "largest shared region (`bytes`) a client may ask for")
	fs.Var(sizeFlag{&cfg.MaxSessionBytes}, "max-session-bytes", "weight `bytes` one client may register")
	fs.IntVar(&cfg.MaxLayers, "max-layers", cfg.MaxLayers, "layers one client may register")
	fs.IntVar(&cfg.MaxSessions, "max-sessions", cfg.MaxSessions, "clients connected at once")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", cfg.DrainTimeout, "how long SIGTERM waits for calls in flight")
	// Arguments that are not flags are more pack files, so `--pack a.bitgo b.bitgo`
	// works; flags may follow them.
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return cfg, warns, err
	}
	for _, p := range pos {
		if err := packFlag.Set(p); err != nil {
			return cfg, warns, err
		}
	}
	return cfg, warns, cfg.Validate()
}

func runServe(args []string, _, stderr io.Writer) int {
	cfg, warns, err := parseServeFlags(args, os.LookupEnv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "bitd serve: %v\n", err)
		return 2
	}
	log := newLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	for _, w := range warns {
		log.Warn("bitd serve: environment: " + w)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return serve(ctx, cfg, log, reg, nil)
}

// newLogger is the one place bitd serve's logger is built.
func newLogger(w io.Writer, level, format string) *slog.Logger {
	l, err := parseLevel(level)
	if err != nil {
		l = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: l}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// serve runs the daemon until ctx ends, then drains. ready, if set, is called once the
// socket accepts clients (with the metrics address actually bound, or "").
func serve(ctx context.Context, cfg serveConfig, log *slog.Logger, reg *prometheus.Registry, ready func(metricsAddr string)) int {
	log.Info("bitd serve: configuration", "socket", cfg.Socket, "threads", cfg.Threads, "device", cfg.Device, "packs", cfg.Packs,
		"metrics_addr", cfg.MetricsAddr, "allow_gids", cfg.AllowGIDs, "log_level", cfg.LogLevel, "log_format", cfg.LogFormat,
		"region", cfg.Region, "max_region", cfg.MaxRegion, "max_session_bytes", cfg.MaxSessionBytes,
		"max_layers", cfg.MaxLayers, "max_sessions", cfg.MaxSessions, "drain_timeout", cfg.DrainTimeout, "pid", os.Getpid())

	sc := sched.Default()
	sc.Threads = cfg.Threads
	pool, err := sched.New(sc)
	if err != nil {
		log.Error("bitd serve: worker pool", "threads", cfg.Threads, "err", err)
		return 1
	}
	if pool.PinErr() != nil {
		log.Warn("bitd serve: workers run unpinned", "reason", pool.PinErr())
	}
	defer func() { // after the engine's close (defers run last-in first-out)
		if err := pool.Close(); err != nil {
			log.Error("bitd serve: closing the worker pool", "err", err)
		}
	}()
	log.Info("bitd serve: worker pool", "threads", pool.Threads(), "cores", pool.WorkerCores())
	if t, err := paged.ReadTHP(); err != nil || !t.Advised() {
		// The weights then stay in 4 KiB pages: slower decode, nothing else (bitd info).
		log.Warn("bitd serve: weights will not be in huge pages", "thp", t.Enabled, "err", err,
			"fix", "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled")
	}
	backend, closeBackend, err := openBackend(cfg.Device, log)
	if err != nil {
		log.Error("bitd serve: device", "device", cfg.Device, "err", err)
		return 1
	}
	defer closeBackend()
	e, err := engine.New(engine.Config{Runner: sched.Runner{Pool: pool}, Backend: backend, Logger: log})
	if err != nil {
		log.Error("bitd serve: engine", "err", err)
		return 1
	}
	defer func() {
		if err := e.Close(); err != nil {
			log.Error("bitd serve: closing the engine", "err", err)
		}
	}()
	h := &engineHandler{e: e, shared: map[ipc.LayerID]bool{}}
	for _, p := range cfg.Packs {
		t0 := time.Now()
		lp, err := e.LoadPackWith(p, engine.LoadOptions{Copy: cfg.PackCopy})
		if err != nil {
			log.Error("bitd serve: loading a pack file", "pack", p, "err", err)
			return 1
		}
		for _, id := range lp.IDs {
			h.shared[ipc.LayerID(id)] = true
		}
		log.Info("bitd serve: pack loaded", "pack", p, "model", lp.Model, "layers", len(lp.IDs), "bytes", lp.Bytes,
			"copied", lp.Copied, "huge_mapped", lp.HugeMapped, "took", time.Since(t0))
		if !lp.Copied && lp.HugeMapped < lp.Bytes/2 {
			log.Warn("bitd serve: most of the pack's mapping is in 4 KiB pages: decode reads its weights more slowly than from huge pages",
				"pack", p, "huge_mapped", lp.HugeMapped, "bytes", lp.Bytes, "fix", "--pack-copy (BITD_PACK_COPY=1)")
		}
	}

	m := newServeMetrics(reg, e, len(h.shared))
	reg.MustRegister(schedCollector{pool})
	metricsAddr := ""
	if cfg.MetricsAddr != "" {
		ln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			log.Error("bitd serve: metrics listener (use --metrics-addr, or an empty value to disable /metrics)", "addr", cfg.MetricsAddr, "err", err)
			return 1
		}
		metricsAddr = ln.Addr().String()
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("bitd serve: metrics server", "err", err)
			}
		}()
		defer hs.Close()
	}

	srv, err := ipc.NewServer(h, cfg.serverOptions(log, m))
	if err != nil {
		log.Error("bitd serve: ipc server", "err", err)
		return 1
	}
	ln, err := srv.Listen(cfg.Socket)
	if err != nil {
		log.Error("bitd serve: socket", "socket", cfg.Socket, "err", err)
		return 1
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("bitd serve: ready", "socket", cfg.Socket, "metrics", metricsAddr, "shared_layers", len(h.shared), "threads", e.Threads())
	if ready != nil {
		ready(metricsAddr)
	}

	code := 0
	select {
	case <-ctx.Done():
		log.Info("bitd serve: draining: calls in flight finish, new calls are refused", "sessions", srv.Sessions(), "timeout", cfg.DrainTimeout)
	case err := <-served:
		log.Error("bitd serve: the socket stopped accepting", "err", err)
		code = 1
	}
	dctx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout)
	defer cancel()
	if err := srv.Shutdown(dctx); err != nil {
		log.Warn("bitd serve: drain timed out; calls still running are abandoned", "err", err)
	}
	if code == 0 {
		<-served
	}
	st := e.Stats()
	log.Info("bitd serve: stopped", "calls", st.Calls, "tokens", st.Tokens, "errors", st.Errors)
	return code
}
