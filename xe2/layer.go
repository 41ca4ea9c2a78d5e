package xe2

import (
	"encoding/binary"
	"fmt"
	"math"

	"bitgo/kernels"
	"bitgo/quantcfg"
)

// prm indices: the layer constants the kernels read (cl/gemm.cl's P_* macros).
const (
	pM = iota
	pK
	pKS
	pNBLK
	pACT
	pGA
	pNGA
	pSK
	pGS
	pNGS
	pL
	pJ
	pHASB
	pCBA
	pCBB
	pLUT
	pKP
	pCount
)

// Layer is one int2 layer resident on a device: VNNI16 weights (used in place on an
// integrated GPU, uploaded once to a discrete one), scales, bias and constants.
type Layer struct {
	Spec quantcfg.LayerSpec
	dev  *Device

	m, k, ks, kp, nblk int
	segs, segSteps     int // J segments of L steps (one segment: L = KS)
	nga                int // activation scales per token
	dpas               bool
	zeroCopy           bool

	w, ws, bias, prm handle
	hostFree         func() error
	freed            bool
}

// Register packs an int2 layer into VNNI16 and makes it resident. codes are the logical
// int2 codes (row-major [M][K], 0..3; ternary layers pass TernaryCodes), scales and bias
// as package kernels defines them. spec may be int2 or a ternary format (served as int2
// with the default code book, which gives identical results).
func (d *Device) Register(spec quantcfg.LayerSpec, codes []int8, scales, bias []float32) (*Layer, error) {
	spec = spec.WithDefaults()
	if err := checkLayer(spec, codes, scales, bias); err != nil {
		return nil, err
	}
	l := &Layer{Spec: spec, dev: d, m: spec.Out, k: spec.In}
	l.ks, l.nblk = ceilDiv(l.k, 32), ceilDiv(l.m, 16)
	l.kp = 32 * l.ks
	l.segs, l.segSteps = 1, l.ks
	if sl := segLen(spec); sl != 0 {
		l.segs, l.segSteps = ceilDiv(l.k, sl), sl/32
	}
	l.nga = 1
	if spec.Act.Kind == quantcfg.ActPerGroup {
		l.nga = ceilDiv(l.k, spec.Act.Group)
	}
	cb := codebookOf(spec)
	cba, cbb, affine := codebookAffine(cb)
	l.dpas = d.Info.dpas && affine
	prm := make([]int32, pCount)
	prm[pM], prm[pK], prm[pKS], prm[pNBLK], prm[pKP] = int32(l.m), int32(l.k), int32(l.ks), int32(l.nblk), int32(l.kp)
	switch spec.Act.Kind {
	case quantcfg.ActPerToken:
		prm[pACT] = 0
	case quantcfg.ActPerTensor:
		prm[pACT] = 1
	case quantcfg.ActPerGroup:
		prm[pACT], prm[pGA] = 2, int32(spec.Act.Group)
	default:
		return nil, fmt.Errorf("%w: layer %s: activation mode %q", ErrUnsupported, spec.Name, spec.Act)
	}
	prm[pNGA] = int32(l.nga)
	switch spec.Scale.Kind {
	case quantcfg.ScaleTensor:
		prm[pSK] = 0
	case quantcfg.ScaleRow:
		prm[pSK] = 1
	case quantcfg.ScaleGroup:
		prm[pSK], prm[pGS], prm[pNGS] = 2, int32(spec.Scale.Group), int32(ceilDiv(l.k, spec.Scale.Group))
	}
	prm[pL], prm[pJ], prm[pHASB] = int32(l.segSteps), int32(l.segs), int32(b2i(bias != nil))
	prm[pCBA], prm[pCBB] = 1, 0
	if l.dpas {
		prm[pCBA], prm[pCBB] = int32(cba), int32(cbb)
	}
	prm[pLUT] = int32(codebookLUT(cb))

	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("%w: device %s", ErrClosed, d.Info.Name)
	}
	if err := l.upload(codes, scales, bias, prm); err != nil {
		l.release()
		return nil, fmt.Errorf("layer %s: %w", spec.Name, err)
	}
	d.layers++
	return l, nil
}

// upload makes the device buffers. The lock is held.
func (l *Layer) upload(codes []int8, scales, bias []float32, prm []int32) error {
	d := l.dev
	size := VNNI16Bytes(l.m, l.k)
	if d.Info.Integrated {
		mem, free, err := d.hostAlloc(size)
		if err != nil {
			return err
		}
		l.hostFree = free
		if err := PackVNNI16(l.m, l.k, codes, mem); err != nil {
			return err
		}
		if l.w, err = d.zeroCopy(mem); err != nil {
			return err
		}
		l.zeroCopy = true
	} else {
		blob := make([]byte, size)
		if err := PackVNNI16(l.m, l.k, codes, blob); err != nil {
			return err
		}
		var err error
		if l.w, err = d.uploadReadOnly(blob); err != nil {
			return err
		}
	}
	var err error
	if l.ws, err = d.uploadReadOnly(f32bytes(scales)); err != nil {
		return err
	}
	if bias != nil {
		if l.bias, err = d.uploadReadOnly(f32bytes(bias)); err != nil {
			return err
		}
	}
	pb := make([]byte, 4*len(prm))
	for i, v := range prm {
		binary.LittleEndian.PutUint32(pb[4*i:], uint32(v))
	}
	l.prm, err = d.uploadReadOnly(pb)
	return err
}

func (l *Layer) release() {
	for _, h := range []*handle{&l.w, &l.ws, &l.bias, &l.prm} {
		if *h != 0 {
			clReleaseMem(*h)
			*h = 0
		}
	}
	if l.hostFree != nil {
		l.hostFree()
		l.hostFree = nil
	}
}

// Free releases the layer's device buffers (and host memory). Safe to call twice.
func (l *Layer) Free() error {
	d := l.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if l.freed {
		return nil
	}
	l.freed = true
	if err := clFinish(d.queue); err != nil {
		return err
	}
	l.release()
	d.layers--
	return nil
}

// ZeroCopy reports whether the device reads the weights in place from host memory.
func (l *Layer) ZeroCopy() bool { return l.zeroCopy }

// DPAS reports whether the layer runs the DPAS data flow (else the conversion fallback).
func (l *Layer) DPAS() bool { return l.dpas }

// WeightBytes is the size of the packed weights (what one call reads).
func (l *Layer) WeightBytes() int { return VNNI16Bytes(l.m, l.k) }

// Forward computes out = layer(x) for n tokens. x holds n*K activations of dtype dt
// (little-endian f32 or bf16); out receives n*M outputs of the same dtype.
func (l *Layer) Forward(dt quantcfg.DType, x []byte, n int, out []byte) error {
	_, err := l.run(dt, x, n, out, nil, false)
	return err
}

// ForwardF32 is Forward for float32 slices.
func (l *Layer) ForwardF32(x []float32, n int) ([]float32, error) {
	out := make([]byte, 4*n*l.m)
	if _, err := l.run(quantcfg.DTypeF32, f32bytes(x), n, out, nil, false); err != nil {
		return nil, err
	}
	y := make([]float32, n*l.m)
	for i := range y {
		y[i] = math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:]))
	}
	return y, nil
}

// ForwardTile is Forward with an explicit tile (tests and the tuner). With timed it
// returns the device time of the call's kernels in nanoseconds.
func (l *Layer) ForwardTile(t Tile, dt quantcfg.DType, x []byte, n int, out []byte, timed bool) (uint64, error) {
	return l.run(dt, x, n, out, &t, timed)
}

func (l *Layer) checkCall(dt quantcfg.DType, x []byte, n int, out []byte) error {
	name := l.Spec.Name
	if dt.Size() == 0 {
		return fmt.Errorf("%w: layer %s: dtype %q: allowed f32, bf16", ErrInvalid, name, dt)
	}
	if n < 1 {
		return fmt.Errorf("%w: layer %s: %d tokens: need at least 1", ErrShape, name, n)
	}
	if len(x) != n*l.k*dt.Size() {
		return fmt.Errorf("%w: layer %s: activations have %d bytes, want %d tokens x %d inputs x %d bytes = %d", ErrShape, name, len(x), n, l.k, dt.Size(), n*l.k*dt.Size())
	}
	if len(out) != n*l.m*dt.Size() {
		return fmt.Errorf("%w: layer %s: output has %d bytes, want %d tokens x %d outputs x %d bytes = %d", ErrShape, name, len(out), n, l.m, dt.Size(), n*l.m*dt.Size())
	}
	// Refuse NaN and infinities (the reference does, naming the element).
	sz := dt.Size()
	for i := 0; i < n*l.k; i++ {
		var exp uint32
		if sz == 4 {
			exp = binary.LittleEndian.Uint32(x[4*i:]) & 0x7F800000
		} else {
			exp = uint32(binary.LittleEndian.Uint16(x[2*i:])&0x7F80) << 16
		}
		if exp == 0x7F800000 {
			return fmt.Errorf("%w: layer %s: activation of token %d, input %d is not finite", ErrNonFinite, name, i/l.k, i%l.k)
		}
	}
	return nil
}

// launch is one call's geometry.
type launch struct {
	tile  Tile
	S, C  int // splits and steps (one segment) or segments per split
	units int // partial sums per (token, row) when S > 1
}

func (l *Layer) plan(t Tile) launch {
	p := launch{tile: t}
	total := l.ks
	if l.segs > 1 {
		total = l.segs
	}
	p.C = ceilDiv(total, min(t.Split, total))
	p.S = ceilDiv(total, p.C)
	p.units = p.S
	if l.segs > 1 {
		p.units = l.segs
	}
	return p
}

func (l *Layer) run(dt quantcfg.DType, x []byte, n int, out []byte, force *Tile, timed bool) (uint64, error) {
	if err := l.checkCall(dt, x, n, out); err != nil {
		return 0, err
	}
	d := l.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if l.freed || d.closed {
		return 0, fmt.Errorf("%w: layer %s", ErrClosed, l.Spec.Name)
	}
	var t Tile
	if force != nil {
		t = *force
	} else {
		t = l.chooseTile(n)
	}
	if err := t.Fits(d.Info); err != nil {
		return 0, fmt.Errorf("layer %s: %w", l.Spec.Name, err)
	}
	if !t.Prefill && n > t.TN {
		return 0, fmt.Errorf("%w: layer %s: decode tile %s takes at most %d tokens, got %d", ErrInvalid, l.Spec.Name, t, t.TN, n)
	}
	p := l.plan(t)
	xdt := int32(0)
	if dt == quantcfg.DTypeBF16 {
		xdt = 1
	}
	var evs []handle
	defer func() {
		for _, e := range evs {
			clReleaseEvent(e)
		}
	}()
	enqueue := func(k handle, global, local []int) error {
		ev, err := clEnqueue(d.queue, k, global, local, timed)
		if err != nil {
			return err
		}
		if timed {
			evs = append(evs, ev)
		}
		return nil
	}
	fail := func(err error) (uint64, error) { return 0, fmt.Errorf("layer %s, tile %s: %w", l.Spec.Name, t, err) }

	defs := t.defines(l.dpas)
	bx, err := d.buf("x", len(x))
	if err != nil {
		return fail(err)
	}
	bxs, err := d.buf("xs", 4*n*l.nga)
	if err != nil {
		return fail(err)
	}
	bout, err := d.buf("out", len(out))
	if err != nil {
		return fail(err)
	}
	if err := clWrite(d.queue, bx, 0, x); err != nil {
		return fail(err)
	}
	act := bx
	if !t.Fused {
		bxq, err := d.buf("xq", n*l.kp)
		if err != nil {
			return fail(err)
		}
		bamax, err := d.buf("amax", 4*n)
		if err != nil {
			return fail(err)
		}
		if l.Spec.Act.Kind == quantcfg.ActPerTensor {
			k, err := d.kernel("gemm.cl", "xe2_act_amax", defs)
			if err != nil {
				return fail(err)
			}
			if err := setArgs(k, bx, bamax, l.prm, int32(n), xdt); err != nil {
				return fail(err)
			}
			if err := enqueue(k, []int{64 * n}, []int{64}); err != nil {
				return fail(err)
			}
		}
		k, err := d.kernel("gemm.cl", "xe2_act_quant", defs)
		if err != nil {
			return fail(err)
		}
		if err := setArgs(k, bx, bxq, bxs, bamax, l.prm, int32(n), xdt); err != nil {
			return fail(err)
		}
		if err := enqueue(k, []int{64 * l.nga, n}, []int{64, 1}); err != nil {
			return fail(err)
		}
		act = bxq
	}
	dst := bout
	if p.S > 1 {
		if dst, err = d.buf("part", 4*p.units*n*l.m); err != nil {
			return fail(err)
		}
	}
	name := "xe2_decode"
	tiles := 1
	if t.Prefill {
		name, tiles = "xe2_prefill", ceilDiv(n, t.TN*t.SGN)
	}
	k, err := d.kernel("gemm.cl", name, defs)
	if err != nil {
		return fail(err)
	}
	bias := l.bias
	if bias == 0 {
		bias = d.dummy
	}
	if err := setArgs(k, l.w, l.ws, bias, act, bxs, dst, l.prm, int32(n), xdt, int32(p.S), int32(p.C)); err != nil {
		return fail(err)
	}
	wgs := ceilDiv(ceilDiv(l.nblk, t.SGM), t.WGS)
	if err := enqueue(k, []int{wgs * t.WGS * 16, tiles, p.S}, []int{t.WGS * 16, 1, 1}); err != nil {
		return fail(err)
	}
	if p.S > 1 {
		k, err := d.kernel("gemm.cl", "xe2_combine", defs)
		if err != nil {
			return fail(err)
		}
		if err := setArgs(k, dst, l.ws, bias, bxs, bout, l.prm, int32(n), xdt, int32(p.S)); err != nil {
			return fail(err)
		}
		if err := enqueue(k, []int{roundUp(l.m, 64), n}, []int{64, 1}); err != nil {
			return fail(err)
		}
	}
	if err := clRead(d.queue, bout, 0, out); err != nil {
		return fail(err)
	}
	var ns uint64
	for _, e := range evs {
		s, en, err := clEventTimes(e)
		if err != nil {
			return fail(err)
		}
		ns += en - s
	}
	return ns, nil
}

// setArgs sets kernel arguments in order: handles are buffers, int32s are scalars.
func setArgs(k handle, args ...any) error {
	for i, a := range args {
		var err error
		switch v := a.(type) {
		case handle:
			err = clSetArgMem(k, i, v)
		case int32:
			err = clSetArgInt(k, i, v)
		default:
			err = fmt.Errorf("%w: kernel argument %d has type %T", ErrInvalid, i, a)
		}
		if err != nil {
			return fmt.Errorf("argument %d: %w", i, err)
		}
	}
	return nil
}

// chooseTile picks the tile for n tokens: the tune table's winner for this layer's
// shape bucket, else the built-in heuristic. The lock is held.
func (l *Layer) chooseTile(n int) Tile {
	if d := l.dev; d.table != nil {
		if t, ok := d.table.Lookup(d.Info, l.Key(n)); ok && t.Fits(d.Info) == nil && (t.Prefill || n <= t.TN) {
			return t
		}
	}
	return l.defaultTile(n)
}

// defaultTile is the heuristic used without a tune table: decode tiles fuse the
// activation quantization and split K until the device has about eight sub-groups per
// compute unit; prefill tiles quantize activations in a separate pass.
func (l *Layer) defaultTile(n int) Tile {
	info := l.dev.Info
	wgs := 4
	if !info.native {
		wgs = 2
	}
	if n > 8 {
		return Tile{Prefill: true, TN: 8, SGN: 2, SGM: 2, WGS: wgs, Split: 1}
	}
	t := Tile{TN: tokenTile(n), SGN: 1, SGM: 2, WGS: wgs, Split: 1, Fused: true}
	if l.nblk < 2 {
		t.SGM = 1
	}
	sgs := ceilDiv(l.nblk, t.SGM)
	want := max(64, 8*info.ComputeUnits)
	if sgs < want {
		t.Split = min(16, max(1, want/sgs), max(1, l.ks/4))
	}
	// Per-tensor activations make every fused sub-group read the whole call; beyond one
	// token the separate pass reads it once.
	if l.Spec.Act.Kind == quantcfg.ActPerTensor && n > 1 {
		t.Fused = false
	}
	return t
}

// RegisterBlob registers a layer given in package kernels' packed layout (what a .bitgo
// pack file holds) for spec's format: int2, or ternary i2s/tl1/tl2. The blob is unpacked
// to logical weights and repacked in VNNI16; the blob itself is not kept.
func (d *Device) RegisterBlob(spec quantcfg.LayerSpec, blob []byte, scales, bias []float32) (*Layer, error) {
	spec = spec.WithDefaults()
	switch spec.Format {
	case quantcfg.Int2, quantcfg.I2S, quantcfg.TL1, quantcfg.TL2:
	default:
		return nil, fmt.Errorf("%w: layer %s: format %s (xe2 serves int2, and ternary i2s/tl1/tl2 as int2)", ErrUnsupported, spec.Name, spec.Format)
	}
	w, err := kernels.Unpack(spec.Format, spec.Out, spec.In, blob)
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", spec.Name, err)
	}
	codes := w.Q
	if spec.Format != quantcfg.Int2 {
		if codes, err = TernaryCodes(w.Q); err != nil {
			return nil, fmt.Errorf("layer %s: %w", spec.Name, err)
		}
	}
	return d.Register(spec, codes, scales, bias)
}

// Prepare compiles (or loads from the binary cache) the kernels Forward will use for
// each token count, so that the first calls do not pay for it: with a tune table, only
// its winners are built.
func (l *Layer) Prepare(tokens ...int) error {
	d := l.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if l.freed || d.closed {
		return fmt.Errorf("%w: layer %s", ErrClosed, l.Spec.Name)
	}
	for _, n := range tokens {
		if n < 1 {
			return fmt.Errorf("%w: layer %s: %d tokens", ErrShape, l.Spec.Name, n)
		}
		t := l.chooseTile(n)
		defs := t.defines(l.dpas)
		names := []string{"xe2_decode"}
		if t.Prefill {
			names[0] = "xe2_prefill"
		}
		if l.plan(t).S > 1 {
			names = append(names, "xe2_combine")
		}
		if !t.Fused {
			names = append(names, "xe2_act_quant")
			if l.Spec.Act.Kind == quantcfg.ActPerTensor {
				names = append(names, "xe2_act_amax")
			}
		}
		for _, name := range names {
			if _, err := d.kernel("gemm.cl", name, defs); err != nil {
				return fmt.Errorf("layer %s, tile %s: %w", l.Spec.Name, t, err)
			}
		}
	}
	return nil
}
