package paged

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"bitgo/internal/mpread"
	"bitgo/quantcfg"
)

// Verify says when OpenPack checks the blobs' CRC-32C. The header and the preamble are
// always checked.
type Verify int

const (
	// VerifyOnOpen checks every blob before OpenPack returns (the default). It reads the
	// whole file once, in parallel over GOMAXPROCS goroutines; on a warm page cache that
	// runs at memory speed (about 50 ms for a 0.5 GB pack on a 2-core machine) and it
	// leaves the pages mapped, so the first inference does not fault them in.
	VerifyOnOpen Verify = iota
	// VerifyOnFirstUse checks each blob the first time LayerBlob or TensorData returns it.
	VerifyOnFirstUse
	// VerifyNever checks nothing; call Pack.Verify or Pack.VerifyBlob when you want to.
	VerifyNever
)

// OpenOptions tunes OpenPack; the zero value verifies on open.
type OpenOptions struct {
	Verify Verify
	// Populate maps the whole file at once (MAP_POPULATE) instead of page by page on
	// first touch. It also reads the alignment holes between blobs, so on the synthetic
	// 2B pack it was slower than faulting pages in (and left holes resident); it is for
	// VerifyNever users who want every page in before the first call.
	Populate bool
}

// Pack is an open pack file, mapped read-only and shared (MAP_SHARED, PROT_READ): blobs
// are used in place, several processes mapping one file share its page cache, and opening
// costs no copy. A Pack is safe for concurrent use; Close invalidates every blob slice.
//
// A pack file must not be modified or truncated while it is open: the kernel would fault
// on the missing pages. OpenPack, Verify and VerifyBlob turn such a fault into an error;
// a kernel reading a blob that shrank underneath it crashes the process.
type Pack struct {
	Path string
	PackHeader

	verify Verify
	data   []byte // the whole file (a mapping when owned)
	owned  bool   // data is our mapping: Close unmaps it
	index  map[string]blobIndex
	state  []atomic.Uint32 // per blob (layers, then tensors): 0 unchecked, 1 good, 2 bad
	mu     sync.RWMutex    // held for reading while blobs are handed out, for writing by Close
	closed bool
}

type blobIndex struct {
	layer bool
	i     int
}

const (
	blobUnchecked uint32 = iota
	blobGood
	blobBad
)

// OpenPack maps a pack file and validates it: preamble, versions, header checksum and
// schema, every layer's spec (quantcfg), scale count, bias, blob placement (aligned, inside
// the file, not overlapping the header or each other), and, depending on opts.Verify,
// every blob's checksum. Errors wrap ErrPack, ErrPackVersion or ErrChecksum and name the
// file and the layer or tensor.
func OpenPack(path string, opts OpenOptions) (*Pack, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPack, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPack, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s: not a regular file", ErrPack, path)
	}
	size := st.Size()
	if size < PreambleSize {
		return nil, fmt.Errorf("%w: %s: %d bytes, shorter than the %d-byte preamble (truncated, or not a pack file)", ErrPack, path, size, PreambleSize)
	}
	if int64(int(size)) != size {
		return nil, fmt.Errorf("%w: %s: %d bytes do not fit in the address space", ErrPack, path, size)
	}
	extra := 0
	if opts.Populate {
		extra = unix.MAP_POPULATE
	}
	m, err := mapFileAligned(int(f.Fd()), int(size), extra)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrPack, path, err)
	}
	p, err := parsePackMapped(path, m)
	if err != nil {
		_ = unmapFile(m)
		return nil, err
	}
	p.verify = opts.Verify
	p.owned = true
	if opts.Verify == VerifyOnOpen {
		if err := p.Verify(); err != nil {
			_ = unmapFile(m)
			return nil, err
		}
	}
	return p, nil
}

func parsePackMapped(path string, m []byte) (p *Pack, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			p, err = nil, fmt.Errorf("%w: %s: memory fault while reading the file (was it truncated while open?): %v", ErrPack, path, r)
		}
	}()
	return ParsePack(path, m)
}

// ParsePack validates a whole pack file held in data (all but the blob checksums; see
// Pack.Verify) and returns it with blobs aliasing data. name is used in error messages.
func ParsePack(name string, data []byte) (*Pack, error) {
	bad := func(sentinel error, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", sentinel, name, fmt.Sprintf(format, args...))
	}
	size := int64(len(data))
	if size < PreambleSize {
		return nil, bad(ErrPack, "%d bytes, shorter than the %d-byte preamble (truncated, or not a pack file)", size, PreambleSize)
	}
	if string(data[:8]) != PackMagic {
		return nil, bad(ErrPack, "magic %q, want %q: not a bitgo pack file", data[:8], PackMagic)
	}
	major, minor := binary.LittleEndian.Uint32(data[8:]), binary.LittleEndian.Uint32(data[12:])
	if major != PackMajor {
		return nil, bad(ErrPackVersion, "format version %d.%d; this reader reads version %d.x (rewrite the file with this bitd's `bitd pack`)", major, minor, PackMajor)
	}
	if got, want := CRC32C(data[:60]), binary.LittleEndian.Uint32(data[60:]); got != want {
		return nil, bad(ErrChecksum, "preamble CRC-32C is %#08x, the file records %#08x: the first 64 bytes are corrupt", got, want)
	}
	hoff, hlen := binary.LittleEndian.Uint64(data[16:]), binary.LittleEndian.Uint64(data[24:])
	if hlen > MaxPackHeader {
		return nil, bad(ErrPack, "header length %d exceeds the %d-byte limit", hlen, MaxPackHeader)
	}
	if hoff < PreambleSize || hoff > uint64(size) || hlen > uint64(size)-hoff {
		return nil, bad(ErrPack, "header [%d, +%d) lies outside the file (%d bytes): truncated?", hoff, hlen, size)
	}
	if end := hoff + hlen; end != uint64(size) {
		return nil, bad(ErrPack, "the header ends at %d but the file has %d bytes: the header must end the file (trailing data, or truncated and appended to?)", end, size)
	}
	hdr := data[hoff : hoff+hlen]
	if got, want := CRC32C(hdr), binary.LittleEndian.Uint32(data[32:]); got != want {
		return nil, bad(ErrChecksum, "header CRC-32C is %#08x, the file records %#08x: the header is corrupt", got, want)
	}
	w, err := decodeHeader(hdr)
	if err != nil {
		return nil, bad(ErrPack, "header does not decode: %v", err)
	}
	p := &Pack{Path: name, data: data, index: map[string]blobIndex{}}
	if err := p.fromWire(w, int64(hoff)); err != nil {
		return nil, bad(ErrPack, "%v", err)
	}
	p.state = make([]atomic.Uint32, len(p.Layers)+len(p.Tensors))
	return p, nil
}

// fromWire converts and checks the decoded header; hoff is where the header starts (blobs
// must end before it).
func (p *Pack) fromWire(w *wireHeader, hoff int64) error {
	if w.Align < 4096 || w.Align > 1<<30 || w.Align&(w.Align-1) != 0 {
		return fmt.Errorf("alignment %d is not a power of two in [4096, 2^30]", w.Align)
	}
	p.Model, p.Layout, p.CreatedBy, p.Align, p.Metadata = w.Model, w.Layout, w.CreatedBy, int64(w.Align), w.Metadata
	type span struct {
		what     string
		off, end int64
	}
	var spans []span
	blob := func(what string, off, length uint64) (BlobRef, error) {
		switch {
		case off%w.Align != 0:
			return BlobRef{}, fmt.Errorf("%s: blob offset %d is not a multiple of the alignment %d", what, off, w.Align)
		case off < PreambleSize || off > uint64(hoff) || length > uint64(hoff)-off:
			return BlobRef{}, fmt.Errorf("%s: blob [%d, +%d) is not between the preamble and the header (at %d)", what, off, length, hoff)
		}
		spans = append(spans, span{what, int64(off), int64(off + length)})
		return BlobRef{Offset: int64(off), Length: int64(length)}, nil
	}
	seen := func(name string) error {
		if _, dup := p.index[name]; dup {
			return fmt.Errorf("name %q appears twice", name)
		}
		return nil
	}
	for i := range w.Layers {
		wl := &w.Layers[i]
		what := fmt.Sprintf("layer %q", wl.Name)
		if wl.Name == "" {
			what = fmt.Sprintf("layer #%d", i)
		}
		l, err := layerFromWire(wl)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if err := checkLayer(l); err != nil {
			return err
		}
		if err := seen(wl.Name); err != nil {
			return err
		}
		if wl.Length == 0 {
			return fmt.Errorf("%s: empty blob", what)
		}
		ref, err := blob(what, wl.Offset, wl.Length)
		if err != nil {
			return err
		}
		ref.CRC32C = wl.CRC32C
		l.Blob = ref
		p.index[wl.Name] = blobIndex{layer: true, i: len(p.Layers)}
		p.Layers = append(p.Layers, l)
	}
	for i := range w.Tensors {
		wt := &w.Tensors[i]
		what := fmt.Sprintf("tensor %q", wt.Name)
		ti, err := tensorInfoFromWire(wt.Name, wt.DType, wt.Shape)
		if err != nil {
			return err
		}
		if err := seen(wt.Name); err != nil {
			return err
		}
		if want := ti.Bytes(); uint64(want) != wt.Length {
			return fmt.Errorf("%s: shape %s of %s needs %d bytes, the blob has %d", what, ti.shapeString(), ti.DType, want, wt.Length)
		}
		ref, err := blob(what, wt.Offset, wt.Length)
		if err != nil {
			return err
		}
		ref.CRC32C = wt.CRC32C
		p.index[wt.Name] = blobIndex{i: len(p.Tensors)}
		p.Tensors = append(p.Tensors, PackTensor{TensorInfo: ti, Blob: ref})
	}
	for i := range w.External {
		we := &w.External[i]
		ti, err := tensorInfoFromWire(we.Name, we.DType, we.Shape)
		if err != nil {
			return fmt.Errorf("external %w", err)
		}
		if err := seen(we.Name); err != nil {
			return err
		}
		p.index[we.Name] = blobIndex{i: -1}
		p.External = append(p.External, ti)
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].off < spans[j].off })
	for i := 1; i < len(spans); i++ {
		if spans[i].off < spans[i-1].end {
			return fmt.Errorf("%s: blob [%d, %d) overlaps %s [%d, %d)", spans[i].what, spans[i].off, spans[i].end, spans[i-1].what, spans[i-1].off, spans[i-1].end)
		}
	}
	return nil
}

func layerFromWire(wl *wireLayer) (PackLayer, error) {
	if wl.Out > quantcfg.MaxDim || wl.In > quantcfg.MaxDim {
		return PackLayer{}, fmt.Errorf("shape %dx%d exceeds the %d limit", wl.Out, wl.In, quantcfg.MaxDim)
	}
	s := quantcfg.LayerSpec{Name: wl.Name, Format: quantcfg.Format(wl.Format), Out: int(wl.Out), In: int(wl.In), Bias: wl.Bias != nil}
	var err error
	if s.Act, err = quantcfg.ParseActMode(wl.Act); err != nil {
		return PackLayer{}, err
	}
	if s.Scale, err = quantcfg.ParseScaleGran(wl.Scale); err != nil {
		return PackLayer{}, err
	}
	if wl.Act != s.Act.String() || wl.Scale != s.Scale.String() {
		return PackLayer{}, fmt.Errorf("act %q / scale %q are not in canonical spelling", wl.Act, wl.Scale)
	}
	if wl.Codebook != nil || s.Format == quantcfg.Int2 {
		if len(wl.Codebook) != 4 {
			return PackLayer{}, fmt.Errorf("codebook has %d levels, want 4 (and only for format int2)", len(wl.Codebook))
		}
		for i, v := range wl.Codebook {
			if v < -128 || v > 127 {
				return PackLayer{}, fmt.Errorf("codebook[%d] = %d is not an int8", i, v)
			}
			s.Codebook[i] = int8(v)
		}
	}
	return PackLayer{Spec: s, Scales: wl.Scales, Bias: wl.Bias}, nil
}

func tensorInfoFromWire(name, dtype string, shape []uint64) (TensorInfo, error) {
	sh, ok := shapeFromWire(shape)
	if !ok {
		return TensorInfo{}, fmt.Errorf("tensor %q: a dimension exceeds 2^63", name)
	}
	t := TensorInfo{Name: name, DType: DType(dtype), Shape: sh}
	if err := checkTensorInfo(t); err != nil {
		return TensorInfo{}, err
	}
	return t, nil
}

// Layer returns the layer of that name.
func (p *Pack) Layer(name string) (PackLayer, bool) {
	bi, ok := p.index[name]
	if !ok || !bi.layer {
		return PackLayer{}, false
	}
	return p.Layers[bi.i], true
}

// LayerBlob returns a layer's packed weights in place (read-only memory), checking the
// CRC first when the pack was opened with VerifyOnFirstUse.
func (p *Pack) LayerBlob(name string) ([]byte, error) {
	bi, ok := p.index[name]
	if !ok || !bi.layer {
		return nil, fmt.Errorf("%w: pack %s: no layer %q", ErrNotFound, p.Path, name)
	}
	return p.blob(bi.i, "layer", name, p.Layers[bi.i].Blob)
}

// TensorData returns an unquantized tensor and its bytes in place (read-only memory),
// checking the CRC first when the pack was opened with VerifyOnFirstUse.
func (p *Pack) TensorData(name string) (PackTensor, []byte, error) {
	bi, ok := p.index[name]
	if !ok || bi.layer || bi.i < 0 {
		return PackTensor{}, nil, fmt.Errorf("%w: pack %s: no stored tensor %q", ErrNotFound, p.Path, name)
	}
	t := p.Tensors[bi.i]
	b, err := p.blob(len(p.Layers)+bi.i, "tensor", name, t.Blob)
	return t, b, err
}

func (p *Pack) blob(state int, kind, name string, ref BlobRef) ([]byte, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return nil, fmt.Errorf("%w: pack %s: closed", ErrInvalid, p.Path)
	}
	b := p.data[ref.Offset : ref.Offset+ref.Length : ref.Offset+ref.Length]
	if p.verify == VerifyOnFirstUse {
		if err := p.check(state, kind, name, ref); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// check verifies one blob once and remembers the answer.
func (p *Pack) check(state int, kind, name string, ref BlobRef) (err error) {
	switch p.state[state].Load() {
	case blobGood:
		return nil
	case blobBad:
		return p.crcError(kind, name, ref, CRC32C(p.data[ref.Offset:ref.Offset+ref.Length]))
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: %s %q: memory fault while reading its blob [%d, +%d) (was the file truncated while open?): %v", ErrPack, p.Path, kind, name, ref.Offset, ref.Length, r)
		}
	}()
	got := crc32.Update(0, castagnoli, p.data[ref.Offset:ref.Offset+ref.Length])
	if got != ref.CRC32C {
		p.state[state].Store(blobBad)
		return p.crcError(kind, name, ref, got)
	}
	p.state[state].Store(blobGood)
	return nil
}

func (p *Pack) crcError(kind, name string, ref BlobRef, got uint32) error {
	return fmt.Errorf("%w: %s: %s %q: blob [%d, +%d) has CRC-32C %#08x, the header records %#08x: the file is corrupt", ErrChecksum, p.Path, kind, name, ref.Offset, ref.Length, got, ref.CRC32C)
}

// VerifyBlob checks the CRC-32C of one layer or stored tensor.
func (p *Pack) VerifyBlob(name string) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return fmt.Errorf("%w: pack %s: closed", ErrInvalid, p.Path)
	}
	bi, ok := p.index[name]
	switch {
	case !ok || bi.i < 0:
		return fmt.Errorf("%w: pack %s: no layer or stored tensor %q", ErrNotFound, p.Path, name)
	case bi.layer:
		return p.check(bi.i, "layer", name, p.Layers[bi.i].Blob)
	}
	return p.check(len(p.Layers)+bi.i, "tensor", name, p.Tensors[bi.i].Blob)
}

// Verify checks every blob's CRC-32C, spreading the blobs over GOMAXPROCS goroutines, and
// returns every mismatch joined, each naming its layer or tensor.
func (p *Pack) Verify() error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return fmt.Errorf("%w: pack %s: closed", ErrInvalid, p.Path)
	}
	type job struct {
		state      int
		kind, name string
		ref        BlobRef
	}
	jobs := make([]job, 0, len(p.Layers)+len(p.Tensors))
	for i, l := range p.Layers {
		jobs = append(jobs, job{i, "layer", l.Spec.Name, l.Blob})
	}
	for i, t := range p.Tensors {
		jobs = append(jobs, job{len(p.Layers) + i, "tensor", t.Name, t.Blob})
	}
	// Largest first, so the goroutines finish together.
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].ref.Length > jobs[j].ref.Length })
	errs := make([]error, len(jobs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(1, min(runtime.GOMAXPROCS(0), len(jobs))) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) {
					return
				}
				j := jobs[i]
				errs[i] = p.check(j.state, j.kind, j.name, j.ref)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Size is the file's length in bytes.
func (p *Pack) Size() int64 { return int64(len(p.data)) }

// Resident reports how many bytes of the file are mapped into RAM in this process's view
// right now (mincore: pages in the page cache count, whether or not this process touched
// them).
func (p *Pack) Resident() int64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return 0
	}
	return Resident(p.data)
}

// HugeMapped reports how many bytes of the file's mapping the kernel maps with huge pages
// right now (HugeMapped): where the page cache holds the file in large folios and the
// blobs' 2 MiB alignment lines them up, the kernels read them as they read the engine's own
// huge pages; elsewhere through 4 KiB pages, which slowed a decode pass through BitNet 2B by
// up to 1.13x (engine.LoadOptions.Copy).
func (p *Pack) HugeMapped() int64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed || !p.owned {
		return 0
	}
	return HugeMapped(p.data)
}

// Close unmaps the file. Every blob slice handed out becomes invalid; the caller must
// have stopped using them (the engine frees its layers first).
func (p *Pack) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var err error
	if p.owned {
		err = unmapFile(p.data)
	}
	p.data = nil
	if err != nil {
		return fmt.Errorf("pack %s: %w", p.Path, err)
	}
	return nil
}

// decodeHeader decodes the msgpack header (FORMAT.md, "Header") with the bounded reader
// (internal/mpread): required keys must be present, no key may repeat, unknown keys are
// skipped (later minor versions add keys), optional keys may also be nil, and nothing may
// follow the map.
func decodeHeader(b []byte) (*wireHeader, error) {
	r := mpread.New(b, mpread.Limits{})
	h := &wireHeader{}
	err := r.Fields("header", []string{"model", "layout", "align", "layers", "tensors"}, func(key string) (known bool, err error) {
		switch key {
		case "model":
			h.Model, err = r.Str(mpread.NoLimit)
		case "layout":
			h.Layout, err = r.Str(mpread.NoLimit)
		case "created_by":
			if !r.Nil() {
				h.CreatedBy, err = r.Str(mpread.NoLimit)
			}
		case "align":
			h.Align, err = r.Uint()
		case "metadata":
			if !r.Nil() {
				h.Metadata, err = decodeStrMap(r)
			}
		case "layers":
			var n int
			if n, err = r.ArrayLen(minLayerBytes, mpread.NoLimit); err != nil {
				return true, err
			}
			h.Layers = make([]wireLayer, n)
			for i := range h.Layers {
				if err = decodeLayer(r, &h.Layers[i]); err != nil {
					return true, fmt.Errorf("layers[%d]: %w", i, err)
				}
			}
		case "tensors":
			var n int
			if n, err = r.ArrayLen(minTensorBytes, mpread.NoLimit); err != nil {
				return true, err
			}
			h.Tensors = make([]wireTensor, n)
			for i := range h.Tensors {
				if err = decodeTensor(r, &h.Tensors[i]); err != nil {
					return true, fmt.Errorf("tensors[%d]: %w", i, err)
				}
			}
		case "external":
			if r.Nil() {
				return true, nil
			}
			var n int
			if n, err = r.ArrayLen(minExternalBytes, mpread.NoLimit); err != nil {
				return true, err
			}
			h.External = make([]wireExternal, n)
			for i := range h.External {
				e := &h.External[i]
				err = r.Fields("external tensor", []string{"name", "dtype", "shape"}, func(key string) (bool, error) {
					var err error
					switch key {
					case "name":
						e.Name, err = r.Str(mpread.NoLimit)
					case "dtype":
						e.DType, err = r.Str(mpread.NoLimit)
					case "shape":
						e.Shape, err = r.Uint64s(mpread.NoLimit)
					default:
						return false, nil
					}
					return true, err
				})
				if err != nil {
					return true, fmt.Errorf("external[%d]: %w", i, err)
				}
			}
		default:
			return false, nil
		}
		return true, err
	})
	if err != nil {
		return nil, err
	}
	if r.Remaining() != 0 {
		return nil, r.Errorf("%d bytes follow the header's msgpack map", r.Remaining())
	}
	return h, nil
}

// The smallest encodings of a layer, a tensor and an external tensor (their required keys
// with empty or one-byte values): array lengths are checked against them.
const (
	minLayerBytes    = 1 + 5 + 7 + 4 + 3 + 4 + 6 + 7 + 7 + 7 + 7 + 10
	minTensorBytes   = 1 + 5 + 6 + 6 + 7 + 7 + 7
	minExternalBytes = 1 + 5 + 6 + 6
)

func decodeLayer(r *mpread.Reader, l *wireLayer) error {
	return r.Fields("layer", []string{"name", "format", "out", "in", "act", "scale", "scales", "offset", "length", "crc32c"}, func(key string) (bool, error) {
		var err error
		switch key {
		case "name":
			l.Name, err = r.Str(mpread.NoLimit)
		case "format":
			l.Format, err = r.Str(mpread.NoLimit)
		case "out":
			l.Out, err = r.Uint()
		case "in":
			l.In, err = r.Uint()
		case "act":
			l.Act, err = r.Str(mpread.NoLimit)
		case "scale":
			l.Scale, err = r.Str(mpread.NoLimit)
		case "codebook":
			if r.Nil() {
				return true, nil
			}
			var n int
			if n, err = r.ArrayLen(1, mpread.NoLimit); err != nil {
				return true, err
			}
			l.Codebook = make([]int, n)
			for i := range l.Codebook {
				var v int64
				if v, err = r.Int(); err != nil {
					return true, err
				}
				l.Codebook[i] = int(max(min(v, 1<<20), -1<<20))
			}
		case "scales":
			l.Scales, err = r.Float32s(mpread.NoLimit)
		case "bias":
			if !r.Nil() {
				l.Bias, err = r.Float32s(mpread.NoLimit)
			}
		case "offset":
			l.Offset, err = r.Uint()
		case "length":
			l.Length, err = r.Uint()
		case "crc32c":
			var v uint64
			v, err = r.UintMax("crc32c", 0xffffffff)
			l.CRC32C = uint32(v)
		default:
			return false, nil
		}
		return true, err
	})
}

func decodeTensor(r *mpread.Reader, t *wireTensor) error {
	return r.Fields("tensor", []string{"name", "dtype", "shape", "offset", "length", "crc32c"}, func(key string) (bool, error) {
		var err error
		switch key {
		case "name":
			t.Name, err = r.Str(mpread.NoLimit)
		case "dtype":
			t.DType, err = r.Str(mpread.NoLimit)
		case "shape":
			t.Shape, err = r.Uint64s(mpread.NoLimit)
		case "offset":
			t.Offset, err = r.Uint()
		case "length":
			t.Length, err = r.Uint()
		case "crc32c":
			var v uint64
			v, err = r.UintMax("crc32c", 0xffffffff)
			t.CRC32C = uint32(v)
		default:
			return false, nil
		}
		return true, err
	})
}

// decodeStrMap reads the metadata map of strings to strings; a repeated key is an error.
func decodeStrMap(r *mpread.Reader) (map[string]string, error) {
	n, err := r.MapLen(mpread.NoLimit)
	if err != nil {
		return nil, err
	}
	m := make(map[string]string, min(n, 64)) // n is bounded by the input, not small
	for range n {
		k, err := r.Str(mpread.NoLimit)
		if err != nil {
			return nil, err
		}
		if _, dup := m[k]; dup {
			return nil, r.Errorf("metadata key %q appears twice", k)
		}
		if m[k], err = r.Str(mpread.NoLimit); err != nil {
			return nil, fmt.Errorf("metadata %q: %w", k, err)
		}
	}
	return m, nil
}
