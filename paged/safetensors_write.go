package paged

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// STEntry is one tensor to write with WriteSafetensors: Data holds its little-endian
// elements, exactly Shape x DType.Size() bytes.
type STEntry struct {
	TensorInfo
	Data []byte
}

// WriteSafetensors writes a safetensors file: tensors in name order, the JSON header padded
// with spaces to a multiple of 8 bytes (so the data section is 8-byte aligned), metadata
// (may be nil) as "__metadata__". It refuses duplicate names, unknown dtypes and data
// whose length does not match the shape. The file is written to a temporary name and
// renamed, so a reader never sees half a file.
func WriteSafetensors(path string, tensors []STEntry, metadata map[string]string) (err error) {
	sorted := append([]STEntry(nil), tensors...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	header := map[string]any{}
	if metadata != nil {
		header["__metadata__"] = metadata
	}
	var off int64
	for i, t := range sorted {
		if t.Name == "" || t.Name == "__metadata__" {
			return fmt.Errorf("%w: %s: tensor name %q is not allowed", ErrInvalid, path, t.Name)
		}
		if i > 0 && sorted[i-1].Name == t.Name {
			return fmt.Errorf("%w: %s: tensor %q given twice", ErrInvalid, path, t.Name)
		}
		if t.DType.Size() == 0 {
			return fmt.Errorf("%w: %s: tensor %q: unknown dtype %q (known: %s)", ErrInvalid, path, t.Name, t.DType, dtNames)
		}
		if want := t.Bytes(); want != int64(len(t.Data)) {
			return fmt.Errorf("%w: %s: tensor %q: shape %s of %s needs %d bytes, got %d", ErrInvalid, path, t.Name, t.shapeString(), t.DType, want, len(t.Data))
		}
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		header[t.Name] = map[string]any{
			"dtype":        string(t.DType),
			"shape":        shape,
			"data_offsets": [2]int64{off, off + int64(len(t.Data))},
		}
		off += int64(len(t.Data))
	}
	hdr, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalid, path, err)
	}
	for len(hdr)%8 != 0 {
		hdr = append(hdr, ' ')
	}
	tmp, err := CreateBeside(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	w := bufio.NewWriterSize(tmp, 1<<20)
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(hdr)))
	w.Write(lenBuf[:])
	w.Write(hdr)
	for _, t := range sorted {
		w.Write(t.Data)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// WriteSafetensorsIndex writes dir/model.safetensors.index.json mapping each tensor name
// to the shard file (a plain file name in dir) that holds it.
func WriteSafetensorsIndex(dir string, weightMap map[string]string, metadata map[string]any) error {
	if metadata == nil {
		metadata = map[string]any{}
	}
	b, err := json.MarshalIndent(map[string]any{"metadata": metadata, "weight_map": weightMap}, "", "  ")
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalid, dir, err)
	}
	return os.WriteFile(filepath.Join(dir, SafetensorsIndex), append(b, '\n'), 0o644)
}
