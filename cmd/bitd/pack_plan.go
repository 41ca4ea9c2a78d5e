package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode"

	"bitgo/kernels"
	"bitgo/paged"
	"bitgo/quantcfg"
)

// layerPlan is one linear layer to convert.
type layerPlan struct {
	spec     quantcfg.LayerSpec
	weight   string // checkpoint tensor holding W
	bias     string // its bias tensor, or ""
	wscale   string // BitNet weight_scale tensor, or ""
	packed   bool   // W is BitNet's uint8-packed ternary ([ceil(out/4), in] U8)
	inBytes  int64  // checkpoint bytes read for this layer
	outBytes int    // packed blob size
}

// tensorPlan is one tensor that stays unquantized: stored (floats as BF16) or external.
type tensorPlan struct {
	info  paged.TensorInfo // as in the checkpoint
	store bool
}

// packPlan is everything decided before the first byte is converted.
type packPlan struct {
	dir     string
	model   string
	method  string // "bitnet", "float" or "bitgo"
	bitnet  *quantcfg.BitNet
	cfg     quantcfg.Config // effective target settings (format, act, scale, codebook, skips)
	layers  []layerPlan
	tensors []tensorPlan
	ckpt    *paged.Checkpoint
	inBytes int64
}

// modelShape is what config.json says about the standard transformer projections; zero
// fields are unknown.
type modelShape struct {
	Hidden       int `json:"hidden_size"`
	Intermediate int `json:"intermediate_size"`
	Heads        int `json:"num_attention_heads"`
	KVHeads      int `json:"num_key_value_heads"`
	HeadDim      int `json:"head_dim"`
}

// expect returns the [out, in] shape config.json implies for a module, if it knows.
func (s modelShape) expect(module string) (out, in int, ok bool) {
	hd := s.HeadDim
	if hd == 0 && s.Heads > 0 {
		hd = s.Hidden / s.Heads
	}
	kv := s.KVHeads
	if kv == 0 {
		kv = s.Heads
	}
	suffix := module[strings.LastIndexByte(module, '.')+1:]
	switch {
	case s.Hidden == 0:
		return 0, 0, false
	case suffix == "q_proj" && hd > 0:
		return s.Heads * hd, s.Hidden, true
	case (suffix == "k_proj" || suffix == "v_proj") && hd > 0:
		return kv * hd, s.Hidden, true
	case suffix == "o_proj" && hd > 0:
		return s.Hidden, s.Heads * hd, true
	case (suffix == "gate_proj" || suffix == "up_proj") && s.Intermediate > 0:
		return s.Intermediate, s.Hidden, true
	case suffix == "down_proj" && s.Intermediate > 0:
		return s.Hidden, s.Intermediate, true
	}
	return 0, 0, false
}

// planPack reads config.json and the checkpoint's tensor index, classifies every tensor,
// and validates every layer's target spec, so that a bad flag or a bad checkpoint fails
// before any conversion work. Every error names the file and the tensor.
func planPack(o packOptions) (_ *packPlan, err error) {
	cfgPath := filepath.Join(o.Dir, "config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (a checkpoint directory needs config.json)", o.Dir, err)
	}
	var shape modelShape
	if err := json.Unmarshal(raw, &shape); err != nil {
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	pl := &packPlan{dir: o.Dir, model: o.Model}
	if pl.model == "" {
		pl.model = defaultModelName(o.Dir)
	}
	hq, err := quantcfg.ParseHFConfig(raw)
	switch {
	case errors.Is(err, quantcfg.ErrNoQuantConfig):
		pl.method = "float"
		if o.Format == "" {
			return nil, fmt.Errorf("%s has no quantization_config (a float checkpoint): give --format (i2s, tl1, tl2, int2, int1, int8, bf16, f32)", cfgPath)
		}
		pl.cfg = quantcfg.Config{ModulesToNotConvert: []string{"lm_head"}}
	case err != nil:
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	case hq.Method == quantcfg.MethodBitNet:
		pl.method, pl.bitnet, pl.cfg = "bitnet", hq.BitNet, hq.Config
	default:
		pl.method, pl.cfg = "bitgo", hq.Config
		if !containsStr(pl.cfg.ModulesToNotConvert, "lm_head") {
			pl.cfg.ModulesToNotConvert = append(pl.cfg.ModulesToNotConvert, "lm_head")
		}
	}
	if err := applyFlags(&pl.cfg, o); err != nil {
		return nil, err
	}
	pl.cfg.ModulesToNotConvert = append(pl.cfg.ModulesToNotConvert, o.Skip...)
	if err := pl.cfg.Validate(); err != nil {
		return nil, fmt.Errorf("target settings: %w", err)
	}
	packedInput := pl.method == "bitnet" && pl.bitnet.QuantizationMode == "offline"
	if packedInput {
		if err := ternaryTarget(pl.cfg); err != nil {
			return nil, fmt.Errorf("%s (a BitNet checkpoint of packed ternary weights): %w", cfgPath, err)
		}
	}

	ck, err := paged.OpenCheckpoint(o.Dir)
	if err != nil {
		return nil, err
	}
	pl.ckpt = ck
	defer func() {
		if err != nil {
			ck.Close()
		}
	}()
	used := map[string]bool{}
	names := ck.Names()
	sortNatural(names)
	for _, name := range names {
		t, _, _ := ck.Lookup(name)
		module, isWeight := strings.CutSuffix(name, ".weight")
		if !isWeight || len(t.Shape) != 2 {
			continue
		}
		var linear bool
		switch {
		case t.DType == paged.U8 && packedInput:
			linear = true
			if pl.cfg.Skips(module) {
				return nil, fmt.Errorf("%s: tensor %q holds packed ternary weights, but %q is in modules_to_not_convert (or --skip): it cannot stay unquantized", where(ck, name), name, module)
			}
		case t.DType.IsFloat() && !packedInput:
			linear = !pl.cfg.Skips(module) && !isEmbedding(module)
		}
		if !linear {
			continue
		}
		lp, err := planLayer(ck, pl, shape, module, t, packedInput)
		if err != nil {
			return nil, err
		}
		used[lp.weight] = true
		if lp.bias != "" {
			used[lp.bias] = true
		}
		if lp.wscale != "" {
			used[lp.wscale] = true
		}
		pl.layers = append(pl.layers, lp)
		pl.inBytes += lp.inBytes
	}
	if len(pl.layers) == 0 {
		return nil, fmt.Errorf("checkpoint %s: no linear layer to quantize (method %s; %d tensors, all skipped or not 2-D weights)", o.Dir, pl.method, len(names))
	}
	for _, name := range names {
		if used[name] {
			continue
		}
		t, _, _ := ck.Lookup(name)
		if packedInput && t.DType == paged.U8 && strings.HasSuffix(name, ".weight") {
			return nil, fmt.Errorf("%s: tensor %q: uint8 weight of shape %v is not a packed linear layer this tool understands", where(ck, name), name, t.Shape)
		}
		pl.tensors = append(pl.tensors, tensorPlan{info: t.TensorInfo, store: o.KeepUnquantized})
		if o.KeepUnquantized {
			pl.inBytes += t.End - t.Begin
		}
	}
	return pl, nil
}

// applyFlags overrides the config's target settings with the command-line flags.
func applyFlags(c *quantcfg.Config, o packOptions) error {
	if o.Format != "" {
		f, err := quantcfg.ParseFormat(o.Format)
		if err != nil {
			return fmt.Errorf("--format: %w", err)
		}
		if f != c.Format {
			// A new format: the config's other settings were meant for the old one.
			c.Format, c.Act, c.Scale, c.Codebook = f, quantcfg.ActMode{}, quantcfg.ScaleGran{}, nil
		}
	}
	if o.Act != "" {
		a, err := quantcfg.ParseActMode(o.Act)
		if err != nil {
			return fmt.Errorf("--act: %w", err)
		}
		c.Act = a
	}
	if o.Scale != "" {
		s, err := quantcfg.ParseScaleGran(o.Scale)
		if err != nil {
			return fmt.Errorf("--scale: %w", err)
		}
		c.Scale = s
	}
	if o.Codebook != "" {
		cb, err := parseCodebook(o.Codebook)
		if err != nil {
			return err
		}
		c.Codebook = cb
	}
	*c = c.WithDefaults()
	return nil
}

// ternaryTarget says whether packed ternary weights can go to the format without loss.
func ternaryTarget(c quantcfg.Config) error {
	switch {
	case c.Format.IsTernary(), c.Format == quantcfg.Int8:
		return nil
	case c.Format == quantcfg.Int2:
		for _, want := range []int8{-1, 0, 1} {
			if codeOf(*c.Codebook, want) < 0 {
				return fmt.Errorf("format int2 with code book %v cannot hold the ternary weight %d: use a code book containing -1, 0 and 1 (the default -2,-1,0,1 does)", *c.Codebook, want)
			}
		}
		return nil
	}
	return fmt.Errorf("format %s cannot hold ternary weights exactly: use i2s, tl1, tl2 (ternary), int2 or int8", c.Format)
}

func codeOf(cb quantcfg.Codebook, level int8) int {
	for c, v := range cb {
		if v == level {
			return c
		}
	}
	return -1
}

func planLayer(ck *paged.Checkpoint, pl *packPlan, shape modelShape, module string, t paged.STTensor, packed bool) (layerPlan, error) {
	name := t.Name
	lp := layerPlan{weight: name, packed: packed, inBytes: t.End - t.Begin}
	rows, in := int(t.Shape[0]), int(t.Shape[1])
	out := rows
	wantOut, wantIn, known := shape.expect(module)
	if packed {
		out = 4 * rows
		if known {
			out = wantOut
		}
		if (out+3)/4 != rows {
			return lp, fmt.Errorf("%s: tensor %q: packed shape [%d, %d] holds ceil(out/4) = %d rows, but config.json makes out_features %d (want %d packed rows)", where(ck, name), name, rows, in, rows, out, (out+3)/4)
		}
	}
	if known && (out != wantOut || in != wantIn) {
		return lp, fmt.Errorf("%s: tensor %q: shape %s means a %dx%d layer, config.json (hidden_size %d, intermediate_size %d, %d heads, %d kv heads) wants %dx%d",
			where(ck, name), name, shapeStr(t.Shape), out, in, shape.Hidden, shape.Intermediate, shape.Heads, shape.KVHeads, wantOut, wantIn)
	}
	if b, _, ok := ck.Lookup(module + ".bias"); ok {
		if !b.DType.IsFloat() || len(b.Shape) != 1 || int(b.Shape[0]) != out {
			return lp, fmt.Errorf("%s: tensor %q: %s %s, want a float vector of out_features = %d", where(ck, b.Name), b.Name, b.DType, shapeStr(b.Shape), out)
		}
		lp.bias = b.Name
		lp.inBytes += b.End - b.Begin
	}
	if packed {
		s, _, ok := ck.Lookup(module + ".weight_scale")
		if !ok {
			return lp, fmt.Errorf("%s: tensor %q holds packed ternary weights but %q is missing", where(ck, name), name, module+".weight_scale")
		}
		if !s.DType.IsFloat() || s.Elements() != 1 {
			return lp, fmt.Errorf("%s: tensor %q: %s %s, want one float (the per-tensor scale)", where(ck, s.Name), s.Name, s.DType, shapeStr(s.Shape))
		}
		lp.wscale = s.Name
		lp.inBytes += s.End - s.Begin
	} else if !t.DType.IsFloat() {
		return lp, fmt.Errorf("%s: tensor %q: dtype %s: float weights (F32, F16, BF16, F64) expected", where(ck, name), name, t.DType)
	}
	c := pl.cfg
	spec := quantcfg.LayerSpec{Name: module, Format: c.Format, Out: out, In: in, Act: c.Act, Scale: c.Scale, Bias: lp.bias != ""}
	if c.Format == quantcfg.Int2 {
		spec.Codebook = *c.Codebook
	}
	spec = spec.WithDefaults()
	if err := spec.Validate(); err != nil {
		return lp, fmt.Errorf("%s: tensor %q: %w", where(ck, name), name, err)
	}
	lay, err := kernels.NewLayout(spec.Format, out, in)
	if err != nil {
		return lp, fmt.Errorf("%s: tensor %q: %w", where(ck, name), name, err)
	}
	lp.spec, lp.outBytes = spec, lay.Bytes()
	return lp, nil
}

// isEmbedding recognizes embedding tables, which are 2-D weights but not linear layers.
func isEmbedding(module string) bool {
	last := module[strings.LastIndexByte(module, '.')+1:]
	return strings.Contains(last, "embed") || last == "wte" || last == "wpe"
}

// where names the file holding a tensor.
func where(ck *paged.Checkpoint, tensor string) string {
	if _, f, ok := ck.Lookup(tensor); ok {
		return f.Path
	}
	return ck.Dir
}

func shapeStr(s []int64) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// sortNatural sorts names with digit runs compared as numbers ("layers.2" < "layers.10").
func sortNatural(names []string) {
	sort.SliceStable(names, func(i, j int) bool { return naturalLess(names[i], names[j]) })
}

func naturalLess(a, b string) bool {
	for a != "" && b != "" {
		da, db := unicode.IsDigit(rune(a[0])), unicode.IsDigit(rune(b[0]))
		if da && db {
			na, ra := leadingDigits(a)
			nb, rb := leadingDigits(b)
			ta, tb := strings.TrimLeft(na, "0"), strings.TrimLeft(nb, "0")
			if len(ta) != len(tb) {
				return len(ta) < len(tb)
			}
			if ta != tb {
				return ta < tb
			}
			a, b = ra, rb
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func leadingDigits(s string) (digits, rest string) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i], s[i:]
}
