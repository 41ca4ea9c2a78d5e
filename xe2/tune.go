package xe2

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"bitgo/quantcfg"
)

// ShapeKey names a tuning bucket: a layer shape and quantization as far as they change
// the kernel, and a token-count bucket.
type ShapeKey struct {
	M, K   int
	Act    string // activation mode
	Scale  string // scale granularity
	DPAS   bool   // DPAS data flow (else conversion)
	Tokens int    // bucket: 1, 2, 4, 8 (decode), then 32, 128, 512, 2048, 8192 (prefill)
}

func (k ShapeKey) String() string {
	path := "convert"
	if k.DPAS {
		path = "dpas"
	}
	return fmt.Sprintf("%dx%d/%s/%s/%s/n%d", k.M, k.K, k.Act, k.Scale, path, k.Tokens)
}

// tokenBucket maps n to its bucket's upper bound.
func tokenBucket(n int) int {
	if n <= 8 {
		return tokenTile(n)
	}
	b := 32
	for b < n && b < 8192 {
		b *= 4
	}
	return b
}

// Key is the layer's tuning bucket for n tokens.
func (l *Layer) Key(n int) ShapeKey {
	return ShapeKey{M: l.m, K: l.k, Act: l.Spec.Act.String(), Scale: l.Spec.Scale.String(), DPAS: l.dpas, Tokens: tokenBucket(n)}
}

// TuneEntry is a bucket's winner.
type TuneEntry struct {
	Tile       string  `json:"tile"`
	Micros     float64 `json:"us"`      // median device time per call
	GBps       float64 `json:"gbps"`    // weight bytes read per second
	TOPS       float64 `json:"tops"`    // 2*M*K*n operations per second
	Candidates int     `json:"tried"`   // candidates timed
	Pruned     int     `json:"pruned"`  // candidates refused before compiling
	Rejected   int     `json:"invalid"` // candidates that failed validation
}

// TuneDevice is one device's table, keyed by ShapeKey.String().
type TuneDevice struct {
	Name    string               `json:"name"`
	Driver  string               `json:"driver"`
	UUID    string               `json:"uuid,omitempty"`
	PCI     string               `json:"pci,omitempty"`
	Path    string               `json:"path"`
	Tuned   string               `json:"tuned"` // RFC 3339 time
	Entries map[string]TuneEntry `json:"entries"`
}

// TuneTable is the autotuner's output: per device and driver, per shape bucket, the
// winning tile. `bitd serve` compiles only the tiles it names.
type TuneTable struct {
	Version int          `json:"version"`
	Devices []TuneDevice `json:"devices"`
}

const tuneVersion = 1

// LoadTuneTable reads a table written by Save.
func LoadTuneTable(path string) (*TuneTable, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: tune table: %w", ErrInvalid, err)
	}
	var t TuneTable
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("%w: tune table %s: %v", ErrInvalid, path, err)
	}
	if t.Version != tuneVersion {
		return nil, fmt.Errorf("%w: tune table %s: version %d, this bitd reads version %d; rerun bitd tune", ErrInvalid, path, t.Version, tuneVersion)
	}
	for _, d := range t.Devices {
		for k, e := range d.Entries {
			if _, err := ParseTile(e.Tile); err != nil {
				return nil, fmt.Errorf("tune table %s: device %s, %s: %w", path, d.Name, k, err)
			}
		}
	}
	return &t, nil
}

// Save writes the table atomically.
func (t *TuneTable) Save(path string) error {
	t.Version = tuneVersion
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (t *TuneTable) device(info DeviceInfo) *TuneDevice {
	for i := range t.Devices {
		d := &t.Devices[i]
		if d.Name == info.Name && d.Driver == info.Driver && d.UUID == info.UUID && d.Path == info.Path {
			return d
		}
	}
	return nil
}

// Lookup returns the winning tile for a bucket on this device and driver.
func (t *TuneTable) Lookup(info DeviceInfo, k ShapeKey) (Tile, bool) {
	d := t.device(info)
	if d == nil {
		return Tile{}, false
	}
	e, ok := d.Entries[k.String()]
	if !ok {
		return Tile{}, false
	}
	tile, err := ParseTile(e.Tile)
	return tile, err == nil
}

// Merge puts dev's entries into the table, replacing the same device's older ones.
func (t *TuneTable) Merge(dev TuneDevice) {
	for i := range t.Devices {
		d := &t.Devices[i]
		if d.Name == dev.Name && d.Driver == dev.Driver && d.UUID == dev.UUID && d.Path == dev.Path {
			for k, e := range dev.Entries {
				d.Entries[k] = e
			}
			d.Tuned = dev.Tuned
			return
		}
	}
	t.Devices = append(t.Devices, dev)
}

// TuneOptions say what to tune.
type TuneOptions struct {
	Shapes [][2]int // {M, K} pairs
	Tokens []int    // token counts; each selects a bucket
	Act    quantcfg.ActMode
	Scale  quantcfg.ScaleGran
	// Codebook of the layers (its affinity decides DPAS vs conversion).
	Codebook quantcfg.Codebook
	// Quick searches a small candidate set (CI, smoke runs).
	Quick bool
	// Iters is the number of timed calls per candidate (median reported).
	Iters int
	// WorkingSet is the total size of the rotating weight sets timed per shape; 0 means
	// four times the device's cache, at least 64 MiB (capped by memory and 64 copies).
	WorkingSet int64
	// Progress receives one line per finished bucket.
	Progress func(string)
}

// TuneResult reports one bucket.
type TuneResult struct {
	Key   ShapeKey
	Entry TuneEntry
}

// Tune searches tiles for every shape and token bucket on d: candidates are pruned by
// work-group size and local memory before anything compiles, each survivor is checked
// once against the Go reference (bit for bit), and the valid ones are timed on rotating
// weight sets larger than the device cache. It returns the device's table.
func Tune(d *Device, o TuneOptions) (TuneDevice, []TuneResult, error) {
	if len(o.Shapes) == 0 || len(o.Tokens) == 0 {
		return TuneDevice{}, nil, fmt.Errorf("%w: tune: no shapes or token counts given", ErrInvalid)
	}
	defaultRun(&o.Iters, &o.Act, &o.Scale)
	if o.Codebook == (quantcfg.Codebook{}) {
		o.Codebook = quantcfg.DefaultCodebook
	}
	out := TuneDevice{Name: d.Info.Name, Driver: d.Info.Driver, UUID: d.Info.UUID, PCI: d.Info.PCI,
		Path: d.Info.Path, Tuned: time.Now().UTC().Format(time.RFC3339), Entries: map[string]TuneEntry{}}
	var results []TuneResult
	rng := rand.New(rand.NewPCG(42, 7))
	for _, sh := range o.Shapes {
		spec := quantcfg.LayerSpec{Name: fmt.Sprintf("tune-%dx%d", sh[0], sh[1]), Format: quantcfg.Int2,
			Out: sh[0], In: sh[1], Act: o.Act, Scale: o.Scale, Codebook: o.Codebook}
		if err := spec.WithDefaults().Validate(); err != nil {
			return out, results, fmt.Errorf("tune: shape %dx%d: %w", sh[0], sh[1], err)
		}
		layers, err := rotatingLayers(d, spec, rng, o.WorkingSet)
		if err != nil {
			return out, results, err
		}
		done := map[int]bool{}
		for _, n := range o.Tokens {
			if n < 1 {
				freeAll(layers)
				return out, results, fmt.Errorf("%w: tune: token count %d", ErrInvalid, n)
			}
			key := layers[0].l.Key(n)
			if done[key.Tokens] {
				continue
			}
			done[key.Tokens] = true
			e, err := tuneBucket(d, layers, n, o, rng)
			if err != nil {
				freeAll(layers)
				return out, results, fmt.Errorf("tune %s: %w", key, err)
			}
			out.Entries[key.String()] = e
			results = append(results, TuneResult{key, e})
			if o.Progress != nil {
				o.Progress(fmt.Sprintf("%-40s %-44s %9.1f us %8.2f GB/s %7.3f TOPS (%d timed, %d pruned, %d invalid)",
					key, e.Tile, e.Micros, e.GBps, e.TOPS, e.Candidates, e.Pruned, e.Rejected))
			}
		}
		freeAll(layers)
	}
	return out, results, nil
}

type tuneLayer struct {
	l      *Layer
	codes  []int8
	scales []float32
}

func freeAll(ls []tuneLayer) {
	for _, t := range ls {
		t.l.Free()
	}
}

// rotatingLayers registers enough copies of a random layer to exceed the working set.
func rotatingLayers(d *Device, spec quantcfg.LayerSpec, rng *rand.Rand, ws int64) ([]tuneLayer, error) {
	bytes := int64(VNNI16Bytes(spec.Out, spec.In))
	if ws <= 0 {
		ws = max(64<<20, 4*int64(d.Info.CacheBytes))
	}
	if lim := int64(d.Info.GlobalMem) / 4; lim > 0 {
		ws = min(ws, lim)
	}
	copies := int(min(64, max(1, (ws+bytes-1)/bytes)))
	var out []tuneLayer
	for i := 0; i < copies; i++ {
		codes, scales, _ := RandomLayer(rng, spec)
		l, err := d.Register(spec, codes, scales, nil)
		if err != nil {
			freeAll(out)
			return nil, err
		}
		out = append(out, tuneLayer{l, codes, scales})
	}
	return out, nil
}

// candidates enumerates tiles for n tokens; Quick keeps a handful.
func candidates(n int, quick bool) []Tile {
	var out []Tile
	splits := []int{1, 2, 4, 8, 16, 32}
	wgss := []int{1, 2, 4, 8, 16}
	sgms := []int{1, 2, 4}
	if quick {
		splits, wgss, sgms = []int{1, 4}, []int{1}, []int{1, 2}
	}
	if n <= 8 {
		for _, sgm := range sgms {
			for _, wgs := range wgss {
				for _, s := range splits {
					for _, fused := range []bool{true, false} {
						out = append(out, Tile{TN: tokenTile(n), SGN: 1, SGM: sgm, WGS: wgs, Split: s, Fused: fused})
					}
				}
			}
		}
		return out
	}
	sgns := []int{1, 2, 4}
	if quick {
		sgns, sgms, splits = []int{1, 2}, []int{1}, []int{1, 2}
	}
	for _, sgn := range sgns {
		for _, sgm := range sgms {
			for _, wgs := range wgss {
				for _, s := range splits[:min(len(splits), 3)] {
					for _, fused := range []bool{false, true} {
						out = append(out, Tile{Prefill: true, TN: 8, SGN: sgn, SGM: sgm, WGS: wgs, Split: s, Fused: fused})
					}
				}
			}
		}
	}
	return out
}

func tuneBucket(d *Device, layers []tuneLayer, n int, o TuneOptions, rng *rand.Rand) (TuneEntry, error) {
	l0 := layers[0]
	spec := l0.l.Spec
	var e TuneEntry
	// Validation input: the real shape; for prefill a ragged token count over two tiles.
	nv := n
	if n > 8 {
		nv = min(n, 19)
	}
	xv := RandomActs(rng, nv, spec.In)
	want, err := Reference(spec, l0.codes, l0.scales, nil, xv, nv)
	if err != nil {
		return e, err
	}
	wantB := f32bytes(want)
	xb := f32bytes(xv)
	// Timing input.
	xt := f32bytes(RandomActs(rng, n, spec.In))
	outV := make([]byte, 4*nv*spec.Out)
	outT := make([]byte, 4*n*spec.Out)
	type timed struct {
		tile Tile
		ns   float64
	}
	var ok []timed
	seen := map[string]bool{}
	for _, t := range candidates(n, o.Quick) {
		if err := t.Fits(d.Info); err != nil {
			e.Pruned++
			continue
		}
		// Prune what cannot help: more sub-groups per work-group than row blocks, and
		// split factors the launch would clamp to the same plan.
		p := l0.l.plan(t)
		sgs := ceilDiv(l0.l.nblk, t.SGM)
		if t.WGS > 1 && t.WGS > sgs {
			e.Pruned++
			continue
		}
		t.Split = p.S
		if seen[t.String()] {
			e.Pruned++
			continue
		}
		seen[t.String()] = true
		if _, err := l0.l.ForwardTile(t, quantcfg.DTypeF32, xb, nv, outV, false); err != nil {
			if errors.Is(err, ErrBuild) {
				return e, err // a kernel that does not compile is a bug, not a slow candidate
			}
			e.Rejected++
			continue
		}
		if !slices.Equal(outV, wantB) {
			e.Rejected++
			continue
		}
		var times []float64
		for i := 0; i < o.Iters+1; i++ {
			tl := layers[i%len(layers)].l
			ns, err := tl.ForwardTile(t, quantcfg.DTypeF32, xt, n, outT, true)
			if err != nil {
				return e, err
			}
			if i > 0 { // the first call warms up
				times = append(times, float64(ns))
			}
		}
		sort.Float64s(times)
		ok = append(ok, timed{t, times[len(times)/2]})
	}
	e.Candidates = len(ok)
	if len(ok) == 0 {
		return e, fmt.Errorf("%w: no candidate tile passed validation (%d pruned, %d invalid)", ErrMismatch, e.Pruned, e.Rejected)
	}
	best := ok[0]
	for _, c := range ok[1:] {
		if c.ns < best.ns {
			best = c
		}
	}
	sec := best.ns / 1e9
	e.Tile = best.tile.String()
	e.Micros = best.ns / 1e3
	if sec > 0 {
		e.GBps = float64(l0.l.WeightBytes()) / sec / 1e9
		e.TOPS = 2 * float64(spec.Out) * float64(spec.In) * float64(n) / sec / 1e12
	}
	return e, nil
}
