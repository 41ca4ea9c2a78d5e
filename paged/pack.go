package paged

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"

	"bitgo/quantcfg"
)

// The .bitgo pack file. paged/FORMAT.md is the specification; this file holds its
// constants, its Go types and the msgpack schema.

// PackMagic opens every pack file.
const PackMagic = "BITGOPAK"

// The pack file version this package writes. A reader accepts every minor version of the
// major versions it knows (minor versions only add header keys, which older readers
// ignore) and refuses other major versions.
const (
	PackMajor = 1
	PackMinor = 0
)

// PreambleSize is the size of the fixed binary preamble at offset 0.
const PreambleSize = 64

// DefaultAlign is the default blob alignment (a transparent huge page).
const DefaultAlign = HugePageSize

// MaxPackHeader bounds the msgpack header a reader accepts (1 GiB; a 2B-parameter model
// with per-row scales needs about 2 MB, with group:128 scales about 80 MB).
const MaxPackHeader = 1 << 30

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C is the CRC-32C (Castagnoli) of b, the checksum of every blob and of the header.
func CRC32C(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// BlobRef locates one blob in a pack file: Length bytes at Offset (a multiple of the
// header's Align), with their CRC-32C.
type BlobRef struct {
	Offset, Length int64
	CRC32C         uint32
}

// PackLayer is one quantized linear layer of a pack file: its spec in quantcfg's terms
// (Spec.Bias tells whether Bias is present), its weight scales (Spec.NumScales() of them,
// in quantcfg.ScaleGran.Count's order), its bias (Spec.Out values, or nil), and its packed
// weight blob, whose layout belongs to the producer named by the header's Layout.
type PackLayer struct {
	Spec   quantcfg.LayerSpec
	Scales []float32
	Bias   []float32
	Blob   BlobRef
}

// PackTensor is an unquantized tensor stored in the pack (an embedding, a norm weight):
// little-endian elements of DType, row-major, exactly Bytes() long.
type PackTensor struct {
	TensorInfo
	Blob BlobRef
}

// PackHeader is everything a pack file says about itself.
type PackHeader struct {
	// Model names the model (free text, e.g. the checkpoint's directory or Hub id).
	Model string
	// Layout names the blob layout (e.g. "kernels/4"): opaque to paged, checked by the
	// consumer, so that a pack written for another layout revision is refused instead of
	// being misread.
	Layout string
	// CreatedBy names the program that wrote the file (free text).
	CreatedBy string
	// Align is the blob alignment: a power of two >= 4096; DefaultAlign when written by
	// this package unless asked otherwise.
	Align int64
	// Metadata is free-form string pairs (the source checkpoint, the conversion flags...).
	Metadata map[string]string
	// Layers, in the order they were written.
	Layers []PackLayer
	// Tensors: unquantized tensors stored in the pack.
	Tensors []PackTensor
	// External: tensors of the source model that the pack does not store and that the host
	// framework keeps (recorded so a consumer can tell "left out on purpose" from "missing").
	External []TensorInfo
}

// The msgpack schema (see FORMAT.md). Field names are the map keys; integers are
// msgpack ints of any width, floats msgpack float32.
type wireHeader struct {
	Model     string            `msgpack:"model"`
	Layout    string            `msgpack:"layout"`
	CreatedBy string            `msgpack:"created_by,omitempty"`
	Align     uint64            `msgpack:"align"`
	Metadata  map[string]string `msgpack:"metadata,omitempty"`
	Layers    []wireLayer       `msgpack:"layers"`
	Tensors   []wireTensor      `msgpack:"tensors"`
	External  []wireExternal    `msgpack:"external,omitempty"`
}

type wireLayer struct {
	Name     string    `msgpack:"name"`
	Format   string    `msgpack:"format"`
	Out      uint64    `msgpack:"out"`
	In       uint64    `msgpack:"in"`
	Act      string    `msgpack:"act"`
	Scale    string    `msgpack:"scale"`
	Codebook []int     `msgpack:"codebook,omitempty"`
	Scales   []float32 `msgpack:"scales"`
	Bias     []float32 `msgpack:"bias,omitempty"`
	Offset   uint64    `msgpack:"offset"`
	Length   uint64    `msgpack:"length"`
	CRC32C   uint32    `msgpack:"crc32c"`
}

type wireTensor struct {
	Name   string   `msgpack:"name"`
	DType  string   `msgpack:"dtype"`
	Shape  []uint64 `msgpack:"shape"`
	Offset uint64   `msgpack:"offset"`
	Length uint64   `msgpack:"length"`
	CRC32C uint32   `msgpack:"crc32c"`
}

type wireExternal struct {
	Name  string   `msgpack:"name"`
	DType string   `msgpack:"dtype"`
	Shape []uint64 `msgpack:"shape"`
}

// preamble is the fixed 64-byte start of the file.
type preamble struct {
	Major, Minor uint32
	HeaderOffset uint64
	HeaderLength uint64
	HeaderCRC    uint32
}

func (p preamble) encode() [PreambleSize]byte {
	var b [PreambleSize]byte
	copy(b[0:8], PackMagic)
	binary.LittleEndian.PutUint32(b[8:], p.Major)
	binary.LittleEndian.PutUint32(b[12:], p.Minor)
	binary.LittleEndian.PutUint64(b[16:], p.HeaderOffset)
	binary.LittleEndian.PutUint64(b[24:], p.HeaderLength)
	binary.LittleEndian.PutUint32(b[32:], p.HeaderCRC)
	binary.LittleEndian.PutUint32(b[60:], CRC32C(b[:60]))
	return b
}

// toWire converts a layer for the header, after checkLayer accepted it.
func (l PackLayer) toWire() wireLayer {
	s := l.Spec
	w := wireLayer{
		Name: s.Name, Format: string(s.Format), Out: uint64(s.Out), In: uint64(s.In),
		Act: s.Act.String(), Scale: s.Scale.String(), Scales: l.Scales, Bias: l.Bias,
		Offset: uint64(l.Blob.Offset), Length: uint64(l.Blob.Length), CRC32C: l.Blob.CRC32C,
	}
	if w.Scales == nil {
		w.Scales = []float32{}
	}
	if s.Format == quantcfg.Int2 {
		w.Codebook = []int{int(s.Codebook[0]), int(s.Codebook[1]), int(s.Codebook[2]), int(s.Codebook[3])}
	}
	return w
}

// checkLayer validates a layer's spec, scales and bias (not its blob): the rules a
// writer enforces and a reader re-checks.
func checkLayer(l PackLayer) error {
	s := l.Spec
	if s.Name == "" {
		return fmt.Errorf("a layer has an empty name")
	}
	if err := s.Format.Validate(); err != nil {
		return fmt.Errorf("layer %q: %w", s.Name, err)
	}
	if s.Act.IsZero() || s.Scale.IsZero() {
		return fmt.Errorf("layer %q: act %q and scale %q must both be set (apply LayerSpec.WithDefaults)", s.Name, s.Act, s.Scale)
	}
	if s.Format == quantcfg.Int2 {
		if err := s.Codebook.Validate(); err != nil {
			return fmt.Errorf("layer %q: %w", s.Name, err)
		}
	} else if s.Codebook != (quantcfg.Codebook{}) {
		return fmt.Errorf("layer %q: format %s has no code book, but one is given", s.Name, s.Format)
	}
	if err := s.Validate(); err != nil {
		return err
	}
	if want := s.NumScales(); len(l.Scales) != want {
		return fmt.Errorf("layer %q: %d scales, want %d (%s scales of a %dx%d layer)", s.Name, len(l.Scales), want, s.Scale, s.Out, s.In)
	}
	for i, v := range l.Scales {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("layer %q: scale %d is %v", s.Name, i, v)
		}
	}
	if s.Bias != (l.Bias != nil) {
		return fmt.Errorf("layer %q: Spec.Bias is %v but %d bias values are given", s.Name, s.Bias, len(l.Bias))
	}
	if l.Bias != nil {
		if len(l.Bias) != s.Out {
			return fmt.Errorf("layer %q: %d bias values, want out_features = %d", s.Name, len(l.Bias), s.Out)
		}
		for i, v := range l.Bias {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("layer %q: bias %d is %v", s.Name, i, v)
			}
		}
	}
	return nil
}

// checkTensorInfo validates a stored or external tensor's name, dtype and shape.
func checkTensorInfo(t TensorInfo) error {
	if t.Name == "" {
		return fmt.Errorf("a tensor has an empty name")
	}
	if t.DType.Size() == 0 {
		return fmt.Errorf("tensor %q: unknown dtype %q (known: %s)", t.Name, t.DType, dtNames)
	}
	if t.Bytes() < 0 {
		return fmt.Errorf("tensor %q: shape %s of %s: the size overflows", t.Name, t.shapeString(), t.DType)
	}
	return nil
}

func shapeToWire(s []int64) []uint64 {
	out := make([]uint64, len(s))
	for i, d := range s {
		out[i] = uint64(d)
	}
	return out
}

func shapeFromWire(s []uint64) ([]int64, bool) {
	out := make([]int64, len(s))
	for i, d := range s {
		if d > math.MaxInt64 {
			return nil, false
		}
		out[i] = int64(d)
	}
	return out, true
}
