package quantcfg

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the .golden files in testdata")

// TestGolden parses every testdata/*.json with ParseHFConfig and compares the outcome
// (the parsed HFQuant as indented JSON, or "error: ...") with testdata/*.golden.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var got string
			q, err := ParseHFConfig(data)
			if err != nil {
				got = "error: " + err.Error() + "\n"
			} else {
				b, _ := json.MarshalIndent(q, "", "  ")
				got = string(b) + "\n"
			}
			golden := strings.TrimSuffix(f, ".json") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./quantcfg -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("%s:\n got: %s\nwant: %s", f, got, want)
			}
		})
	}
}

func TestGoldenErrorsWrapSentinels(t *testing.T) {
	for file, want := range map[string]error{
		"no_quant.json":           ErrNoQuantConfig,
		"gptq.json":               ErrConfig,
		"not_json.json":           ErrConfig,
		"bitgo_bad_format.json":   ErrInvalid,
		"bitgo_lut_pergroup.json": ErrUnsupported,
	} {
		data, err := os.ReadFile(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseHFConfig(data); !errors.Is(err, want) {
			t.Errorf("%s: error %v does not wrap %v", file, err, want)
		}
	}
}

func TestParseModes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want ActMode
		bad  bool
	}{
		{"per-token", PerToken, false},
		{" Per-Tensor ", PerTensor, false},
		{"per-group:64", PerGroup(64), false},
		{"none", NoAct, false},
		{"", ActMode{}, false},
		{"per-group:0", ActMode{}, true},
		{"per-group:48", ActMode{}, true},
		{"per-group:x", ActMode{}, true},
		{"per-group", ActMode{}, true},
		{"per-row", ActMode{}, true},
	} {
		got, err := ParseActMode(c.in)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("ParseActMode(%q) = %v, %v; want %v, bad=%v", c.in, got, err, c.want, c.bad)
		}
		if err != nil && !strings.Contains(err.Error(), "per-token") {
			t.Errorf("ParseActMode(%q) error %q does not list the allowed values", c.in, err)
		}
	}
	for _, c := range []struct {
		in   string
		want ScaleGran
		bad  bool
	}{
		{"tensor", PerTensorScale, false},
		{"ROW", PerRowScale, false},
		{"group:128", GroupScale(128), false},
		{"none", NoScale, false},
		{"group:-32", ScaleGran{}, true},
		{"channel", ScaleGran{}, true},
	} {
		got, err := ParseScaleGran(c.in)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("ParseScaleGran(%q) = %v, %v; want %v, bad=%v", c.in, got, err, c.want, c.bad)
		}
	}
	if n := GroupScale(128).Count(10, 1600); n != 10*13 {
		t.Errorf("group:128 count for 10x1600 = %d, want 130 (ragged last group)", n)
	}
}

func TestFormats(t *testing.T) {
	want := []Format{I2S, TL1, TL2, Int2, Int1, Int8, BF16, F32}
	fs := Formats()
	if len(fs) != len(want) {
		t.Fatalf("%d formats, want %d", len(fs), len(want))
	}
	for i, fi := range fs {
		if fi.Format != want[i] {
			t.Errorf("format %d = %s, want %s", i, fi.Format, want[i])
		}
		if err := (Config{Format: fi.Format}).Validate(); err != nil {
			t.Errorf("default config of %s is invalid: %v", fi.Format, err)
		}
	}
	if _, err := ParseFormat("q4_0"); err == nil || !strings.Contains(err.Error(), "i2s, tl1, tl2, int2, int1, int8, bf16, f32") {
		t.Errorf("ParseFormat(q4_0) error does not list the formats: %v", err)
	}
	if TL2Bits := (FormatInfo{BitsNum: 5, BitsDen: 3}).Bits(); TL2Bits < 1.66 || TL2Bits > 1.67 {
		t.Errorf("tl2 bits = %v", TL2Bits)
	}
}

func TestValidateNamesFieldAndAllowed(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want []string
	}{
		{Config{Format: "x"}, []string{"format", "i2s"}},
		{Config{Format: TL1, Act: PerGroup(64)}, []string{"act", "per-group:64", "per-token, per-tensor"}},
		{Config{Format: I2S, Scale: GroupScale(64)}, []string{"scale", "group:64", "tensor, row"}},
		{Config{Format: BF16, Act: PerToken}, []string{"act", "none"}},
		{Config{Format: Int2, Act: PerGroup(96), Scale: GroupScale(64)}, []string{"multiple of the other"}},
		{Config{Format: I2S, Act: PerGroup(64)}, []string{"multiple of 128"}},
		{Config{Format: Int8, Codebook: &Codebook{1, 2, 3, 4}}, []string{"codebook", "only int2"}},
		{Config{Format: Int2, Codebook: &Codebook{1, 2, 2, 4}}, []string{"codebook", "distinct"}},
		{Config{Format: I2S, ModulesToNotConvert: []string{" "}}, []string{"modules_to_not_convert[0]"}},
	} {
		err := c.cfg.Validate()
		if err == nil {
			t.Errorf("%+v: no error", c.cfg)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: error %q lacks %q", c.cfg, err, w)
			}
		}
	}
}

func TestLayerSpecShapes(t *testing.T) {
	// Every real-model dimension is servable in every format.
	dims := []int{1600, 2048, 2560, 4096, 6912, 8192, 14336, 128256}
	for _, fi := range Formats() {
		for _, m := range dims {
			for _, k := range dims[:7] {
				s := LayerSpec{Name: "l", Format: fi.Format, Out: m, In: k}.WithDefaults()
				if err := s.Validate(); err != nil {
					t.Errorf("%s %dx%d: %v", fi.Format, m, k, err)
				}
			}
		}
	}
	for _, c := range []struct {
		s    LayerSpec
		want string
	}{
		{LayerSpec{Name: "q", Format: I2S, Out: 0, In: 64}, "out_features (M) = 0"},
		{LayerSpec{Name: "q", Format: I2S, Out: 64, In: -1}, "in_features (K) = -1"},
		{LayerSpec{Name: "big", Format: Int8, Out: 64, In: 1 << 17}, "format int8 takes K <= 65536"},
		{LayerSpec{Name: "huge", Format: F32, Out: MaxDim + 1, In: 64}, "out_features (M) = 1048577"},
	} {
		err := c.s.WithDefaults().Validate()
		if err == nil || !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "layer "+c.s.Name) {
			t.Errorf("%+v: error %v, want ErrShape naming the layer and %q", c.s, err, c.want)
		}
	}
}

func TestSkips(t *testing.T) {
	c := Config{Format: I2S, ModulesToNotConvert: []string{"lm_head", "embed_tokens"}}
	for name, want := range map[string]bool{
		"lm_head": true, "model.embed_tokens": true, "model.layers.0.self_attn.q_proj": false,
	} {
		if c.Skips(name) != want {
			t.Errorf("Skips(%q) = %v", name, !want)
		}
	}
}

func FuzzParseHFConfig(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.json")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		q, err := ParseHFConfig(data)
		if err != nil {
			return
		}
		if err := q.Config.Validate(); err != nil {
			t.Fatalf("accepted config does not validate: %v", err)
		}
	})
}
