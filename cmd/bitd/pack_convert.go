package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"unsafe"

	"bitgo/engine"
	"bitgo/kernels"
	"bitgo/paged"
	"bitgo/quantcfg"
)

// converted is one layer ready to write.
type converted struct {
	blob         []byte
	scales, bias []float32
}

// scratch is one conversion worker's reusable buffers: a 2B-parameter model runs 210
// layers of up to 70 MB of float32 through them, and fresh allocations each time would
// keep the garbage collector (and the page-fault path) busy.
type scratch struct {
	q []int8
	f []float32
}

// blobs recycles packed-blob buffers between the converters and the writer.
var blobs sync.Pool

func getBlob(n int) []byte {
	if b, ok := blobs.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:n]
	}
	return make([]byte, n)
}

func putBlob(b []byte) { blobs.Put(&b) }

// convertLayer turns a planned layer into its packed blob (from getBlob), scales and bias.
// It is a pure function of the checkpoint bytes and the plan, so --verify can run it again
// and compare.
func convertLayer(pl *packPlan, lp *layerPlan, sc *scratch) (converted, error) {
	ck := pl.ckpt
	info, data, err := ck.Tensor(lp.weight)
	if err != nil {
		return converted{}, err
	}
	spec := lp.spec
	m, k := spec.Out, spec.In
	fail := func(err error) (converted, error) {
		return converted{}, fmt.Errorf("%s: tensor %q: %w", where(ck, lp.weight), lp.weight, err)
	}
	var w kernels.Weights
	var scales []float32
	var biasScale float32 = 1
	if lp.packed {
		sc.q = resize(sc.q, m*k)
		q := sc.q
		if err := unpackBitNet(q, data, int(info.Shape[0]), m, k); err != nil {
			return fail(err)
		}
		s, err := bitnetScale(pl, lp)
		if err != nil {
			return converted{}, err
		}
		if spec.Format == quantcfg.Int2 {
			// Ternary value v becomes the code whose level is v (ternaryTarget checked
			// that the code book has all three).
			var code [3]int8
			for v := -1; v <= 1; v++ {
				code[v+1] = int8(codeOf(spec.Codebook, int8(v)))
			}
			for i, v := range q {
				q[i] = code[v+1]
			}
		}
		w.Q = q
		scales = make([]float32, spec.NumScales())
		for i := range scales {
			scales[i] = s
		}
		if !pl.bitnet.WeightScaleInverse {
			// autobitlinear scales the bias with the output: (x.W + b) * weight_scale.
			biasScale = s
		}
	} else {
		sc.f = resize(sc.f, m*k)
		wf := sc.f
		if err := paged.DecodeFloat32(wf, data, info.DType); err != nil {
			return fail(err)
		}
		switch {
		case spec.Format.IsFloat():
			w.F = wf
		case spec.Format.IsTernary() && spec.Scale.Kind == quantcfg.ScaleRow:
			w.Q, scales, err = kernels.TernarizeRows(wf, m, k)
		case spec.Format.IsTernary():
			var s float32
			w.Q, s, err = kernels.Ternarize(wf)
			scales = []float32{s}
		default:
			w.Q, scales, err = kernels.QuantizeWeights(spec.Format, wf, m, k, spec.Scale, spec.Codebook)
		}
		if err != nil {
			return fail(err)
		}
	}
	blob := getBlob(lp.outBytes)
	if err := kernels.Pack(spec.Format, m, k, w, blob); err != nil {
		putBlob(blob)
		return fail(err)
	}
	var bias []float32
	if lp.bias != "" {
		bi, bd, err := ck.Tensor(lp.bias)
		if err != nil {
			return converted{}, err
		}
		bias = make([]float32, m)
		if err := paged.DecodeFloat32(bias, bd, bi.DType); err != nil {
			return converted{}, fmt.Errorf("%s: tensor %q: %w", where(ck, lp.bias), lp.bias, err)
		}
		for i, v := range bias {
			bias[i] = v * biasScale
			if math.IsNaN(float64(bias[i])) || math.IsInf(float64(bias[i]), 0) {
				return converted{}, fmt.Errorf("%s: tensor %q: value %d is %v", where(ck, lp.bias), lp.bias, i, bias[i])
			}
		}
	}
	return converted{blob: blob, scales: scales, bias: bias}, nil
}

// unpackBitNet expands transformers' BitNet packing (quantcfg.BitNet) into q ([m*k]
// ternary weights): data is a [rows, k] uint8 tensor, rows = ceil(m/4), whose packed row
// j, bits 2i..2i+1, hold the code w+1 of output row i*rows + j. A code 3 is an error naming
// the position. Codes of rows beyond m (padding) are ignored.
//
// Eight bytes are handled at once: for one bit pair i, c = (word >> 2i) & 0x03.. holds
// eight codes, one per byte; ((c | 0x80..) - 0x01..) ^ 0x80.. is code-1 in every byte as
// an int8 (the 0x80 bits stop borrows from crossing bytes), and c & (c >> 1) flags code 3.
func unpackBitNet(q []int8, data []byte, rows, m, k int) error {
	const (
		lo2  = 0x0303030303030303
		ones = 0x0101010101010101
		high = 0x8080808080808080
	)
	dst := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(q))), len(q))
	for i := 0; i < 4; i++ {
		shift := uint(2 * i)
		for j := 0; j < rows; j++ {
			r := i*rows + j
			if r >= m {
				break
			}
			src := data[j*k : (j+1)*k]
			out := dst[r*k : (r+1)*k]
			var bad uint64
			c := 0
			for ; c+8 <= k; c += 8 {
				codes := (binary.LittleEndian.Uint64(src[c:]) >> shift) & lo2
				bad |= codes & (codes >> 1)
				binary.LittleEndian.PutUint64(out[c:], ((codes|high)-ones)^high)
			}
			for ; c < k; c++ {
				code := (src[c] >> shift) & 3
				bad |= uint64(code & (code >> 1))
				out[c] = byte(int8(code) - 1)
			}
			if bad&ones != 0 {
				for c, b := range src {
					if (b>>shift)&3 == 3 {
						return fmt.Errorf("%w: packed row %d, column %d, bits %d-%d hold code 3 (output row %d): BitNet codes are w+1 in {0, 1, 2}", kernels.ErrWeights, j, c, shift, shift+1, r)
					}
				}
			}
		}
	}
	return nil
}

// bitnetScale reads a layer's weight_scale and turns it into bitgo's per-tensor weight
// scale: bitlinear stores the inverse of the absmean scale (y = acc / (weight_scale * xs)),
// so the scale is 1/weight_scale (float32 division); autobitlinear stores the scale itself.
func bitnetScale(pl *packPlan, lp *layerPlan) (float32, error) {
	info, data, err := pl.ckpt.Tensor(lp.wscale)
	if err != nil {
		return 0, err
	}
	var v [1]float32
	if err := paged.DecodeFloat32(v[:], data, info.DType); err != nil {
		return 0, fmt.Errorf("%s: tensor %q: %w", where(pl.ckpt, lp.wscale), lp.wscale, err)
	}
	s := v[0]
	if pl.bitnet.WeightScaleInverse {
		s = 1 / s
	}
	if !(s > 0) || math.IsInf(float64(s), 0) {
		return 0, fmt.Errorf("%s: tensor %q: weight_scale %v gives the scale %v: it must be positive and finite", where(pl.ckpt, lp.wscale), lp.wscale, v[0], s)
	}
	return s, nil
}

// unquantizedDType is how a stored unquantized tensor is kept: floats as BF16, anything
// else as it is.
func unquantizedDType(dt paged.DType) paged.DType {
	if dt.IsFloat() {
		return paged.BF16
	}
	return dt
}

// writeUnquantized streams a tensor into w (floats converted to BF16 chunk by chunk).
func writeUnquantized(w io.Writer, info paged.TensorInfo, data []byte) error {
	if !info.DType.IsFloat() || info.DType == paged.BF16 {
		_, err := w.Write(data)
		return err
	}
	const chunk = 1 << 16
	size := info.DType.Size()
	f := make([]float32, chunk)
	out := make([]byte, 2*chunk)
	for off := 0; off < len(data); off += chunk * size {
		n := min(chunk, (len(data)-off)/size)
		if err := paged.DecodeFloat32(f[:n], data[off:], info.DType); err != nil {
			return err
		}
		for i, v := range f[:n] {
			h := kernels.BF16(v)
			out[2*i], out[2*i+1] = byte(h), byte(h>>8)
		}
		if _, err := w.Write(out[:2*n]); err != nil {
			return err
		}
	}
	return nil
}

// convertAll runs convertLayer over the plan's layers on o.Threads goroutines and hands
// the results to sink in plan order. At most Threads+1 results are alive at once, so
// memory stays bounded by a few layers whatever the model's size. sink must not keep the
// blob (it is recycled). The first error stops the dispatch and is returned.
func convertAll(pl *packPlan, threads int, sink func(i int, c converted) error) error {
	type slot struct {
		c    converted
		err  error
		done chan struct{}
	}
	n := len(pl.layers)
	slots := make([]slot, n)
	for i := range slots {
		slots[i].done = make(chan struct{})
	}
	jobs := make(chan int)
	credits := make(chan struct{}, threads+1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range threads {
		wg.Go(func() {
			var sc scratch
			for i := range jobs {
				slots[i].c, slots[i].err = convertLayer(pl, &pl.layers[i], &sc)
				close(slots[i].done)
			}
		})
	}
	dispatched := make(chan int, 1)
	go func() {
		defer close(jobs)
		i := 0
		defer func() { dispatched <- i }()
		for ; i < n; i++ {
			select {
			case credits <- struct{}{}:
			case <-stop:
				return
			}
			select {
			case jobs <- i:
			case <-stop:
				<-credits
				return
			}
		}
	}()
	var err error
	for i := 0; i < n && err == nil; i++ {
		<-slots[i].done
		if err = slots[i].err; err == nil {
			err = sink(i, slots[i].c)
			putBlob(slots[i].c.blob)
		}
		slots[i].c = converted{}
		<-credits
	}
	close(stop)
	wg.Wait()
	<-dispatched
	return err
}

// writePack converts and writes the whole pack.
func writePack(pl *packPlan, o packOptions, prog progress) error {
	w, err := paged.CreatePack(o.Out, paged.PackOptions{
		Model: pl.model, Layout: engine.PackLayout, CreatedBy: "bitd pack", Align: o.Align, NoSync: o.NoSync,
		Metadata: map[string]string{
			"source": pl.dir, "source_method": pl.method, "format": string(pl.cfg.Format),
			"act": pl.cfg.Act.String(), "scale": pl.cfg.Scale.String(),
		},
	})
	if err != nil {
		return err
	}
	prog.start(len(pl.layers)+len(pl.tensors), pl.inBytes)
	err = convertAll(pl, o.Threads, func(i int, c converted) error {
		lp := &pl.layers[i]
		if err := w.AddLayer(paged.PackLayer{Spec: lp.spec, Scales: c.scales, Bias: c.bias}, c.blob); err != nil {
			return err
		}
		prog.step(lp.spec.Name, fmt.Sprintf("%s %dx%d", lp.spec.Format, lp.spec.Out, lp.spec.In), lp.inBytes)
		return nil
	})
	for _, t := range pl.tensors {
		if err != nil {
			break
		}
		if !t.store {
			err = w.AddExternal(t.info)
			prog.step(t.info.Name, "external", 0)
			continue
		}
		_, data, terr := pl.ckpt.Tensor(t.info.Name)
		if terr != nil {
			err = terr
			break
		}
		stored := t.info
		stored.DType = unquantizedDType(t.info.DType)
		var bw *paged.BlobWriter
		if bw, err = w.BeginTensor(stored); err != nil {
			break
		}
		if err = writeUnquantized(bw, t.info, data); err == nil {
			err = bw.Close()
		}
		prog.step(t.info.Name, "stored as "+string(stored.DType), int64(len(data)))
	}
	prog.finish(err)
	if err != nil {
		w.Abort()
		return err
	}
	return w.Close()
}

// verifyPack re-reads the written file (every checksum) and compares every layer with a
// fresh conversion from the checkpoint, and every stored tensor with its source.
func verifyPack(pl *packPlan, o packOptions) error {
	p, err := paged.OpenPack(o.Out, paged.OpenOptions{Verify: paged.VerifyOnOpen})
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	defer p.Close()
	if len(p.Layers) != len(pl.layers) {
		return fmt.Errorf("verify: %s has %d layers, the checkpoint gives %d", o.Out, len(p.Layers), len(pl.layers))
	}
	var errs []error
	err = convertAll(pl, o.Threads, func(i int, c converted) error {
		lp := &pl.layers[i]
		got, ok := p.Layer(lp.spec.Name)
		if !ok {
			errs = append(errs, fmt.Errorf("layer %s is missing", lp.spec.Name))
			return nil
		}
		blob, err := p.LayerBlob(lp.spec.Name)
		if err != nil {
			return err
		}
		switch {
		case got.Spec != lp.spec:
			errs = append(errs, fmt.Errorf("layer %s: spec %+v, a fresh conversion gives %+v", lp.spec.Name, got.Spec, lp.spec))
		case !bytes.Equal(blob, c.blob):
			errs = append(errs, fmt.Errorf("layer %s: packed weights differ from a fresh conversion", lp.spec.Name))
		case !sameFloats(got.Scales, c.scales):
			errs = append(errs, fmt.Errorf("layer %s: scales differ from a fresh conversion", lp.spec.Name))
		case !sameFloats(got.Bias, c.bias):
			errs = append(errs, fmt.Errorf("layer %s: bias differs from a fresh conversion", lp.spec.Name))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	for _, t := range pl.tensors {
		if !t.store {
			continue
		}
		_, got, err := p.TensorData(t.info.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		_, src, err := pl.ckpt.Tensor(t.info.Name)
		if err != nil {
			return err
		}
		cmp := &cmpWriter{want: got}
		if err := writeUnquantized(cmp, t.info, src); err != nil {
			return err
		}
		if cmp.differs || cmp.off != len(got) {
			errs = append(errs, fmt.Errorf("tensor %s differs from its source", t.info.Name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("verify %s: %w", o.Out, err)
	}
	return nil
}

func sameFloats(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// cmpWriter compares what is written to it with want, without buffering it.
type cmpWriter struct {
	want    []byte
	off     int
	differs bool
}

func (c *cmpWriter) Write(p []byte) (int, error) {
	if c.off+len(p) > len(c.want) || !bytes.Equal(p, c.want[c.off:c.off+len(p)]) {
		c.differs = true
	}
	c.off += len(p)
	return len(p), nil
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
