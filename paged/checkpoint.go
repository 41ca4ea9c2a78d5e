package paged

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// SafetensorsIndex is the name of a sharded checkpoint's index file.
const SafetensorsIndex = "model.safetensors.index.json"

// maxIndexSize bounds the index file (real ones are a few hundred kilobytes).
const maxIndexSize = 64 << 20

// Checkpoint is a Hugging Face checkpoint directory's tensors: either one safetensors file
// or the shards named by model.safetensors.index.json. All files stay mapped until Close.
type Checkpoint struct {
	Dir   string
	Files []*Safetensors // in the order of their names

	where map[string]*Safetensors
	names []string
}

// OpenCheckpoint opens the tensors of a checkpoint directory. It uses, in order:
// model.safetensors.index.json (sharded), model.safetensors, or the directory's only
// *.safetensors file. For a sharded checkpoint it checks that every shard named by the
// index exists and is valid, that every tensor of the weight_map lives in the shard the
// index names, and that no shard holds a tensor the index does not list or holds one twice.
func OpenCheckpoint(dir string) (*Checkpoint, error) {
	idx := filepath.Join(dir, SafetensorsIndex)
	if _, err := os.Stat(idx); err == nil {
		return openSharded(dir, idx)
	}
	single := filepath.Join(dir, "model.safetensors")
	if _, err := os.Stat(single); err != nil {
		matches, gerr := filepath.Glob(filepath.Join(dir, "*.safetensors"))
		if gerr != nil || len(matches) != 1 {
			if len(matches) > 1 {
				return nil, fmt.Errorf("%w: %s: %d .safetensors files but no %s to say how they fit together", ErrSafetensors, dir, len(matches), SafetensorsIndex)
			}
			return nil, fmt.Errorf("%w: %s: no %s, model.safetensors or other .safetensors file", ErrSafetensors, dir, SafetensorsIndex)
		}
		single = matches[0]
	}
	f, err := OpenSafetensors(single)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{Dir: dir, Files: []*Safetensors{f}, where: map[string]*Safetensors{}}
	for _, t := range f.Tensors {
		c.where[t.Name] = f
		c.names = append(c.names, t.Name)
	}
	sort.Strings(c.names)
	return c, nil
}

func openSharded(dir, idx string) (_ *Checkpoint, err error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrSafetensors, idx, fmt.Sprintf(format, args...))
	}
	st, err := os.Stat(idx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSafetensors, err)
	}
	if st.Size() > maxIndexSize {
		return nil, bad("%d bytes: larger than the %d-byte limit for an index", st.Size(), maxIndexSize)
	}
	raw, err := os.ReadFile(idx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSafetensors, err)
	}
	var index struct {
		Metadata  map[string]any    `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &index); err != nil {
		return nil, bad("not a valid index: %v", err)
	}
	if len(index.WeightMap) == 0 {
		return nil, bad("weight_map is missing or empty")
	}
	c := &Checkpoint{Dir: dir, where: map[string]*Safetensors{}}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	shards := map[string]*Safetensors{}
	var shardNames []string
	for tensor, file := range index.WeightMap {
		if file == "" || file != filepath.Base(file) || file == "." || file == ".." || strings.ContainsRune(file, '\\') {
			return nil, bad("tensor %q: shard %q is not a plain file name in the checkpoint directory", tensor, file)
		}
		if _, ok := shards[file]; !ok {
			shards[file] = nil
			shardNames = append(shardNames, file)
		}
	}
	sort.Strings(shardNames)
	for _, file := range shardNames {
		f, err := OpenSafetensors(filepath.Join(dir, file))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, bad("shard %q, named in weight_map, does not exist", file)
			}
			return nil, err
		}
		shards[file] = f
		c.Files = append(c.Files, f)
	}
	for _, file := range shardNames {
		f := shards[file]
		for _, t := range f.Tensors {
			want, listed := index.WeightMap[t.Name]
			switch {
			case !listed:
				return nil, bad("shard %q holds tensor %q, which weight_map does not list", file, t.Name)
			case want != file:
				return nil, bad("shard %q holds tensor %q, which weight_map places in %q", file, t.Name, want)
			}
			c.where[t.Name] = f
		}
	}
	for tensor, file := range index.WeightMap {
		if _, ok := c.where[tensor]; !ok {
			return nil, bad("tensor %q: weight_map places it in %q, which does not hold it", tensor, file)
		}
		c.names = append(c.names, tensor)
	}
	sort.Strings(c.names)
	return c, nil
}

// Names lists every tensor, sorted.
func (c *Checkpoint) Names() []string { return append([]string(nil), c.names...) }

// Lookup returns the tensor of that name and the file that holds it.
func (c *Checkpoint) Lookup(name string) (STTensor, *Safetensors, bool) {
	f, ok := c.where[name]
	if !ok {
		return STTensor{}, nil, false
	}
	t, ok := f.Lookup(name)
	return t, f, ok
}

// Tensor returns a tensor's description and its bytes in place, or an error wrapping
// ErrNotFound that names the directory.
func (c *Checkpoint) Tensor(name string) (TensorInfo, []byte, error) {
	t, f, ok := c.Lookup(name)
	if !ok {
		return TensorInfo{}, nil, fmt.Errorf("%w: checkpoint %s: no tensor %q", ErrNotFound, c.Dir, name)
	}
	return t.TensorInfo, f.Data(t), nil
}

// Close unmaps every file.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, f := range c.Files {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	return errors.Join(errs...)
}
