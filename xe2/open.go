package xe2

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"unsafe"

	"bitgo/kernels"
	"bitgo/paged"
	"bitgo/quantcfg"
)

// Device is one opened OpenCL device: a context, an in-order queue (with profiling), the
// programs built for it, and scratch buffers shared by its layers. Its methods are safe
// for concurrent use; calls run one at a time on the device's queue.
type Device struct {
	Info DeviceInfo
	opts Options

	mu     sync.Mutex
	ctx    handle
	queue  handle
	progs  map[string]handle
	kerns  map[string]handle
	bufs   map[string]*scratch
	dummy  handle
	table  *TuneTable
	layers int
	closed bool
	stats  Stats

	// HostAlloc provides page-aligned host memory for weights that an integrated GPU uses
	// in place (CL_MEM_USE_HOST_PTR); nil uses a sealed memfd region from package paged.
	// The engine may set it to its arena's allocator before registering layers.
	HostAlloc func(size int) (mem []byte, free func() error, err error)
}

// Stats counts program builds and binary cache hits.
type Stats struct {
	Builds    int `json:"builds"`
	CacheHits int `json:"cache_hits"`
}

type scratch struct {
	h    handle
	size int
}

// Open opens usable device index (the N of --device xe2:N), runs the known-answer
// kernels and loads the tune table named by opts. A device that fails the float or GEMM
// check is refused (ErrMismatch); a failed DPAS check only turns DPAS off.
func Open(index int, opts Options) (*Device, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	rep := Probe(opts, false)
	if !rep.Available {
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, rep.Reason)
	}
	usable := rep.Usable()
	if index < 0 || index >= len(usable) {
		return nil, fmt.Errorf("%w: xe2:%d: %d usable device(s); %s", ErrNoDevice, index, len(usable), summarize(rep))
	}
	d, err := openInfo(usable[index], opts)
	if err != nil {
		return nil, err
	}
	if err := d.knownAnswer(); err != nil {
		d.Close()
		return nil, fmt.Errorf("xe2:%d (%s) refused: %w", index, d.Info.Name, err)
	}
	if opts.TunePath != "" {
		t, err := LoadTuneTable(opts.TunePath)
		if err != nil {
			d.Close()
			return nil, err
		}
		d.table = t
	}
	return d, nil
}

// summarize lists every device with the reasons it is not used.
func summarize(rep Report) string {
	if len(rep.Devices) == 0 {
		return rep.Reason
	}
	var b strings.Builder
	for i, dv := range rep.Devices {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%q (%s)", dv.Name, dv.Type)
		if dv.Usable {
			fmt.Fprintf(&b, " is xe2:%d", dv.Index)
		} else {
			fmt.Fprintf(&b, " not used: %s", strings.Join(dv.Reasons, ", "))
		}
	}
	return b.String()
}

func openInfo(info DeviceInfo, opts Options) (*Device, error) {
	ctx, err := clCreateContext(info.device)
	if err != nil {
		return nil, fmt.Errorf("device %s: %w", info.Name, err)
	}
	q, err := clCreateQueue(ctx, info.device, true)
	if err != nil {
		clReleaseContext(ctx)
		return nil, fmt.Errorf("device %s: %w", info.Name, err)
	}
	d := &Device{Info: info, opts: opts, ctx: ctx, queue: q,
		progs: map[string]handle{}, kerns: map[string]handle{}, bufs: map[string]*scratch{}}
	d.dummy, err = clCreateBuffer(ctx, clMemReadWrite, 64, nil)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("device %s: %w", info.Name, err)
	}
	return d, nil
}

// Close releases the device's programs, buffers, queue and context. Layers must be freed
// first; Close refuses while any is registered.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	if d.layers > 0 {
		return fmt.Errorf("%w: device %s still has %d registered layer(s); free them first", ErrInvalid, d.Info.Name, d.layers)
	}
	d.closed = true
	for _, k := range d.kerns {
		clReleaseKernel(k)
	}
	for _, p := range d.progs {
		clReleaseProgram(p)
	}
	for _, b := range d.bufs {
		clReleaseMem(b.h)
	}
	if d.dummy != 0 {
		clReleaseMem(d.dummy)
	}
	if d.queue != 0 {
		clReleaseQueue(d.queue)
	}
	if d.ctx != 0 {
		clReleaseContext(d.ctx)
	}
	return nil
}

// Stats returns build and cache counters.
func (d *Device) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// Memory flags (cl.h).
const (
	clMemReadWrite   = 1 << 0
	clMemReadOnly    = 1 << 2
	clMemUseHostPtr  = 1 << 3
	clMemCopyHostPtr = 1 << 5
)

// kernel returns a kernel object of a program, creating it once. The lock is held.
func (d *Device) kernel(file, name, extra string) (handle, error) {
	key := file + "|" + name + "|" + extra
	if k, ok := d.kerns[key]; ok {
		return k, nil
	}
	p, err := d.program(file, name, extra)
	if err != nil {
		return 0, err
	}
	k, err := clCreateKernel(p, name)
	if err != nil {
		return 0, fmt.Errorf("%s in %s: %w", name, file, err)
	}
	d.kerns[key] = k
	return k, nil
}

// buf returns scratch buffer name with at least size bytes. The lock is held.
func (d *Device) buf(name string, size int) (handle, error) {
	size = max(size, 64)
	if b, ok := d.bufs[name]; ok && b.size >= size {
		return b.h, nil
	}
	if b, ok := d.bufs[name]; ok {
		clReleaseMem(b.h)
		delete(d.bufs, name)
	}
	size = (size + 4095) &^ 4095
	h, err := clCreateBuffer(d.ctx, clMemReadWrite, size, nil)
	if err != nil {
		return 0, fmt.Errorf("scratch buffer %s (%d bytes): %w", name, size, err)
	}
	d.bufs[name] = &scratch{h, size}
	return h, nil
}

// uploadReadOnly makes a read-only device buffer holding data (a copy).
func (d *Device) uploadReadOnly(data []byte) (handle, error) {
	if len(data) == 0 {
		data = make([]byte, 4)
	}
	h, err := clCreateBuffer(d.ctx, clMemReadOnly, len(data), nil)
	if err != nil {
		return 0, err
	}
	if err := clWrite(d.queue, h, 0, data); err != nil {
		clReleaseMem(h)
		return 0, err
	}
	return h, nil
}

// zeroCopy wraps host memory outside the Go heap (page-aligned) as a device buffer
// the GPU reads in place.
func (d *Device) zeroCopy(mem []byte) (handle, error) {
	return clCreateBuffer(d.ctx, clMemReadOnly|clMemUseHostPtr, len(mem), unsafe.Pointer(unsafe.SliceData(mem)))
}

func (d *Device) hostAlloc(size int) ([]byte, func() error, error) {
	if d.HostAlloc != nil {
		return d.HostAlloc(size)
	}
	r, err := paged.NewRegion("bitgo-xe2-weights", size)
	if err != nil {
		return nil, nil, err
	}
	return r.Bytes()[:size], r.Close, nil
}

// knownAnswer runs the probe's known-answer kernels: the float32 steps on edge values,
// the DPAS lane mapping (native devices), and a small GEMM against the Go reference.
func (d *Device) knownAnswer() error {
	if err := d.katFloat(); err != nil {
		d.Info.KnownAnswer = "failed: " + err.Error()
		return err
	}
	if d.Info.native && d.Info.dpas {
		if err := d.katDPAS(); err != nil {
			d.Info.dpas = false
			d.Info.Path = pathName(d.Info.native, false)
			d.Info.Reasons = append(d.Info.Reasons, "int2 DPAS refused by the known-answer kernel ("+err.Error()+"): converting in registers")
		}
	}
	if err := d.katGEMM(); err != nil {
		d.Info.KnownAnswer = "failed: " + err.Error()
		return err
	}
	d.Info.KnownAnswer = "ok"
	return nil
}

// knownAnswerCheck runs the known-answer kernels for Probe and records the outcome.
func knownAnswerCheck(info *DeviceInfo, opts Options) {
	d, err := openInfo(*info, opts)
	if err != nil {
		info.Usable, info.Path = false, ""
		info.Reasons = append(info.Reasons, err.Error())
		return
	}
	defer d.Close()
	if err := d.knownAnswer(); err != nil {
		info.Usable, info.Path = false, ""
		info.Reasons = append(info.Reasons, "known-answer kernel: "+err.Error())
	}
	info.KnownAnswer, info.dpas, info.Path, info.Reasons = d.Info.KnownAnswer, d.Info.dpas, d.Info.Path, d.Info.Reasons
	if !info.Usable {
		info.Path = ""
	}
}

// katPairs are (a, b) pairs for the float check: ties, denormals, extremes, randoms.
func katPairs() (a, b []float32) {
	add := func(x, y float32) { a, b = append(a, x), append(b, y) }
	f := math.Float32frombits
	add(2.5, 1)                           // quantization tie -> 2
	add(-3.5, 1)                          // tie -> -4
	add(1, 127)                           // 127
	add(-1.0000001, 128)                  // clamps at -128
	add(1e-38, 1e5)                       // denormal quotient
	add(f(0x00000001), 0.5)               // smallest denormal / 0.5
	add(f(0x00000003), 4)                 // denormal rounding tie -> even
	add(f(0x007fffff), f(0x3f800001))     // denormal / (1+ulp)
	add(3e38, 1e-3)                       // overflow to infinity
	add(float32(math.Copysign(0, -1)), 3) // signed zero
	add(127, f(0x0000ffff))               // huge quotient
	add(f(0x3f800001), f(0x3f7fffff))     // hard rounding
	add(f(0x40490fdb), f(0x3e9a209b))     // pi / log10(2)
	add(f(0x3f808000), 1)                 // bf16 tie, low half 0x8000 (odd -> up)
	add(f(0x3f818000), 1)                 // bf16 tie (even stays)
	add(f(0x7f7fffff), 1)                 // bf16 rounds to infinity
	rng := rand.New(rand.NewPCG(7, 11))
	for i := 0; i < 200; i++ {
		x := f(rng.Uint32()&^(0xff<<23) | uint32(rng.IntN(254)+1)<<23)
		y := f(rng.Uint32()&^(0xff<<23) | uint32(rng.IntN(254)+1)<<23)
		if i%4 == 0 { // keep some quantizations in range
			y = float32(rng.Float64()*200) / max(float32(math.Abs(float64(x))), 1e-5)
		}
		add(x, y)
	}
	return a, b
}

// katFloatWant is what Go computes for one pair (the reference semantics).
func katFloatWant(a, b float32) [4]uint32 {
	var q uint32
	if p := a * b; !math.IsNaN(float64(p)) && !math.IsInf(float64(p), 0) {
		q = uint32(int32(kernels.QuantizeAct(a, b)))
	}
	return [4]uint32{math.Float32bits(a / b), q, uint32(kernels.BF16(a)), math.Float32bits(float32(int32(math.Float32bits(b))))}
}

func (d *Device) katFloat() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	k, err := d.kernel("probe.cl", "xe2_kat_fp", "")
	if err != nil {
		return err
	}
	a, b := katPairs()
	n := len(a)
	out, err := d.runKAT(k, []int{roundUp(n, 64)}, []int{64}, n*16, f32bytes(a), f32bytes(b), int32(n))
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		want := katFloatWant(a[i], b[i])
		for j, what := range []string{"division", "quantization", "bf16 rounding", "int to float"} {
			got := binary.LittleEndian.Uint32(out[(4*i+j)*4:])
			p := a[i] * b[i]
			if j == 1 && (math.IsNaN(float64(p)) || math.IsInf(float64(p), 0)) {
				continue
			}
			if got != want[j] {
				return fmt.Errorf("%w: float32 %s of (%g, %g) [%#08x, %#08x]: device %#08x, reference %#08x", ErrMismatch, what, a[i], b[i], math.Float32bits(a[i]), math.Float32bits(b[i]), got, want[j])
			}
		}
	}
	return nil
}

// katDPAS checks the int8 x int2 builtin's lane mapping against the emulation's.
func (d *Device) katDPAS() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	k, err := d.kernel("probe.cl", "xe2_kat_dpas", "-D XE2_DPAS=1")
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(3, 5))
	A := make([]int16, 8*16)
	for i := range A {
		A[i] = int16(rng.Uint32())
	}
	B := make([]uint32, 32)
	for i := range B {
		B[i] = rng.Uint32()
	}
	ab := make([]byte, 2*len(A))
	for i, v := range A {
		binary.LittleEndian.PutUint16(ab[2*i:], uint16(v))
	}
	out, err := d.runKAT(k, []int{16}, []int{16}, 9*16*4, ab, u32bytes(B))
	if err != nil {
		return err
	}
	want := emulateDPAS(A, B)
	for r := 0; r < 9; r++ {
		for l := 0; l < 16; l++ {
			w := want[min(r, 7)*16+l]
			if r == 8 { // M = 1 with acc = 7: row 0
				w = want[l] + 7
			}
			if got := int32(binary.LittleEndian.Uint32(out[(r*16+l)*4:])); got != w {
				return fmt.Errorf("%w: DPAS row %d lane %d: device %d, emulation %d", ErrMismatch, r, l, got, w)
			}
		}
	}
	return nil
}

// emulateDPAS is the Go statement of the lane mapping the kernels assume (xe2.h):
// result[r][n] = sum_k A[r][k] * field(B column n, k), A[r][2i+h] = byte h of lane i's
// short of row r, the field of k at bits 2(k%16) of word B[(k/16)*16 + n].
func emulateDPAS(A []int16, B []uint32) []int32 {
	out := make([]int32, 8*16)
	for r := 0; r < 8; r++ {
		for n := 0; n < 16; n++ {
			var s int32
			for k := 0; k < 32; k++ {
				a := int32(int8(uint16(A[r*16+k/2]) >> (8 * (k % 2))))
				f := int32(B[(k/16)*16+n]>>(2*(k%16))) & 3
				if f >= 2 {
					f -= 4
				}
				s += a * f
			}
			out[r*16+n] = s
		}
	}
	return out
}

// katGEMM runs a small layer (ragged M and K, bias, per-token activations, split-K) on
// the device's default tiles and compares it bit for bit with the Go reference.
func (d *Device) katGEMM() error {
	spec := quantcfg.LayerSpec{Name: "known-answer", Format: quantcfg.Int2, Out: 37, In: 100,
		Act: quantcfg.PerToken, Scale: quantcfg.GroupScale(64), Bias: true, Codebook: quantcfg.Codebook{-3, -1, 1, 3}}
	rng := rand.New(rand.NewPCG(1, 2))
	codes, scales, bias := RandomLayer(rng, spec)
	l, err := d.Register(spec, codes, scales, bias)
	if err != nil {
		return err
	}
	defer l.Free()
	for _, n := range []int{1, 3, 11} {
		x := RandomActs(rng, n, spec.In)
		want, err := Reference(spec, codes, scales, bias, x, n)
		if err != nil {
			return err
		}
		got, err := l.ForwardF32(x, n)
		if err != nil {
			return err
		}
		if i := firstDiff(got, want); i >= 0 {
			return fmt.Errorf("%w: known-answer GEMM (n=%d) output %d: device %g, reference %g", ErrMismatch, n, i, got[i], want[i])
		}
	}
	return nil
}

// firstDiff returns the first index where a and b differ in bits, or -1.
func firstDiff(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// runKAT runs k with buffers made from ins (int32 values become scalar args) and an
// output buffer of outSize bytes, which it returns. The lock is held.
func (d *Device) runKAT(k handle, global, local []int, outSize int, ins ...any) ([]byte, error) {
	var rel []handle
	defer func() {
		for _, h := range rel {
			clReleaseMem(h)
		}
	}()
	arg := 0
	for _, in := range ins {
		v, ok := in.([]byte)
		if !ok {
			continue
		}
		h, err := d.uploadReadOnly(v)
		if err != nil {
			return nil, err
		}
		rel = append(rel, h)
		if err := clSetArgMem(k, arg, h); err != nil {
			return nil, err
		}
		arg++
	}
	// The output buffer is the argument after the input buffers; scalar args follow it.
	out, err := clCreateBuffer(d.ctx, clMemReadWrite, outSize, nil)
	if err != nil {
		return nil, err
	}
	rel = append(rel, out)
	nbuf := arg
	if err := clSetArgMem(k, nbuf, out); err != nil {
		return nil, err
	}
	arg = nbuf + 1
	for _, in := range ins {
		if v, ok := in.(int32); ok {
			if err := clSetArgInt(k, arg, v); err != nil {
				return nil, err
			}
			arg++
		}
	}
	if _, err := clEnqueue(d.queue, k, global, local, false); err != nil {
		return nil, err
	}
	res := make([]byte, outSize)
	if err := clRead(d.queue, out, 0, res); err != nil {
		return nil, err
	}
	return res, nil
}

func f32bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func u32bytes(v []uint32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

func roundUp(a, b int) int { return ceilDiv(a, b) * b }
