package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"bitgo/ipc"
)

// serveConfig is everything `bitd serve` can be told. Defaults come from
// defaultServeConfig, then BITD_* environment variables override them (a bad value is
// reported and ignored), then flags override both.
type serveConfig struct {
	// Socket is the unix socket path clients dial.
	Socket string `json:"socket"`
	// Threads computing each call; 0 means every core.
	Threads int `json:"threads"`
	// Device is "cpu" or "xe2:N" (one GPU; layers it cannot run stay on the CPU).
	Device string `json:"device"`
	// Packs are .bitgo pack files loaded at start; their layers are shared by every
	// session (read-only, by name).
	Packs []string `json:"packs"`
	// PackCopy copies the packs' weights into bitd's own huge pages instead of using the
	// file mappings in place (engine.LoadOptions.Copy).
	PackCopy bool `json:"pack_copy"`
	// MetricsAddr is where /metrics is served; empty disables it.
	MetricsAddr string `json:"metrics_addr"`
	// AllowGIDs admit peers of these groups besides the daemon's own uid.
	AllowGIDs []uint32 `json:"allow_gids"`
	// LogLevel: debug, info, warn, error. LogFormat: text or json.
	LogLevel  string `json:"log_level"`
	LogFormat string `json:"log_format"`
	// Region is the shared region of a client that does not ask for a size; MaxRegion
	// the most a client may ask for.
	Region    int64 `json:"region_bytes"`
	MaxRegion int64 `json:"max_region_bytes"`
	// MaxSessionBytes bounds the weights one session registers; MaxLayers the layers it
	// owns; MaxSessions the clients connected at once.
	MaxSessionBytes int64 `json:"max_session_bytes"`
	MaxLayers       int   `json:"max_layers"`
	MaxSessions     int   `json:"max_sessions"`
	// DrainTimeout bounds how long SIGTERM waits for calls in flight.
	DrainTimeout time.Duration `json:"drain_timeout"`
}

// defaultSocket is $XDG_RUNTIME_DIR/bitd.sock, else /tmp/bitd-$UID.sock.
func defaultSocket() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "bitd.sock")
	}
	return fmt.Sprintf("/tmp/bitd-%d.sock", os.Getuid())
}

func defaultServeConfig() serveConfig {
	return serveConfig{
		Socket:          defaultSocket(),
		Device:          "cpu",
		MetricsAddr:     "127.0.0.1:9464",
		LogLevel:        "info",
		LogFormat:       "text",
		Region:          ipc.DefaultRegionBytes,
		MaxRegion:       ipc.DefaultLimits.MaxRegion,
		MaxSessionBytes: ipc.DefaultLimits.MaxBytes,
		MaxLayers:       ipc.DefaultLimits.MaxLayers,
		MaxSessions:     ipc.DefaultMaxSessions,
		DrainTimeout:    30 * time.Second,
	}
}

// maxSocketPath is the room in sockaddr_un.sun_path (108 bytes with the NUL).
const maxSocketPath = 107

// Validate checks every field and returns all problems, each naming its flag.
func (c serveConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case c.Socket == "":
		bad("--socket: empty path")
	case len(c.Socket) > maxSocketPath:
		bad("--socket %s: %d bytes, a unix socket path has at most %d", c.Socket, len(c.Socket), maxSocketPath)
	}
	if c.Device != "cpu" {
		if _, err := parseXe2Device(c.Device); err != nil {
			bad("--device %q: want cpu or xe2:N (bitd info lists the GPUs)", c.Device)
		}
	}
	if c.Threads < 0 {
		bad("--threads %d: must be >= 0 (0 = every core)", c.Threads)
	}
	for _, p := range c.Packs {
		if fi, err := os.Stat(p); err != nil {
			bad("--pack %s: %v", p, err)
		} else if fi.IsDir() {
			bad("--pack %s: is a directory, want a .bitgo file (see `bitd pack`)", p)
		}
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			bad("--metrics-addr %q: want HOST:PORT (or empty to disable): %v", c.MetricsAddr, err)
		}
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		bad("--log-level: %v", err)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		bad("--log-format %q: allowed: text, json", c.LogFormat)
	}
	if c.MaxRegion < ipc.MinRegionBytes {
		bad("--max-region %d: must be at least %d", c.MaxRegion, ipc.MinRegionBytes)
	}
	if c.Region < ipc.MinRegionBytes || c.Region > c.MaxRegion {
		bad("--region %d: must be in [%d, --max-region %d]", c.Region, ipc.MinRegionBytes, c.MaxRegion)
	}
	if c.MaxSessionBytes < 1 {
		bad("--max-session-bytes %d: must be positive", c.MaxSessionBytes)
	}
	if c.MaxLayers < 1 {
		bad("--max-layers %d: must be positive", c.MaxLayers)
	}
	if c.MaxSessions < 1 {
		bad("--max-sessions %d: must be positive", c.MaxSessions)
	}
	if c.DrainTimeout <= 0 {
		bad("--drain-timeout %v: must be positive", c.DrainTimeout)
	}
	return errors.Join(errs...)
}

// serverOptions is the ipc side of the configuration.
func (c serveConfig) serverOptions(log *slog.Logger, obs ipc.Observer) ipc.ServerOptions {
	return ipc.ServerOptions{
		Name:          "bitd",
		Limits:        ipc.Limits{MaxRegion: c.MaxRegion, MaxBytes: c.MaxSessionBytes, MaxLayers: c.MaxLayers},
		DefaultRegion: c.Region,
		MaxSessions:   c.MaxSessions,
		AllowGIDs:     c.AllowGIDs,
		Logger:        log,
		Observer:      obs,
	}
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%q: allowed: debug, info, warn, error", s)
	}
	return l, nil
}

// parseSize reads a byte count: a plain integer or one with a suffix K, M, G, T (powers
// of 1024; KiB, MiB, GiB, TiB and KB, MB... are read the same way).
func parseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	mult := int64(1)
	if n := len(t); n > 0 {
		if i := strings.IndexByte("KMGT", t[n-1]); i >= 0 {
			mult = 1 << (10 * (i + 1))
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a byte size (e.g. 67108864, 64M, 1GiB)", s)
	}
	return v * mult, nil
}

// parseGIDs reads a comma-separated list of numeric group ids.
func parseGIDs(s string) ([]uint32, error) {
	var out []uint32
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%q is not a numeric group id", f)
		}
		out = append(out, uint32(v))
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// applyEnv overrides c from BITD_* variables (lookupEnv is os.LookupEnv in
// production). An empty variable counts as unset, except BITD_METRICS_ADDR, whose empty
// value disables /metrics. A value that does not parse leaves the field as it was and
// yields a warning naming the variable, the value and what is kept.
func (c *serveConfig) applyEnv(lookupEnv func(string) (string, bool)) []string {
	var warns []string
	warn := func(name, val string, err error, kept any) {
		warns = append(warns, fmt.Sprintf("%s=%q ignored: %v; keeping %v", name, val, err, kept))
	}
	get := func(name string) (string, bool) {
		v, ok := lookupEnv(name)
		return strings.TrimSpace(v), ok && strings.TrimSpace(v) != ""
	}
	integer := func(name string, p *int, min int) {
		if v, ok := get(name); ok {
			n, err := strconv.Atoi(v)
			switch {
			case err != nil:
				warn(name, v, errors.New("not an integer"), *p)
			case n < min:
				warn(name, v, fmt.Errorf("must be at least %d", min), *p)
			default:
				*p = n
			}
		}
	}
	size := func(name string, p *int64, min int64) {
		if v, ok := get(name); ok {
			n, err := parseSize(v)
			switch {
			case err != nil:
				warn(name, v, err, *p)
			case n < min:
				warn(name, v, fmt.Errorf("must be at least %d bytes", min), *p)
			default:
				*p = n
			}
		}
	}
	if v, ok := get("BITD_SOCKET"); ok {
		c.Socket = v
	}
	integer("BITD_THREADS", &c.Threads, 0)
	if v, ok := get("BITD_DEVICE"); ok {
		c.Device = v
	}
	if v, ok := get("BITD_PACK"); ok {
		c.Packs = splitList(v)
	}
	if v, ok := get("BITD_PACK_COPY"); ok {
		if b, err := strconv.ParseBool(v); err != nil {
			warn("BITD_PACK_COPY", v, errors.New("want true or false (1 or 0)"), c.PackCopy)
		} else {
			c.PackCopy = b
		}
	}
	if v, ok := lookupEnv("BITD_METRICS_ADDR"); ok {
		c.MetricsAddr = strings.TrimSpace(v)
	}
	if v, ok := get("BITD_ALLOW_GID"); ok {
		if g, err := parseGIDs(v); err != nil {
			warn("BITD_ALLOW_GID", v, err, c.AllowGIDs)
		} else {
			c.AllowGIDs = g
		}
	}
	if v, ok := get("BITD_LOG_LEVEL"); ok {
		if _, err := parseLevel(v); err != nil {
			warn("BITD_LOG_LEVEL", v, err, c.LogLevel)
		} else {
			c.LogLevel = v
		}
	}
	if v, ok := get("BITD_LOG_FORMAT"); ok {
		if v != "text" && v != "json" {
			warn("BITD_LOG_FORMAT", v, errors.New("allowed: text, json"), c.LogFormat)
		} else {
			c.LogFormat = v
		}
	}
	size("BITD_REGION", &c.Region, ipc.MinRegionBytes)
	size("BITD_MAX_REGION", &c.MaxRegion, ipc.MinRegionBytes)
	size("BITD_MAX_SESSION_BYTES", &c.MaxSessionBytes, 1)
	integer("BITD_MAX_LAYERS", &c.MaxLayers, 1)
	integer("BITD_MAX_SESSIONS", &c.MaxSessions, 1)
	if c.Region > c.MaxRegion {
		warns = append(warns, fmt.Sprintf("default region %d is larger than the maximum %d; using %d", c.Region, c.MaxRegion, c.MaxRegion))
		c.Region = c.MaxRegion
	}
	if v, ok := get("BITD_DRAIN_TIMEOUT"); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			warn("BITD_DRAIN_TIMEOUT", v, errors.New("want a positive duration such as 30s"), c.DrainTimeout)
		} else {
			c.DrainTimeout = d
		}
	}
	return warns
}
