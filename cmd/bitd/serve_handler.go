package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"syscall"
	"unsafe"

	"bitgo/engine"
	"bitgo/ipc"
	"bitgo/kernels"
	"bitgo/quantcfg"
)

// engineHandler adapts the engine to ipc.Handler: it turns uploads into engine specs,
// keeps session layers' names apart, answers lookups only with layers loaded from pack
// files, and maps the engine's errors to ipc statuses.
type engineHandler struct {
	e      *engine.Engine
	shared map[ipc.LayerID]bool // layers loaded from pack files; fixed after start
}

var _ ipc.PackedSizer = (*engineHandler)(nil)

// statusErr gives an engine error an ipc status while printing only the original.
type statusErr struct{ sentinel, err error }

func (e statusErr) Error() string   { return e.err.Error() }
func (e statusErr) Unwrap() []error { return []error{e.sentinel, e.err} }

// mapErr classifies an engine (or kernels) error; shapeIs is the status a shape
// mismatch gets (a forward's sizes, or an upload's).
func mapErr(err error, shapeIs error) error {
	if err == nil {
		return nil
	}
	var s error
	switch {
	case errors.Is(err, engine.ErrNoLayer):
		s = ipc.ErrNotFound
	case errors.Is(err, engine.ErrExists):
		s = ipc.ErrInvalid
	case errors.Is(err, engine.ErrClosed):
		s = ipc.ErrShuttingDown
	case errors.Is(err, kernels.ErrNonFinite):
		s = ipc.ErrNonFinite
	case errors.Is(err, kernels.ErrWeights):
		s = ipc.ErrInvalid
	case errors.Is(err, kernels.ErrNoKernel):
		s = ipc.ErrUnsupported
	case errors.Is(err, engine.ErrBadRequest), errors.Is(err, kernels.ErrShape):
		s = shapeIs
	case errors.Is(err, syscall.ENOMEM): // the weights' memory could not be mapped
		s = ipc.ErrLimit
	default:
		return err // quantcfg's sentinels are classified by ipc.StatusOf; the rest is internal
	}
	return statusErr{s, err}
}

// residentBytes is what a layer keeps in memory: its packed blob, scales and bias.
func residentBytes(s quantcfg.LayerSpec) int64 {
	l, err := kernels.NewLayout(s.Format, s.Out, s.In)
	if err != nil {
		return 0
	}
	n := int64(l.Bytes()) + 4*int64(s.NumScales())
	if s.Bias {
		n += 4 * int64(s.Out)
	}
	return n
}

// engineName keeps two sessions' layers of the same name apart in the engine, whose
// names are unique; the client sees its own name.
func engineName(session uint32, name string) string {
	if name == "" {
		return ""
	}
	return fmt.Sprintf("session%d/%s", session, name)
}

func (h *engineHandler) Register(u ipc.Upload) (ipc.LayerInfo, error) {
	spec := u.Spec
	es := engine.Spec{LayerSpec: spec, Scales: u.Scales, Bias: u.Bias}
	es.Name = engineName(u.Session, spec.Name)
	if u.Packed {
		es.Packed = u.Weights
	} else {
		w, err := logicalWeights(spec, u.Weights)
		if err != nil {
			return ipc.LayerInfo{}, err
		}
		es.Weights = &w
	}
	id, err := h.e.Register(es)
	if err != nil {
		return ipc.LayerInfo{}, mapErr(err, ipc.ErrInvalid)
	}
	return ipc.LayerInfo{ID: ipc.LayerID(id), Spec: spec, Bytes: residentBytes(spec)}, nil
}

// logicalWeights views (int8, f32) or widens (bf16) the uploaded bytes as the kernels'
// logical weights. The staging buffer is page-aligned, so the views are aligned.
func logicalWeights(s quantcfg.LayerSpec, b []byte) (kernels.Weights, error) {
	n := s.Out * s.In
	switch s.Format {
	case quantcfg.F32:
		if len(b) != 4*n {
			return kernels.Weights{}, fmt.Errorf("%w: f32 weights of %d bytes, want %d", ipc.ErrInvalid, len(b), 4*n)
		}
		if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%4 != 0 {
			f := make([]float32, n)
			for i := range f {
				f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			}
			return kernels.Weights{F: f}, nil
		}
		return kernels.Weights{F: unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), n)}, nil
	case quantcfg.BF16:
		if len(b) != 2*n {
			return kernels.Weights{}, fmt.Errorf("%w: bf16 weights of %d bytes, want %d", ipc.ErrInvalid, len(b), 2*n)
		}
		f := make([]float32, n)
		for i := range f {
			f[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
		return kernels.Weights{F: f}, nil
	}
	if len(b) != n {
		return kernels.Weights{}, fmt.Errorf("%w: int8 weights of %d bytes, want %d", ipc.ErrInvalid, len(b), n)
	}
	return kernels.Weights{Q: unsafe.Slice((*int8)(unsafe.Pointer(unsafe.SliceData(b))), n)}, nil
}

func (h *engineHandler) Lookup(name string) (ipc.LayerInfo, error) {
	id, spec, err := h.e.Lookup(name)
	if err != nil || !h.shared[ipc.LayerID(id)] {
		return ipc.LayerInfo{}, fmt.Errorf("%w: no layer named %q was loaded from a pack file", ipc.ErrNotFound, name)
	}
	return ipc.LayerInfo{ID: ipc.LayerID(id), Spec: spec, Bytes: residentBytes(spec), Shared: true}, nil
}

func (h *engineHandler) Forward(id ipc.LayerID, x []byte, dt quantcfg.DType, n int, out []byte) error {
	return mapErr(h.e.Forward(engine.ID(id), x, dt, n, out), ipc.ErrShape)
}

func (h *engineHandler) Free(id ipc.LayerID) error {
	if h.shared[id] {
		return fmt.Errorf("%w: layer %d was loaded from a pack file", ipc.ErrDenied, id)
	}
	return mapErr(h.e.Free(engine.ID(id)), ipc.ErrInvalid)
}

func (h *engineHandler) Stats() map[string]float64 {
	s := h.e.Stats()
	return map[string]float64{
		"layers": float64(s.Layers), "shared_layers": float64(len(h.shared)), "weight_bytes": float64(s.WeightBytes),
		"calls": float64(s.Calls), "tokens": float64(s.Tokens), "errors": float64(s.Errors),
		"busy_seconds": s.Busy.Seconds(), "threads": float64(s.Threads),
	}
}

// PackedLayout: a packed blob must be in a layout revision in which the layer's format is
// laid out as this build lays it out (kernels.ReadsLayout). A client that names no revision
// predates the argument, so its blobs are taken as kernels/1: its packed tl1 and tl2 blobs
// are refused and the other formats, unchanged since, are read.
func (h *engineHandler) PackedLayout(rev string, s quantcfg.LayerSpec) error {
	if rev == "" {
		if kernels.ReadsLayout("kernels/1", s.Format) != nil {
			return fmt.Errorf("a packed %s blob must name the layout revision it was packed in (argument \"layout\"; this bitd reads %s): the client predates it: upgrade it, or send logical weights", s.Format, kernels.LayoutRevision)
		}
		return nil
	}
	if err := kernels.ReadsLayout(rev, s.Format); err != nil {
		return fmt.Errorf("packed blob: %v: pack it with a client of this release, or send logical weights", err)
	}
	return nil
}

func (h *engineHandler) PackedSize(s quantcfg.LayerSpec) (int64, error) {
	l, err := kernels.NewLayout(s.Format, s.Out, s.In)
	if err != nil {
		return 0, mapErr(err, ipc.ErrInvalid)
	}
	return int64(l.Bytes()), nil
}
