package xe2

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Options configure discovery, the binary cache and kernel selection. Start from
// DefaultOptions (which reads the BITD_XE2_* environment) and adjust.
type Options struct {
	// AllowAnyDevice also accepts devices that are not Intel Xe2 GPUs (for example PoCL's
	// CPU device in CI). Such devices run the same kernel bodies through the portable
	// emulations of the Intel builtins. Env BITD_XE2_ALLOW_ANY_DEVICE=1.
	AllowAnyDevice bool
	// CacheDir holds compiled kernel binaries, keyed by device, driver, source and
	// options. "" disables the cache. Default $XDG_CACHE_HOME/bitgo/xe2 (or
	// ~/.cache/bitgo/xe2); env BITD_XE2_CACHE ("off" disables).
	CacheDir string
	// TunePath is the autotuner's table (see Tune). "" means no table: built-in
	// heuristics pick the tiles. Default $XDG_CONFIG_HOME/bitgo/xe2-tune.json when that
	// file exists; env BITD_XE2_TUNE.
	TunePath string
	// NoDPAS never uses the int2 DPAS builtin, even when the probe allows it (the
	// in-register conversion runs instead). Env BITD_XE2_NO_DPAS=1.
	NoDPAS bool
	// SoftDiv forces the integer implementation of correctly rounded division, which is
	// otherwise used only when the device does not report CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT.
	SoftDiv bool
	// OptimizeEmulated builds the portable emulation (non-Intel devices) with the
	// compiler's optimizations; by default it is built with -cl-opt-disable, which PoCL
	// compiles about ten times faster. Env BITD_XE2_OPTIMIZE_EMULATED=1.
	OptimizeEmulated bool
	// Logger receives build and cache events; nil discards them.
	Logger *slog.Logger
}

// DefaultOptions returns the defaults with environment overrides applied. A malformed
// value is reported through the returned warnings and ignored.
func DefaultOptions() (Options, []string) {
	o := Options{CacheDir: defaultCacheDir(), TunePath: defaultTunePath()}
	var warn []string
	boolEnv := func(name string, dst *bool) {
		v, ok := os.LookupEnv(name)
		if !ok || v == "" {
			return
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			warn = append(warn, fmt.Sprintf("%s=%q is not a boolean; using %v", name, v, *dst))
			return
		}
		*dst = b
	}
	boolEnv("BITD_XE2_ALLOW_ANY_DEVICE", &o.AllowAnyDevice)
	boolEnv("BITD_XE2_NO_DPAS", &o.NoDPAS)
	boolEnv("BITD_XE2_SOFTDIV", &o.SoftDiv)
	boolEnv("BITD_XE2_OPTIMIZE_EMULATED", &o.OptimizeEmulated)
	if v, ok := os.LookupEnv("BITD_XE2_CACHE"); ok {
		if strings.EqualFold(v, "off") || v == "" {
			o.CacheDir = ""
		} else {
			o.CacheDir = v
		}
	}
	if v, ok := os.LookupEnv("BITD_XE2_TUNE"); ok {
		o.TunePath = v
	}
	return o, warn
}

// Validate checks the options.
func (o Options) Validate() error {
	if o.CacheDir != "" && !filepath.IsAbs(o.CacheDir) {
		return fmt.Errorf("%w: cache dir %q: must be an absolute path", ErrInvalid, o.CacheDir)
	}
	return nil
}

func (o Options) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func defaultCacheDir() string {
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "bitgo", "xe2")
}

func defaultTunePath() string {
	d, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	p := filepath.Join(d, "bitgo", "xe2-tune.json")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// DefaultTunePath is where `bitd tune` writes its table unless told otherwise.
func DefaultTunePath() string {
	d, err := os.UserConfigDir()
	if err != nil {
		return "xe2-tune.json"
	}
	return filepath.Join(d, "bitgo", "xe2-tune.json")
}
