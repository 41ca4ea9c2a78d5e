package xe2

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

//go:embed cl/xe2.h cl/gemm.cl cl/probe.cl
var clFS embed.FS

// clSource is file (gemm.cl or probe.cl) preceded by the builtins header; #line keeps
// the build log's line numbers those of file.
func clSource(file string) (string, error) {
	h, err := clFS.ReadFile("cl/xe2.h")
	if err != nil {
		return "", err
	}
	b, err := clFS.ReadFile("cl/" + file)
	if err != nil {
		return "", fmt.Errorf("%w: no kernel source %q", ErrInvalid, file)
	}
	return "#line 1 \"xe2.h\"\n" + string(h) + "\n#line 1 \"" + file + "\"\n" + string(b), nil
}

// baseOptions are the build options every program of the device gets. Fast-math and
// denormal flushing are never requested; FP_CONTRACT is off in the header; division is
// correctly rounded (the build option, or the integer implementation).
func (d *Device) baseOptions() string {
	o := []string{"-cl-std=CL1.2"}
	if !d.Info.native && !d.opts.OptimizeEmulated {
		// The portable emulation is there to be checked, not to be fast: unoptimized,
		// PoCL compiles it about ten times faster.
		o = append(o, "-cl-opt-disable")
	}
	if !d.Info.softDiv {
		o = append(o, "-cl-fp32-correctly-rounded-divide-sqrt")
	}
	o = append(o, fmt.Sprintf("-D XE2_NATIVE=%d -D XE2_SOFTDIV=%d", b2i(d.Info.native), b2i(d.Info.softDiv)))
	return strings.Join(o, " ")
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// program returns the built program for file with extra options, building it (or loading
// it from the binary cache) on first use. kernel names the kernel the caller needs, for
// error messages. The device lock is held.
func (d *Device) program(file, kernel, extra string) (handle, error) {
	opts := d.baseOptions()
	if extra != "" {
		opts += " " + extra
	}
	key := file + "|" + opts
	if p, ok := d.progs[key]; ok {
		return p, nil
	}
	src, err := clSource(file)
	if err != nil {
		return 0, err
	}
	p, err := d.buildCached(file, kernel, src, opts)
	if err != nil {
		return 0, err
	}
	d.progs[key] = p
	return p, nil
}

// buildCached loads the program from the binary cache, or builds it from source and
// stores its binary. A cache entry that is unreadable, corrupt or refused by the driver
// is rebuilt from source and replaced.
func (d *Device) buildCached(file, kernel, src, opts string) (handle, error) {
	log := d.opts.logger()
	path := ""
	if d.opts.CacheDir != "" {
		path = filepath.Join(d.opts.CacheDir, d.cacheKey(src, opts)+".bin")
		if bin, err := readCacheFile(path); err == nil {
			p, _, err := clBuild(d.ctx, d.Info.device, "", bin, opts)
			if err == nil {
				d.stats.CacheHits++
				return p, nil
			}
			log.Warn("xe2: cached kernel binary refused, rebuilding", "file", path, "err", err)
		} else if !errors.Is(err, os.ErrNotExist) {
			log.Warn("xe2: kernel binary cache entry unusable, rebuilding", "file", path, "err", err)
		}
	}
	p, blog, err := clBuild(d.ctx, d.Info.device, src, nil, opts)
	if err != nil {
		return 0, fmt.Errorf("%w: %s (kernel %s) on %s with options %q: %v\nbuild log:\n%s", ErrBuild, file, kernel, d.Info.Name, opts, err, blog)
	}
	d.stats.Builds++
	if path != "" {
		bin, err := clProgramBinary(p)
		if err == nil {
			err = writeCacheFile(path, bin)
		}
		if err != nil {
			log.Warn("xe2: cannot store kernel binary in the cache", "file", path, "err", err)
		}
	}
	return p, nil
}

// cacheKey identifies a binary: device, driver, platform, source and options.
func (d *Device) cacheKey(src, opts string) string {
	h := sha256.New()
	for _, s := range []string{"xe2-binary-v1", d.Info.Platform, platformString(d.Info.platform, clPlatformVersion),
		d.Info.Name, d.Info.Version, d.Info.Driver, fmt.Sprint(d.Info.VendorID), src, opts} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

var cacheMagic = []byte("bitgo-xe2-bin-v1\n")

// A cache file is the magic, the SHA-256 of the binary, then the binary.
func readCacheFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(b, cacheMagic) || len(b) < len(cacheMagic)+sha256.Size+1 {
		return nil, fmt.Errorf("%s: not a kernel binary cache file", path)
	}
	b = b[len(cacheMagic):]
	sum, bin := b[:sha256.Size], b[sha256.Size:]
	if got := sha256.Sum256(bin); !bytes.Equal(got[:], sum) {
		return nil, fmt.Errorf("%s: checksum mismatch (truncated or corrupt)", path)
	}
	return bin, nil
}

func writeCacheFile(path string, bin []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	sum := sha256.Sum256(bin)
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(append(append(append([]byte{}, cacheMagic...), sum[:]...), bin...))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
