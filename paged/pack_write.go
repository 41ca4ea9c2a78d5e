package paged

import (
	"bufio"
	"bytes"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"github.com/vmihailenco/msgpack/v5"
)

// PackOptions describes the pack file a PackWriter writes (see PackHeader).
type PackOptions struct {
	Model     string
	Layout    string
	CreatedBy string
	Metadata  map[string]string
	// Align is the blob alignment, a power of two in [4096, 1 GiB]; 0 means DefaultAlign.
	Align int64
	// NoSync skips the fsync before the final rename (tests, scratch files).
	NoSync bool
}

// PackWriter writes a pack file in one pass: blobs are streamed to disk as they come (a
// model is never held in memory whole), the header goes after the last blob, and the
// preamble is written last. The file appears under its final name only when Close
// succeeds; until then it is a temporary file in the same directory. The padding between
// blobs is left as holes (it reads as zeros and takes no disk space on common file
// systems). A PackWriter is not safe for concurrent use.
type PackWriter struct {
	path string
	opts PackOptions
	f    *os.File
	bw   *bufio.Writer
	pos  int64 // file offset of the next byte bw takes
	hdr  wireHeader
	used map[string]bool
	open *BlobWriter
	err  error // sticky: once a write failed, the writer only aborts
	done bool
}

// CreatePack starts a pack file at path.
func CreatePack(path string, opts PackOptions) (*PackWriter, error) {
	if opts.Align == 0 {
		opts.Align = DefaultAlign
	}
	if opts.Align < 4096 || opts.Align > 1<<30 || opts.Align&(opts.Align-1) != 0 {
		return nil, fmt.Errorf("%w: pack %s: alignment %d is not a power of two in [4096, 2^30]", ErrInvalid, path, opts.Align)
	}
	f, err := CreateBeside(path)
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", path, err)
	}
	w := &PackWriter{
		path: path, opts: opts, f: f, bw: bufio.NewWriterSize(f, 1<<20), used: map[string]bool{},
		hdr: wireHeader{Model: opts.Model, Layout: opts.Layout, CreatedBy: opts.CreatedBy, Align: uint64(opts.Align),
			Metadata: opts.Metadata, Layers: []wireLayer{}, Tensors: []wireTensor{}},
	}
	// Reserve the preamble; it is written by Close.
	if err := w.skipTo(PreambleSize); err != nil {
		w.Abort()
		return nil, err
	}
	return w, nil
}

func (w *PackWriter) fail(err error) error {
	if w.err == nil {
		w.err = fmt.Errorf("pack %s: %w", w.path, err)
	}
	return w.err
}

func (w *PackWriter) ready() error {
	switch {
	case w.err != nil:
		return w.err
	case w.done:
		return fmt.Errorf("%w: pack %s: writer already closed", ErrInvalid, w.path)
	case w.open != nil:
		return fmt.Errorf("%w: pack %s: blob %q is still open (Close it first)", ErrInvalid, w.path, w.open.name)
	}
	return nil
}

// skipTo moves the write position forward to off, leaving a hole.
func (w *PackWriter) skipTo(off int64) error {
	if off == w.pos {
		return nil
	}
	if err := w.bw.Flush(); err != nil {
		return w.fail(err)
	}
	if _, err := w.f.Seek(off, io.SeekStart); err != nil {
		return w.fail(err)
	}
	w.pos = off
	return nil
}

func (w *PackWriter) claim(name string) error {
	if w.used[name] {
		return fmt.Errorf("%w: pack %s: name %q used twice", ErrInvalid, w.path, name)
	}
	w.used[name] = true
	return nil
}

// BlobWriter streams one blob into the pack, computing its CRC-32C on the way.
type BlobWriter struct {
	w      *PackWriter
	name   string
	off    int64
	n      int64
	want   int64 // expected length for tensors, -1 for layers
	crc    uint32
	finish func(BlobRef)
}

// Write appends to the blob.
func (b *BlobWriter) Write(p []byte) (int, error) {
	if b.w.open != b {
		return 0, fmt.Errorf("%w: pack %s: blob %q is closed", ErrInvalid, b.w.path, b.name)
	}
	if b.w.err != nil {
		return 0, b.w.err
	}
	if b.want >= 0 && b.n+int64(len(p)) > b.want {
		return 0, b.w.fail(fmt.Errorf("%w: tensor %q: more than its %d bytes written", ErrInvalid, b.name, b.want))
	}
	n, err := b.w.bw.Write(p)
	b.crc = crc32.Update(b.crc, castagnoli, p[:n])
	b.n += int64(n)
	b.w.pos += int64(n)
	if err != nil {
		return n, b.w.fail(err)
	}
	return n, nil
}

// Close ends the blob and records it in the header.
func (b *BlobWriter) Close() error {
	if b.w.open != b {
		return nil
	}
	b.w.open = nil
	if b.w.err != nil {
		return b.w.err
	}
	if b.want >= 0 && b.n != b.want {
		return b.w.fail(fmt.Errorf("%w: tensor %q: %d bytes written, its shape needs %d", ErrInvalid, b.name, b.n, b.want))
	}
	if b.want < 0 && b.n == 0 {
		return b.w.fail(fmt.Errorf("%w: layer %q: empty blob", ErrInvalid, b.name))
	}
	b.finish(BlobRef{Offset: b.off, Length: b.n, CRC32C: b.crc})
	return nil
}

func (w *PackWriter) begin(name string, want int64, finish func(BlobRef)) (*BlobWriter, error) {
	off := (w.pos + w.opts.Align - 1) / w.opts.Align * w.opts.Align
	if err := w.skipTo(off); err != nil {
		return nil, err
	}
	w.open = &BlobWriter{w: w, name: name, off: off, want: want, finish: finish}
	return w.open, nil
}

// BeginLayer starts a layer's blob; write the packed weights to the returned writer and
// Close it. l.Blob is ignored (the writer fills it in). The layer is validated first
// (spec, scale count, finite scales and bias).
func (w *PackWriter) BeginLayer(l PackLayer) (*BlobWriter, error) {
	if err := w.ready(); err != nil {
		return nil, err
	}
	if err := checkLayer(l); err != nil {
		return nil, fmt.Errorf("%w: pack %s: %w", ErrInvalid, w.path, err)
	}
	if err := w.claim(l.Spec.Name); err != nil {
		return nil, err
	}
	return w.begin(l.Spec.Name, -1, func(ref BlobRef) {
		l.Blob = ref
		w.hdr.Layers = append(w.hdr.Layers, l.toWire())
	})
}

// AddLayer writes a layer whose packed blob is in memory.
func (w *PackWriter) AddLayer(l PackLayer, blob []byte) error {
	bw, err := w.BeginLayer(l)
	if err != nil {
		return err
	}
	if _, err := bw.Write(blob); err != nil {
		bw.Close()
		return err
	}
	return bw.Close()
}

// BeginTensor starts an unquantized tensor; exactly t.Bytes() bytes must be written.
func (w *PackWriter) BeginTensor(t TensorInfo) (*BlobWriter, error) {
	if err := w.ready(); err != nil {
		return nil, err
	}
	if err := checkTensorInfo(t); err != nil {
		return nil, fmt.Errorf("%w: pack %s: %w", ErrInvalid, w.path, err)
	}
	if err := w.claim(t.Name); err != nil {
		return nil, err
	}
	return w.begin(t.Name, t.Bytes(), func(ref BlobRef) {
		w.hdr.Tensors = append(w.hdr.Tensors, wireTensor{
			Name: t.Name, DType: string(t.DType), Shape: shapeToWire(t.Shape),
			Offset: uint64(ref.Offset), Length: uint64(ref.Length), CRC32C: ref.CRC32C,
		})
	})
}

// AddTensor writes an unquantized tensor whose data is in memory.
func (w *PackWriter) AddTensor(t TensorInfo, data []byte) error {
	bw, err := w.BeginTensor(t)
	if err != nil {
		return err
	}
	if _, err := bw.Write(data); err != nil {
		bw.Close()
		return err
	}
	return bw.Close()
}

// AddExternal records a tensor of the source model that the pack leaves to the host
// framework (no data).
func (w *PackWriter) AddExternal(t TensorInfo) error {
	if err := w.ready(); err != nil {
		return err
	}
	if err := checkTensorInfo(t); err != nil {
		return fmt.Errorf("%w: pack %s: %w", ErrInvalid, w.path, err)
	}
	if err := w.claim(t.Name); err != nil {
		return err
	}
	w.hdr.External = append(w.hdr.External, wireExternal{Name: t.Name, DType: string(t.DType), Shape: shapeToWire(t.Shape)})
	return nil
}

// Close writes the header and the preamble, syncs, and renames the file into place. On
// any error the temporary file is removed and nothing appears at the path.
func (w *PackWriter) Close() error {
	if w.done {
		return w.err
	}
	if w.open != nil {
		w.fail(fmt.Errorf("%w: blob %q is still open", ErrInvalid, w.open.name))
	}
	if w.err != nil {
		w.Abort()
		return w.err
	}
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	if err := enc.Encode(&w.hdr); err != nil {
		w.fail(err)
		w.Abort()
		return w.err
	}
	hdrOff := w.pos
	if _, err := w.bw.Write(buf.Bytes()); err != nil {
		w.fail(err)
	}
	if w.err == nil {
		if err := w.bw.Flush(); err != nil {
			w.fail(err)
		}
	}
	if w.err == nil {
		pre := preamble{Major: PackMajor, Minor: PackMinor, HeaderOffset: uint64(hdrOff), HeaderLength: uint64(buf.Len()), HeaderCRC: CRC32C(buf.Bytes())}.encode()
		if _, err := w.f.WriteAt(pre[:], 0); err != nil {
			w.fail(err)
		}
	}
	if w.err == nil && !w.opts.NoSync {
		if err := w.f.Sync(); err != nil {
			w.fail(err)
		}
	}
	if w.err == nil {
		if err := w.f.Close(); err != nil {
			w.fail(err)
		}
	}
	if w.err == nil {
		if err := os.Rename(w.f.Name(), w.path); err != nil {
			w.fail(err)
		}
	}
	if w.err != nil {
		w.Abort()
		return w.err
	}
	w.done = true
	return nil
}

// Abort discards the file. It is safe after Close (then it does nothing).
func (w *PackWriter) Abort() {
	if w.done {
		return
	}
	w.done = true
	w.open = nil
	w.f.Close()
	os.Remove(w.f.Name())
	if w.err == nil {
		w.err = fmt.Errorf("%w: pack %s: aborted", ErrInvalid, w.path)
	}
}

// CreateBeside creates the temporary file a writer fills and at last renames to path, in
// path's directory. A path naming a directory is refused here (ErrInvalid), before the
// writing, instead of by the rename after it.
func CreateBeside(path string) (*os.File, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("%w: is a directory", ErrInvalid)
	}
	return os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
}
