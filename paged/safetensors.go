package paged

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"sort"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// MaxSafetensorsHeader bounds the JSON header of a safetensors file (the limit the
// reference implementation uses): a larger length prefix is a corrupt or hostile file.
const MaxSafetensorsHeader = 100_000_000

// STTensor is one tensor of a safetensors file: its name, dtype, shape and the byte range
// [Begin, End) of its data, relative to the start of the data section.
type STTensor struct {
	TensorInfo
	Begin, End int64
}

// Safetensors is a safetensors file mapped read-only: tensor data is accessed in place,
// without copying. It is safe for concurrent reads; Close invalidates every slice it gave.
type Safetensors struct {
	Path     string
	Metadata map[string]string // the header's __metadata__, nil if absent
	Tensors  []STTensor        // in data order (ascending Begin)

	byName map[string]int
	data   []byte // the data section, a window of mapping
	mapped []byte // the whole file mapping, kept for Munmap
}

// OpenSafetensors maps and validates a safetensors file. Every problem is an error that
// wraps ErrSafetensors and names the file and, where it applies, the tensor.
func OpenSafetensors(path string) (*Safetensors, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSafetensors, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSafetensors, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s: not a regular file", ErrSafetensors, path)
	}
	size := st.Size()
	if size < 8 {
		return nil, fmt.Errorf("%w: %s: %d bytes, shorter than the 8-byte header length", ErrSafetensors, path, size)
	}
	if int64(int(size)) != size {
		return nil, fmt.Errorf("%w: %s: %d bytes do not fit in memory", ErrSafetensors, path, size)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrSafetensors, path, os.NewSyscallError("mmap", err))
	}
	s, err := parseSafetensorsMapped(path, m)
	if err != nil {
		_ = unix.Munmap(m)
		return nil, err
	}
	s.mapped = m
	return s, nil
}

// parseSafetensorsMapped parses a mapping, turning a fault (the file shrank under us)
// into an error instead of a crash.
func parseSafetensorsMapped(path string, m []byte) (s *Safetensors, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("%w: %s: memory fault while reading the file (was it truncated while open?): %v", ErrSafetensors, path, r)
		}
	}()
	return ParseSafetensors(path, m)
}

// ParseSafetensors validates a whole safetensors file held in data and returns its tensors,
// which alias data. name is used in error messages only. It checks: the 8-byte
// little-endian header length (at most MaxSafetensorsHeader and inside the file); a
// UTF-8 JSON object starting with '{' (trailing spaces allowed) with no duplicate keys;
// an optional "__metadata__" object of strings; for every other key an object with exactly
// "dtype" (a known dtype), "shape" (non-negative integers) and "data_offsets" ([begin,
// end], begin <= end); that end-begin equals the shape's element count times the dtype
// size; and that the tensors, sorted by begin, tile the data section exactly (no gap, no
// overlap, nothing after the last one).
func ParseSafetensors(name string, data []byte) (*Safetensors, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrSafetensors, name, fmt.Sprintf(format, args...))
	}
	if len(data) < 8 {
		return nil, bad("%d bytes, shorter than the 8-byte header length", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > MaxSafetensorsHeader {
		return nil, bad("header length %d exceeds the %d-byte limit (corrupt file, or not safetensors)", n, MaxSafetensorsHeader)
	}
	if n > uint64(len(data)-8) {
		return nil, bad("header length %d runs past the end of the file (%d bytes): truncated?", n, len(data))
	}
	hdr := data[8 : 8+n]
	if len(hdr) == 0 || hdr[0] != '{' {
		return nil, bad("the header does not start with '{' (not a safetensors file?)")
	}
	if !utf8.Valid(hdr) {
		return nil, bad("the header is not valid UTF-8")
	}
	s := &Safetensors{Path: name, byName: map[string]int{}, data: data[8+n:]}
	if err := s.parseHeader(hdr); err != nil {
		return nil, bad("header: %v", err)
	}
	// Tile check: sorted by begin (then end, so empty tensors sort first), every tensor
	// starts where the previous one ended.
	sort.SliceStable(s.Tensors, func(i, j int) bool {
		a, b := s.Tensors[i], s.Tensors[j]
		if a.Begin != b.Begin {
			return a.Begin < b.Begin
		}
		return a.End < b.End
	})
	var end int64
	prev := ""
	for i, t := range s.Tensors {
		if t.Begin < end {
			return nil, bad("tensor %q: data_offsets [%d, %d] overlap tensor %q, which ends at %d", t.Name, t.Begin, t.End, prev, end)
		}
		if t.Begin > end {
			return nil, bad("tensor %q: data_offsets [%d, %d] leave a gap of %d bytes after %s", t.Name, t.Begin, t.End, t.Begin-end, describePrev(prev, end))
		}
		end = t.End
		prev = t.Name
		s.byName[t.Name] = i
	}
	if end != int64(len(s.data)) {
		if end > int64(len(s.data)) {
			return nil, bad("tensor %q ends at data offset %d, past the end of the data section (%d bytes): truncated?", prev, end, len(s.data))
		}
		return nil, bad("%d bytes follow the last tensor's data (%s)", int64(len(s.data))-end, describePrev(prev, end))
	}
	return s, nil
}

func describePrev(prev string, end int64) string {
	if prev == "" {
		return "the start of the data section"
	}
	return fmt.Sprintf("tensor %q (ends at %d)", prev, end)
}

// parseHeader reads the JSON object token by token, so that duplicate keys, unknown
// fields and non-integer numbers are caught rather than silently resolved.
func (s *Safetensors) parseHeader(hdr []byte) error {
	dec := json.NewDecoder(bytes.NewReader(hdr))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // '{', checked by the caller
		return err
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("not valid JSON: %v", err)
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("not valid JSON: expected a key, got %v", tok)
		}
		if seen[key] {
			return fmt.Errorf("key %q appears twice", key)
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("key %q: not valid JSON: %v", key, err)
		}
		if key == "__metadata__" {
			md, err := parseMetadata(raw)
			if err != nil {
				return err
			}
			s.Metadata = md
			continue
		}
		t, err := parseTensorEntry(key, raw, int64(len(s.data)))
		if err != nil {
			return err
		}
		s.Tensors = append(s.Tensors, t)
	}
	if _, err := dec.Token(); err != nil { // '}'
		return fmt.Errorf("not valid JSON: %v", err)
	}
	// Only padding may follow the object.
	for _, c := range hdr[dec.InputOffset():] {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return fmt.Errorf("unexpected data after the JSON object: %q", clip(hdr[dec.InputOffset():], 20))
		}
	}
	return nil
}

func clip(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

func parseMetadata(raw json.RawMessage) (map[string]string, error) {
	if string(raw) == "null" {
		return nil, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("__metadata__: want an object of strings: %v", err)
	}
	md := make(map[string]string, len(obj))
	for k, v := range obj {
		var str string
		if err := json.Unmarshal(v, &str); err != nil {
			return nil, fmt.Errorf("__metadata__[%q]: want a string, got %s", k, clip(v, 40))
		}
		md[k] = str
	}
	return md, nil
}

func parseTensorEntry(name string, raw json.RawMessage, dataLen int64) (STTensor, error) {
	t := STTensor{TensorInfo: TensorInfo{Name: name}}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("tensor %q: %s", name, fmt.Sprintf(format, args...))
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return t, bad("want an object with dtype, shape and data_offsets, got %s", clip(raw, 40))
	}
	for k := range obj {
		if k != "dtype" && k != "shape" && k != "data_offsets" {
			return t, bad("unknown field %q (allowed: dtype, shape, data_offsets)", k)
		}
	}
	for _, k := range []string{"dtype", "shape", "data_offsets"} {
		if _, ok := obj[k]; !ok {
			return t, bad("field %q is missing", k)
		}
	}
	var dt string
	if err := json.Unmarshal(obj["dtype"], &dt); err != nil {
		return t, bad("dtype: want a string, got %s", clip(obj["dtype"], 40))
	}
	if DType(dt).Size() == 0 {
		return t, bad("unknown dtype %q (known: %s)", dt, dtNames)
	}
	t.DType = DType(dt)
	shape, err := parseInts(obj["shape"])
	if err != nil {
		return t, bad("shape: %v", err)
	}
	t.Shape = shape
	offs, err := parseInts(obj["data_offsets"])
	if err != nil {
		return t, bad("data_offsets: %v", err)
	}
	if len(offs) != 2 {
		return t, bad("data_offsets: want [begin, end], got %d numbers", len(offs))
	}
	t.Begin, t.End = offs[0], offs[1]
	if t.Begin > t.End {
		return t, bad("data_offsets [%d, %d]: begin is after end", t.Begin, t.End)
	}
	if t.End > dataLen {
		return t, bad("data_offsets [%d, %d]: past the end of the data section (%d bytes): truncated?", t.Begin, t.End, dataLen)
	}
	want := t.Bytes()
	if want < 0 {
		return t, bad("shape %s of %s: the size overflows", t.shapeString(), t.DType)
	}
	if t.End-t.Begin != want {
		return t, bad("shape %s of %s needs %d bytes, data_offsets [%d, %d] hold %d", t.shapeString(), t.DType, want, t.Begin, t.End, t.End-t.Begin)
	}
	return t, nil
}

// parseInts reads a JSON array of non-negative integers that fit in int64.
func parseInts(raw json.RawMessage) ([]int64, error) {
	var nums []json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&nums); err != nil || nums == nil {
		return nil, fmt.Errorf("want an array of non-negative integers, got %s", clip(raw, 40))
	}
	out := make([]int64, len(nums))
	for i, n := range nums {
		v, err := n.Int64()
		if err != nil || v < 0 {
			return nil, fmt.Errorf("element %d (%s) is not a non-negative integer", i, n)
		}
		out[i] = v
	}
	return out, nil
}

// Lookup returns the tensor of that name.
func (s *Safetensors) Lookup(name string) (STTensor, bool) {
	i, ok := s.byName[name]
	if !ok {
		return STTensor{}, false
	}
	return s.Tensors[i], true
}

// Data returns the tensor's bytes in place (little-endian elements, not necessarily
// aligned). The slice is read-only memory: writing to it faults.
func (s *Safetensors) Data(t STTensor) []byte { return s.data[t.Begin:t.End:t.End] }

// Tensor returns a tensor's description and bytes, or an error wrapping ErrNotFound.
func (s *Safetensors) Tensor(name string) (TensorInfo, []byte, error) {
	t, ok := s.Lookup(name)
	if !ok {
		return TensorInfo{}, nil, fmt.Errorf("%w: %s: no tensor %q", ErrNotFound, s.Path, name)
	}
	return t.TensorInfo, s.Data(t), nil
}

// Close unmaps the file. Slices returned by Data become invalid.
func (s *Safetensors) Close() error {
	if s.mapped == nil {
		return nil
	}
	err := unix.Munmap(s.mapped)
	s.mapped, s.data = nil, nil
	if err != nil {
		return fmt.Errorf("%s: %w", s.Path, os.NewSyscallError("munmap", err))
	}
	return nil
}
