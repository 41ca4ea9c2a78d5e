package paged

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParsePack feeds arbitrary files to the pack reader. With fixCRC set, the fuzzer's
// bytes get a valid preamble and header checksum, so mutations get past the checksums.
// Every outcome must be a file that validates or an error wrapping one of the package's
// sentinels; never a panic, a hang or a huge allocation.
func FuzzParsePack(f *testing.F) {
	f.Add(buildPack(validWire(), 16384), false)
	f.Add(buildPack(validWire(), 16384), true)
	f.Add(rawPack(mustMarshal(map[string]any{"model": "", "layout": "", "align": 4096, "layers": []any{}, "tensors": []any{}})), true)
	f.Add([]byte(PackMagic), false)
	f.Fuzz(func(t *testing.T, data []byte, fixCRC bool) {
		if fixCRC && len(data) >= PreambleSize {
			hoff, hlen := binary.LittleEndian.Uint64(data[16:]), binary.LittleEndian.Uint64(data[24:])
			if hoff >= PreambleSize && hoff <= uint64(len(data)) && hlen <= uint64(len(data))-hoff {
				binary.LittleEndian.PutUint32(data[32:], CRC32C(data[hoff:hoff+hlen]))
			}
			binary.LittleEndian.PutUint32(data[60:], CRC32C(data[:60]))
		}
		checkParsed(t, data)
	})
}

// FuzzPackHeader mutates only the msgpack header: the target wraps it in a file with 16 KiB
// of zero blob area and valid checksums, so the fuzzer spends its effort on the decoder
// and the header checks rather than on bytes of padding.
func FuzzPackHeader(f *testing.F) {
	f.Add(mustMarshal(validWire()))
	w := validWire()
	w.External = []wireExternal{{Name: "e", DType: "BF16", Shape: []uint64{2, 3}}}
	w.Metadata = map[string]string{"k": "v"}
	w.CreatedBy = "fuzz"
	f.Add(mustMarshal(w))
	w.Layers[1].Scale = "group:64"
	w.Layers[1].Scales = make([]float32, 64)
	f.Add(mustMarshal(w))
	f.Fuzz(func(t *testing.T, hdr []byte) {
		const blobEnd = 16384
		data := make([]byte, blobEnd, blobEnd+len(hdr))
		data = append(data, hdr...)
		pre := preamble{Major: PackMajor, HeaderOffset: blobEnd, HeaderLength: uint64(len(hdr)), HeaderCRC: CRC32C(hdr)}.encode()
		copy(data, pre[:])
		checkParsed(t, data)
	})
}

func checkParsed(t *testing.T, data []byte) {
	p, err := ParsePack("fuzz.bitgo", data)
	if err != nil {
		if !errors.Is(err, ErrPack) && !errors.Is(err, ErrPackVersion) && !errors.Is(err, ErrChecksum) {
			t.Fatalf("error wraps no sentinel: %v", err)
		}
		return
	}
	// An accepted file is self-consistent: every blob is inside it, every layer valid.
	for _, l := range p.Layers {
		if err := checkLayer(l); err != nil {
			t.Fatalf("accepted layer fails its own check: %v", err)
		}
		b, err := p.LayerBlob(l.Spec.Name)
		if err != nil || int64(len(b)) != l.Blob.Length {
			t.Fatalf("layer %q: %v", l.Spec.Name, err)
		}
	}
	for _, pt := range p.Tensors {
		if _, b, err := p.TensorData(pt.Name); err != nil || int64(len(b)) != pt.Bytes() {
			t.Fatalf("tensor %q: %v", pt.Name, err)
		}
	}
	if err := p.Verify(); err != nil && !errors.Is(err, ErrChecksum) {
		t.Fatalf("Verify: %v", err)
	}
}

// FuzzParseSafetensors feeds arbitrary files to the safetensors reader: each must be
// refused with ErrSafetensors or accepted with every tensor inside the data section.
func FuzzParseSafetensors(f *testing.F) {
	t8 := `"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}`
	f.Add(stFile(`{`+t8+`}`, make([]byte, 8)))
	f.Add(stFile(`{"__metadata__":{"format":"pt"},`+t8+`,"u":{"dtype":"BF16","shape":[2,1],"data_offsets":[8,12]}}  `, make([]byte, 12)))
	f.Add(stFile(`{}`, nil))
	f.Add(stFile(`{"t":{"dtype":"F64","shape":[],"data_offsets":[0,8]}}`, make([]byte, 8)))
	if dir, err := os.MkdirTemp("", "fuzzst"); err == nil {
		path := filepath.Join(dir, "m.safetensors")
		if WriteSafetensors(path, sampleEntries(), map[string]string{"a": "b"}) == nil {
			if b, err := os.ReadFile(path); err == nil {
				f.Add(b)
			}
		}
		os.RemoveAll(dir)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSafetensors("fuzz.safetensors", data)
		if err != nil {
			if !errors.Is(err, ErrSafetensors) {
				t.Fatalf("error wraps no sentinel: %v", err)
			}
			return
		}
		var total int64
		for _, tt := range s.Tensors {
			d := s.Data(tt)
			if int64(len(d)) != tt.Bytes() {
				t.Fatalf("tensor %q: %d bytes, shape says %d", tt.Name, len(d), tt.Bytes())
			}
			total += int64(len(d))
		}
		if total != int64(len(s.data)) {
			t.Fatalf("tensors cover %d of %d data bytes", total, len(s.data))
		}
	})
}
