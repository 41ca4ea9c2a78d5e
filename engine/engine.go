package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"bitgo/kernels"
	"bitgo/paged"
	"bitgo/quantcfg"
)

// ID identifies a registered layer. IDs are never reused within one Engine.
type ID uint64

// Spec describes a layer to register: its shape and settings, and its weights, given
// either as logical weights (the engine packs them) or as an already packed blob.
type Spec struct {
	quantcfg.LayerSpec
	// Weights are logical weights (see kernels.Weights); the engine packs them into
	// memory it owns.
	Weights *kernels.Weights
	// Packed is a blob already in the format's layout. Unless Borrow is set it is copied.
	Packed []byte
	// Borrow uses Packed in place (for example a read-only pack-file mapping). The caller
	// keeps it valid until Release is called, after Free and after every call in flight.
	Borrow bool
	// Trusted skips decoding Packed to check its codes (pack files carry checksums; a blob
	// from a client is never trusted).
	Trusted bool
	// Release, if set, is called once when the engine no longer reads Packed.
	Release func()
	// Scales are the weight scales (Spec.NumScales() of them); Bias is nil or Out values.
	Scales []float32
	Bias   []float32
}

// Call describes one finished Forward, for metrics (Config.Observe).
type Call struct {
	Layer       string
	Format      quantcfg.Format
	Kernel      string
	N           int
	WeightBytes int
	Duration    time.Duration
	Err         error
}

// Runner runs a parallel region over row blocks: fn is called with disjoint ranges
// [lo, hi) that together cover [0, blocks), possibly concurrently, and Split returns when
// all calls have returned. Split must be safe for concurrent callers. sched.Pool is one.
type Runner interface {
	Threads() int
	Split(class string, blocks int, fn func(worker, lo, hi int))
	Close() error
}

// Backend runs layers on another device (one GPU). The engine offers it every layer it
// registers; layers it declines run on the CPU kernels.
type Backend interface {
	// Name is the device's name for logs and stats ("xe2:0").
	Name() string
	// Accepts says whether the backend runs layers of this spec, and if not, why.
	Accepts(spec quantcfg.LayerSpec) (bool, string)
	// Register takes a layer in package kernels' packed layout; the backend keeps its own
	// copy (the blob may be released once Register returns).
	Register(spec quantcfg.LayerSpec, blob []byte, scales, bias []float32) (BackendLayer, error)
}

// BackendLayer is one layer resident on a Backend. Forward has Engine.Forward's contract
// (arguments already checked by the engine).
type BackendLayer interface {
	Forward(dt quantcfg.DType, x []byte, n int, out []byte) error
	Free() error
}

// Config configures an Engine.
type Config struct {
	// Backend, if set, runs every layer it accepts (bitd serve --device xe2:N).
	Backend Backend
	// Runner runs kernels in parallel; nil uses a plain goroutine split over Threads.
	Runner Runner
	// Threads for the default runner; 0 means GOMAXPROCS.
	Threads int
	// Observe, if set, is called after every Forward (from the calling goroutine).
	Observe func(Call)
	// Logger for registration and freeing; nil uses slog.Default().
	Logger *slog.Logger
}

// Engine holds layers by id and runs them. All methods are safe for concurrent use.
type Engine struct {
	cfg    Config
	runner Runner
	log    *slog.Logger

	mu     sync.RWMutex
	layers map[ID]*layer
	names  map[string]ID
	nextID ID
	closed bool

	calls, tokens, errs atomic.Uint64
	busyNanos           atomic.Int64
	weightBytes         atomic.Int64

	ctxPool sync.Pool
	splitFn kernels.Splitter // e.splitter, made once
	arena   *paged.Arena     // owned blobs
}

type layer struct {
	id      ID
	k       *kernels.Layer
	refs    atomic.Int64 // 1 while registered, +1 per call in flight
	release func()
	block   *paged.Block // the arena block holding an owned blob (nil: borrowed)
	dev     BackendLayer // non-nil: the layer runs on the backend

	kmu     sync.Mutex
	kernels map[int]kernels.Kernel // by token count
}

// callCtx holds one call's scratch buffers; pooled.
type callCtx struct {
	acts kernels.Acts
	x    []float32
	out  []float32
	// A Forward's conversions (decode, encode): its dtype, wire buffers and widths, and the
	// two as method values made once, so that splitting them over the runner allocates
	// nothing.
	dt       quantcfg.DType
	wx, wout []byte
	in, o    int
	dec, enc func(w, lo, hi int)
}

func newCallCtx() *callCtx {
	c := new(callCtx)
	c.dec, c.enc = c.decode, c.encode
	return c
}

// decode widens tokens [lo, hi) of the wire input into x.
func (c *callCtx) decode(_, lo, hi int) {
	s := c.dt.Size()
	decode(c.dt, c.wx[lo*c.in*s:hi*c.in*s], c.x[lo*c.in:hi*c.in])
}

// encode writes tokens [lo, hi) of out to the wire output.
func (c *callCtx) encode(_, lo, hi int) {
	s := c.dt.Size()
	encode(c.dt, c.out[lo*c.o:hi*c.o], c.wout[lo*c.o*s:hi*c.o*s])
}

// New returns an engine.
func New(cfg Config) (*Engine, error) {
	if cfg.Threads < 0 {
		return nil, fmt.Errorf("%w: threads = %d: must be >= 0 (0 = all)", ErrBadRequest, cfg.Threads)
	}
	e := &Engine{cfg: cfg, runner: cfg.Runner, log: cfg.Logger, layers: map[ID]*layer{}, names: map[string]ID{},
		arena: paged.NewArena(paged.ArenaOptions{Name: "engine weights"})}
	if e.log == nil {
		e.log = slog.Default()
	}
	if e.runner == nil {
		n := cfg.Threads
		if n == 0 {
			n = runtime.GOMAXPROCS(0)
		}
		e.runner = goRunner{n}
	}
	e.ctxPool.New = func() any { return newCallCtx() }
	e.splitFn = e.splitter
	return e, nil
}

// Threads is the parallelism of the runner.
func (e *Engine) Threads() int { return e.runner.Threads() }

// Register checks and adds a layer and returns its id. Names, when given, are unique.
func (e *Engine) Register(s Spec) (ID, error) {
	spec := s.LayerSpec.WithDefaults()
	if err := spec.Validate(); err != nil {
		return 0, err
	}
	name := spec.Name
	if (s.Weights == nil) == (s.Packed == nil) {
		return 0, fmt.Errorf("layer %s: %w: give either logical Weights or a Packed blob", name, ErrBadRequest)
	}
	lay, err := kernels.NewLayout(spec.Format, spec.Out, spec.In)
	if err != nil {
		return 0, fmt.Errorf("layer %s: %w", name, err)
	}
	blob := s.Packed
	// (a copy of a blob of the wrong size is not made: the checks below refuse it)
	owned := s.Weights != nil || !s.Borrow && len(s.Packed) == lay.Bytes()
	var block *paged.Block
	if owned {
		var err error
		if blob, block, err = e.allocBlob(lay.Bytes()); err != nil {
			return 0, fmt.Errorf("layer %s: %w", name, err)
		}
		defer func() { // freed unless the layer took it
			if block != nil {
				_ = block.Free()
			}
		}()
		switch {
		case s.Weights != nil:
			if err := kernels.Pack(spec.Format, spec.Out, spec.In, *s.Weights, blob); err != nil {
				return 0, fmt.Errorf("layer %s: %w", name, err)
			}
		default:
			copy(blob, s.Packed)
		}
		if block != nil { // written once: a stray write now faults at the writer
			if err := block.ReadOnly(); err != nil {
				return 0, fmt.Errorf("layer %s: %w", name, err)
			}
		}
	}
	if s.Packed != nil && !s.Trusted {
		if err := kernels.CheckBlob(lay, blob); err != nil {
			return 0, fmt.Errorf("layer %s: packed weights: %w", name, err)
		}
	}
	kl, err := kernels.NewLayer(spec, blob, append([]float32(nil), s.Scales...), cloneOrNil(s.Bias))
	if err != nil {
		return 0, err
	}
	l := &layer{k: kl, release: s.Release, kernels: map[int]kernels.Kernel{}}
	l.refs.Store(1)
	if b := e.cfg.Backend; b != nil {
		if ok, why := b.Accepts(spec); !ok {
			e.log.Info("layer runs on the CPU", "name", name, "device", b.Name(), "reason", why)
		} else {
			dl, err := b.Register(spec, blob, kl.Scales, kl.Bias)
			if err != nil {
				return 0, fmt.Errorf("layer %s: device %s: %w", name, b.Name(), err)
			}
			l.dev = dl
			// The device holds its own copy; the CPU blob is not read again.
			if s.Release != nil {
				s.Release()
				l.release = nil
			}
			kl.Data, blob = nil, nil
			if block != nil {
				_ = block.Free()
				block = nil
			}
		}
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return 0, ErrClosed
	}
	if name != "" {
		if _, dup := e.names[name]; dup {
			return 0, fmt.Errorf("layer %s: %w", name, ErrExists)
		}
	}
	e.nextID++
	l.id = e.nextID
	l.block, block = block, nil
	e.layers[l.id] = l
	if name != "" {
		e.names[name] = l.id
	}
	e.weightBytes.Add(int64(len(blob)))
	e.log.Debug("layer registered", "id", l.id, "name", name, "format", spec.Format, "out", spec.Out, "in", spec.In, "bytes", len(blob))
	return l.id, nil
}

// allocBlob returns n bytes for a blob the engine owns, from its arena: packed side by side
// with the other blobs in huge pages (paged.Arena), a small blob's bytes and a large one's
// last ones alike. The Go heap's 4 KiB pages cost a decode pass through BitNet b1.58 2B
// (one thread, the 2-vCPU Zen 4 guest) 1.11-1.13x its time for tl2 and 1.04-1.05x for
// i2s: a 2560x2560 tl2 call took 62-65 us there against 47-48 in huge pages.
func (e *Engine) allocBlob(n int) ([]byte, *paged.Block, error) {
	b, err := e.arena.Alloc(n)
	if err != nil {
		return nil, nil, fmt.Errorf("packed weights of %d bytes: %w", n, err)
	}
	return b.Bytes(), b, nil
}

func cloneOrNil(b []float32) []float32 {
	if b == nil {
		return nil
	}
	return append([]float32(nil), b...)
}

// Lookup returns the id and spec of the layer registered under name.
func (e *Engine) Lookup(name string) (ID, quantcfg.LayerSpec, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	id, ok := e.names[name]
	if !ok {
		return 0, quantcfg.LayerSpec{}, fmt.Errorf("layer %q: %w", name, ErrNoLayer)
	}
	return id, e.layers[id].k.Spec, nil
}

// Spec returns the spec of layer id.
func (e *Engine) Spec(id ID) (quantcfg.LayerSpec, error) {
	l, err := e.acquire(id)
	if err != nil {
		return quantcfg.LayerSpec{}, err
	}
	defer e.releaseRef(l)
	return l.k.Spec, nil
}

// Free removes a layer. Calls in flight finish first; its memory is released after them.
func (e *Engine) Free(id ID) error {
	e.mu.Lock()
	l, ok := e.layers[id]
	if ok {
		delete(e.layers, id)
		if e.names[l.k.Spec.Name] == id {
			delete(e.names, l.k.Spec.Name)
		}
	}
	e.mu.Unlock()
	if !ok {
		return fmt.Errorf("layer id %d: %w", id, ErrNoLayer)
	}
	e.releaseRef(l)
	return nil
}

func (e *Engine) acquire(id ID) (*layer, error) {
	e.mu.RLock()
	l, ok := e.layers[id]
	if ok {
		l.refs.Add(1)
	}
	e.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("layer id %d: %w", id, ErrNoLayer)
	}
	return l, nil
}

func (e *Engine) releaseRef(l *layer) {
	if l.refs.Add(-1) != 0 {
		return
	}
	if l.dev != nil {
		if err := l.dev.Free(); err != nil {
			e.log.Error("engine: freeing a device layer", "name", l.k.Spec.Name, "err", err)
		}
	}
	e.weightBytes.Add(-int64(len(l.k.Data)))
	if l.block != nil {
		if err := l.block.Free(); err != nil {
			e.log.Error("engine: freeing a layer's weights", "name", l.k.Spec.Name, "err", err)
		}
	}
	if l.release != nil {
		l.release()
	}
	e.log.Debug("layer freed", "id", l.id, "name", l.k.Spec.Name)
}

// kernelFor returns (and caches) the kernel that runs l with n tokens.
func (l *layer) kernelFor(n int) (kernels.Kernel, error) {
	l.kmu.Lock()
	defer l.kmu.Unlock()
	if k, ok := l.kernels[n]; ok {
		return k, nil
	}
	k, err := kernels.Select(l.k, n)
	if err != nil {
		return nil, err
	}
	if len(l.kernels) < 64 {
		l.kernels[n] = k
	}
	return k, nil
}

// Forward runs layer id on n tokens. x holds n*In values of dtype dt, row-major; out
// receives n*Out values of the same dtype. Buffers may be unaligned (shared memory).
func (e *Engine) Forward(id ID, x []byte, dt quantcfg.DType, n int, out []byte) error {
	l, err := e.acquire(id)
	if err != nil {
		return err
	}
	defer e.releaseRef(l)
	spec := l.k.Spec
	size := dt.Size()
	if size == 0 {
		return e.fail(l, n, fmt.Errorf("layer %s: %w: dtype %q: allowed f32, bf16", spec.Name, ErrBadRequest, dt))
	}
	if n < 1 {
		return e.fail(l, n, fmt.Errorf("layer %s: %w: %d tokens: need at least 1", spec.Name, ErrBadRequest, n))
	}
	if len(x) != n*spec.In*size {
		return e.fail(l, n, fmt.Errorf("layer %s: %w: input has %d bytes, want %d tokens x %d in_features x %d bytes (%s) = %d",
			spec.Name, ErrBadRequest, len(x), n, spec.In, size, dt, n*spec.In*size))
	}
	if len(out) != n*spec.Out*size {
		return e.fail(l, n, fmt.Errorf("layer %s: %w: output has %d bytes, want %d tokens x %d out_features x %d bytes (%s) = %d",
			spec.Name, ErrBadRequest, len(out), n, spec.Out, size, dt, n*spec.Out*size))
	}
	if l.dev != nil {
		return e.runDevice(l, dt, x, n, out)
	}
	c := e.ctxPool.Get().(*callCtx)
	defer e.ctxPool.Put(c)
	c.dt, c.wx, c.wout, c.in, c.o = dt, x, out, spec.In, spec.Out
	defer func() { c.wx, c.wout = nil, nil }() // (the pool must not keep the caller's buffers)
	c.x = resize(c.x, n*spec.In)
	if err := e.parallel(n, spec.In, c.dec); err != nil {
		return e.fail(l, n, fmt.Errorf("layer %s: %w: decoding the input: %v", spec.Name, ErrInternal, err))
	}
	c.out = resize(c.out, n*spec.Out)
	if err := e.run(l, c, c.x, n, c.out); err != nil {
		return err
	}
	if err := e.parallel(n, spec.Out, c.enc); err != nil {
		return e.fail(l, n, fmt.Errorf("layer %s: %w: encoding the output: %v", spec.Name, ErrInternal, err))
	}
	return nil
}

// parallel runs fn(w, lo, hi) over the n tokens of per values each, split over the
// runner's workers where the call is large (kernels.SplitTokens); a panic comes back as an
// error.
func (e *Engine) parallel(n, per int, fn func(w, lo, hi int)) error {
	return guard(func() { kernels.SplitTokens(e.splitFn, "convert", n, per, fn) })
}

// guard runs fn, turning a panic (in a kernel, or the runner's own failure) into an error:
// one bad call must not take the daemon down.
func guard(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	fn()
	return nil
}

// ForwardF32 is Forward for float32 slices.
func (e *Engine) ForwardF32(id ID, x []float32, n int, out []float32) error {
	l, err := e.acquire(id)
	if err != nil {
		return err
	}
	defer e.releaseRef(l)
	spec := l.k.Spec
	if n < 1 || len(x) != n*spec.In || len(out) != n*spec.Out {
		return e.fail(l, n, fmt.Errorf("layer %s: %w: n=%d, %d inputs (want %d), %d outputs (want %d)",
			spec.Name, ErrBadRequest, n, len(x), n*spec.In, len(out), n*spec.Out))
	}
	if l.dev != nil {
		xb, ob := unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x)), unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), 4*len(out))
		return e.runDevice(l, quantcfg.DTypeF32, xb, n, ob)
	}
	c := e.ctxPool.Get().(*callCtx)
	defer e.ctxPool.Put(c)
	return e.run(l, c, x, n, out) // (Quantize reads x before a kernel writes out: they may be one buffer)
}

// run runs layer l on the n tokens x into out with c's buffers.
func (e *Engine) run(l *layer, c *callCtx, x []float32, n int, out []float32) error {
	start := time.Now()
	if err := e.quantize(l, c, x, n); err != nil {
		return e.fail(l, n, err)
	}
	kern, err := l.kernelFor(n)
	if err != nil {
		return e.fail(l, n, err)
	}
	kern.Prepare(l.k, &c.acts)
	if err := e.split(kern, l.k, &c.acts, out); err != nil {
		return e.fail(l, n, fmt.Errorf("layer %s: %w: kernel %s: %v", l.k.Spec.Name, ErrInternal, kern.Name(), err))
	}
	d := time.Since(start)
	e.calls.Add(1)
	e.tokens.Add(uint64(n))
	e.busyNanos.Add(int64(d))
	if e.cfg.Observe != nil {
		e.cfg.Observe(Call{Layer: l.k.Spec.Name, Format: l.k.Spec.Format, Kernel: kern.Name(), N: n, WeightBytes: len(l.k.Data), Duration: d})
	}
	return nil
}

// runDevice runs a call on the backend.
func (e *Engine) runDevice(l *layer, dt quantcfg.DType, x []byte, n int, out []byte) error {
	start := time.Now()
	if err := l.dev.Forward(dt, x, n, out); err != nil {
		return e.fail(l, n, fmt.Errorf("layer %s: device %s: %w", l.k.Spec.Name, e.cfg.Backend.Name(), err))
	}
	d := time.Since(start)
	e.calls.Add(1)
	e.tokens.Add(uint64(n))
	e.busyNanos.Add(int64(d))
	if e.cfg.Observe != nil {
		lay := l.k.Layout
		e.cfg.Observe(Call{Layer: l.k.Spec.Name, Format: l.k.Spec.Format, Kernel: e.cfg.Backend.Name(), N: n, WeightBytes: lay.Bytes(), Duration: d})
	}
	return nil
}

// quantize quantizes the call's activations, its tokens split over the runner where the
// call is large; a panic comes back as an error.
func (e *Engine) quantize(l *layer, c *callCtx, x []float32, n int) error {
	var qerr error // the quantizer's own error (bad input), passed through as it is
	if err := guard(func() { qerr = l.k.QuantizeSplit(x, n, &c.acts, e.splitFn) }); err != nil {
		return fmt.Errorf("layer %s: %w: quantizing the input: %v", l.k.Spec.Name, ErrInternal, err)
	}
	return qerr
}

// split runs the kernel over every row block on the runner, turning a panic (in a kernel,
// or the runner's own failure) into an error: one bad call must not take the daemon down.
func (e *Engine) split(kern kernels.Kernel, l *kernels.Layer, a *kernels.Acts, out []float32) error {
	err := guard(func() { kernels.RunSplit(kern, l, a, out, e.runner.Threads(), e.splitFn) })
	if err != nil {
		e.log.Error("engine: kernel failed", "layer", l.Spec.Name, "kernel", kern.Name(), "panic", err)
	}
	return err
}

// onceRunner is a Runner that can also split without stealing (sched.Runner).
type onceRunner interface {
	SplitOnce(class string, blocks int, fn func(worker, lo, hi int))
}

// splitter is the runner as a kernels.Splitter: once goes to SplitOnce where the runner has
// it (a runner without stealing has one range per worker anyway).
func (e *Engine) splitter(class string, units int, once bool, fn func(w, lo, hi int)) {
	if o, ok := e.runner.(onceRunner); ok && once {
		o.SplitOnce(class, units, fn)
		return
	}
	e.runner.Split(class, units, fn)
}

func (e *Engine) fail(l *layer, n int, err error) error {
	e.errs.Add(1)
	if e.cfg.Observe != nil {
		e.cfg.Observe(Call{Layer: l.k.Spec.Name, Format: l.k.Spec.Format, N: n, Err: err})
	}
	return err
}

// Stats is a snapshot of the engine's counters.
type Stats struct {
	Layers      int           `msgpack:"layers" json:"layers"`
	WeightBytes int64         `msgpack:"weight_bytes" json:"weight_bytes"`
	Calls       uint64        `msgpack:"calls" json:"calls"`
	Tokens      uint64        `msgpack:"tokens" json:"tokens"`
	Errors      uint64        `msgpack:"errors" json:"errors"`
	Busy        time.Duration `msgpack:"busy_ns" json:"busy_ns"`
	Threads     int           `msgpack:"threads" json:"threads"`
}

// HugePageBytes reports how many bytes of the engine's own weight memory (uploaded blobs,
// copied packs: its arena) the kernel maps with huge pages now, or -1 when it cannot tell.
// Packs used in place are not counted (LoadedPack.HugeMapped).
func (e *Engine) HugePageBytes() int64 { return e.arena.HugeMapped() }

// Stats returns the counters.
func (e *Engine) Stats() Stats {
	e.mu.RLock()
	n := len(e.layers)
	e.mu.RUnlock()
	return Stats{Layers: n, WeightBytes: e.weightBytes.Load(), Calls: e.calls.Load(), Tokens: e.tokens.Load(),
		Errors: e.errs.Load(), Busy: time.Duration(e.busyNanos.Load()), Threads: e.runner.Threads()}
}

// Close frees every layer and stops the runner. Calls in flight finish first.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	var ids []ID
	for id := range e.layers {
		ids = append(ids, id)
	}
	e.mu.Unlock()
	var errs []error
	for _, id := range ids {
		if err := e.Free(id); err != nil && !errors.Is(err, ErrNoLayer) {
			errs = append(errs, err)
		}
	}
	if e.cfg.Runner == nil {
		errs = append(errs, e.runner.Close())
	}
	return errors.Join(errs...)
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// decode widens x (dtype dt, little-endian, any alignment) into dst.
func decode(dt quantcfg.DType, x []byte, dst []float32) {
	if dt == quantcfg.DTypeF32 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*len(dst)), x)
		return
	}
	kernels.DecodeBF16(dst, x)
}

// encode writes src into out in dtype dt (bf16: rounded to nearest even).
func encode(dt quantcfg.DType, src []float32, out []byte) {
	if dt == quantcfg.DTypeF32 {
		copy(out, unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), 4*len(src)))
		return
	}
	kernels.EncodeBF16(out, src)
}

// goRunner is the default Runner: an equal static split over goroutines.
type goRunner struct{ n int }

func (r goRunner) Threads() int { return r.n }

func (r goRunner) Split(_ string, blocks int, fn func(worker, lo, hi int)) {
	parts := min(r.n, blocks)
	if parts <= 1 {
		fn(0, 0, blocks)
		return
	}
	var wg sync.WaitGroup
	for w := 1; w < parts; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			fn(w, blocks*w/parts, blocks*(w+1)/parts)
		}(w)
	}
	fn(0, 0, blocks/parts)
	wg.Wait()
}

func (goRunner) Close() error { return nil }
