package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bitgo/engine"
	"bitgo/kernels"
	"bitgo/paged"
	"bitgo/quantcfg"
)

// The tests build small checkpoints themselves: a Llama-shaped model with hidden 64,
// intermediate 96, 4 heads and 2 kv heads (head_dim 16), two blocks, a 50-token vocabulary.

const (
	tHidden, tInter, tHeads, tKV, tBlocks, tVocab = 64, 96, 4, 2, 2, 50
)

func modelConfig(quant string) string {
	q := ""
	if quant != "" {
		q = `, "quantization_config": ` + quant
	}
	return fmt.Sprintf(`{"architectures": ["LlamaForCausalLM"], "hidden_size": %d, "intermediate_size": %d,
 "num_attention_heads": %d, "num_key_value_heads": %d, "num_hidden_layers": %d, "vocab_size": %d%s}`,
		tHidden, tInter, tHeads, tKV, tBlocks, tVocab, q)
}

type projShape struct {
	name    string
	out, in int
}

func projections() []projShape {
	var out []projShape
	for b := range tBlocks {
		p := fmt.Sprintf("model.layers.%d.", b)
		out = append(out,
			projShape{p + "self_attn.q_proj", tHidden, tHidden}, projShape{p + "self_attn.k_proj", tKV * 16, tHidden},
			projShape{p + "self_attn.v_proj", tKV * 16, tHidden}, projShape{p + "self_attn.o_proj", tHidden, tHidden},
			projShape{p + "mlp.gate_proj", tInter, tHidden}, projShape{p + "mlp.up_proj", tInter, tHidden},
			projShape{p + "mlp.down_proj", tHidden, tInter})
	}
	return out
}

func f32le(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func bf16le(v []float32) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], kernels.BF16(x))
	}
	return b
}

func f16le(v []float32) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], toHalf(x))
	}
	return b
}

// toHalf converts values that are exactly representable in binary16 (the tests only use
// such values).
func toHalf(f float32) uint16 {
	if f == 0 {
		return 0
	}
	bits := math.Float32bits(f)
	sign := uint16(bits>>16) & 0x8000
	exp := int(bits>>23&0xff) - 127 + 15
	return sign | uint16(exp)<<10 | uint16(bits>>13&0x3ff)
}

// bitnetPack is transformers' pack_weights: code w+1 of row i*R+j in bits 2i..2i+1 of
// packed row j, R = ceil(out/4).
func bitnetPack(w []int8, out, in int) ([]byte, int) {
	rows := (out + 3) / 4
	p := make([]byte, rows*in)
	for r := range out {
		i, j := r/rows, r%rows
		for c := range in {
			p[j*in+c] |= byte(w[r*in+c]+1) << (2 * i)
		}
	}
	return p, rows
}

// unquantizedEntries are the tensors every test model has besides its linear layers.
func unquantizedEntries(r *rand.Rand) []paged.STEntry {
	emb := randFloats(r, tVocab*tHidden, 1)
	var out []paged.STEntry
	out = append(out,
		paged.STEntry{TensorInfo: paged.TensorInfo{Name: "model.embed_tokens.weight", DType: paged.BF16, Shape: []int64{tVocab, tHidden}}, Data: bf16le(emb)},
		paged.STEntry{TensorInfo: paged.TensorInfo{Name: "lm_head.weight", DType: paged.BF16, Shape: []int64{tVocab, tHidden}}, Data: bf16le(randFloats(r, tVocab*tHidden, 1))},
		paged.STEntry{TensorInfo: paged.TensorInfo{Name: "model.norm.weight", DType: paged.F32, Shape: []int64{tHidden}}, Data: f32le(randFloats(r, tHidden, 1))})
	for b := range tBlocks {
		out = append(out, paged.STEntry{TensorInfo: paged.TensorInfo{Name: fmt.Sprintf("model.layers.%d.input_layernorm.weight", b), DType: paged.F32, Shape: []int64{tHidden}}, Data: f32le(randFloats(r, tHidden, 1))})
	}
	return out
}

func randFloats(r *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * scale)
	}
	return v
}

func randTernary(r *rand.Rand, n int) []int8 {
	q := make([]int8, n)
	for i := range q {
		q[i] = int8(r.IntN(3)) - 1
	}
	return q
}

// writeCheckpoint writes config.json and the entries, in two shards with an index when
// sharded is set.
func writeCheckpoint(t *testing.T, dir, config string, entries []paged.STEntry, sharded bool) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if !sharded {
		if err := paged.WriteSafetensors(filepath.Join(dir, "model.safetensors"), entries, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		return
	}
	half := len(entries) / 2
	wm := map[string]string{}
	for i, part := range [][]paged.STEntry{entries[:half], entries[half:]} {
		name := fmt.Sprintf("model-%05d-of-00002.safetensors", i+1)
		if err := paged.WriteSafetensors(filepath.Join(dir, name), part, nil); err != nil {
			t.Fatal(err)
		}
		for _, e := range part {
			wm[e.Name] = name
		}
	}
	if err := paged.WriteSafetensorsIndex(dir, wm, nil); err != nil {
		t.Fatal(err)
	}
}

func runCmd(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

// actQuant is the kernels' per-token activation quantization, written out from its
// definition (kernels/doc.go) as the tests' oracle.
func actQuant(x []float32) ([]int32, float32) {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	xs := float32(127) / max(amax, 1e-5)
	q := make([]int32, len(x))
	for i, v := range x {
		q[i] = int32(max(-128, min(127, math.RoundToEven(float64(v*xs)))))
	}
	return q, xs
}

// ternaryOracle is y = (float32(W_t . xq) * s) / xs (+ bias), per token.
func ternaryOracle(w []int8, out, in int, s float32, bias []float32, x []float32, n int) []float32 {
	y := make([]float32, n*out)
	for t := range n {
		xq, xs := actQuant(x[t*in : (t+1)*in])
		for m := range out {
			var acc int32
			for k := range in {
				acc += int32(w[m*in+k]) * xq[k]
			}
			v := float32(float32(acc)*s) / xs
			if bias != nil {
				v += bias[m]
			}
			y[t*out+m] = v
		}
	}
	return y
}

func loadAndCheck(t *testing.T, out string, want func(name string, x []float32, n int) []float32) {
	t.Helper()
	e, err := engine.New(engine.Config{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	lp, err := e.LoadPack(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(lp.IDs) != len(projections()) {
		t.Fatalf("%d layers loaded, want %d", len(lp.IDs), len(projections()))
	}
	r := rand.New(rand.NewPCG(99, 1))
	for _, p := range projections() {
		id, spec, err := e.Lookup(p.name)
		if err != nil {
			t.Fatal(err)
		}
		if spec.Out != p.out || spec.In != p.in {
			t.Fatalf("%s: %dx%d, want %dx%d", p.name, spec.Out, spec.In, p.out, p.in)
		}
		for _, n := range []int{1, 4} {
			x := randFloats(r, n*p.in, 1)
			got := make([]float32, n*p.out)
			if err := e.ForwardF32(id, x, n, got); err != nil {
				t.Fatal(err)
			}
			exp := want(p.name, x, n)
			for i := range exp {
				if math.Float32bits(got[i]) != math.Float32bits(exp[i]) {
					t.Fatalf("%s n=%d: y[%d] = %v, the reference math gives %v", p.name, n, i, got[i], exp[i])
				}
			}
		}
	}
}

func TestPackBitNetCheckpoint(t *testing.T) {
	for _, c := range []struct {
		name, class string
		sharded     bool
		args        []string
	}{
		{"bitlinear-i2s", "bitlinear", true, nil},
		{"bitlinear-tl2", "bitlinear", false, []string{"--format", "tl2"}},
		{"autobitlinear-tl1-bias", "autobitlinear", false, []string{"--format", "tl1"}},
		{"bitlinear-int2", "bitlinear", false, []string{"--format", "int2", "--scale", "row"}},
		{"bitlinear-int8", "bitlinear", false, []string{"--format", "int8"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(5, 6))
			dir := t.TempDir()
			type ref struct {
				w    []int8
				s    float32
				bias []float32
			}
			refs := map[string]ref{}
			var entries []paged.STEntry
			for _, p := range projections() {
				w := randTernary(r, p.out*p.in)
				packed, rows := bitnetPack(w, p.out, p.in)
				ws := kernels.RoundBF16(float32(0.5 + r.Float64()*4)) // stored as BF16
				entries = append(entries,
					paged.STEntry{TensorInfo: paged.TensorInfo{Name: p.name + ".weight", DType: paged.U8, Shape: []int64{int64(rows), int64(p.in)}}, Data: packed},
					paged.STEntry{TensorInfo: paged.TensorInfo{Name: p.name + ".weight_scale", DType: paged.BF16, Shape: []int64{1}}, Data: bf16le([]float32{ws})})
				rf := ref{w: w, s: 1 / ws}
				if c.class == "autobitlinear" {
					rf.s = ws
					if strings.HasSuffix(p.name, "up_proj") {
						b := randFloats(r, p.out, 1)
						entries = append(entries, paged.STEntry{TensorInfo: paged.TensorInfo{Name: p.name + ".bias", DType: paged.F32, Shape: []int64{int64(p.out)}}, Data: f32le(b)})
						rf.bias = make([]float32, p.out)
						for i, v := range b {
							rf.bias[i] = v * ws // autobitlinear scales the bias too
						}
					}
				}
				refs[p.name] = rf
			}
			entries = append(entries, unquantizedEntries(r)...)
			writeCheckpoint(t, dir, modelConfig(`{"quant_method": "bitnet", "linear_class": "`+c.class+`", "quantization_mode": "offline", "modules_to_not_convert": ["embed_tokens"]}`), entries, c.sharded)
			out := filepath.Join(t.TempDir(), "m.bitgo")
			code, stdout, stderr := runCmd(t, append([]string{"pack", dir, "-o", out, "--verify", "--progress", "log"}, c.args...)...)
			if code != 0 {
				t.Fatalf("pack: code %d\n%s\n%s", code, stdout, stderr)
			}
			if !strings.Contains(stdout, "14 layers") || !strings.Contains(stdout, "verified") || !strings.Contains(stderr, "packed") {
				t.Fatalf("output:\n%s\n%s", stdout, stderr)
			}
			p, err := paged.OpenPack(out, paged.OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Tensors) != 0 || len(p.External) != 5 || p.Metadata["source_method"] != "bitnet" {
				t.Errorf("tensors %d, external %d, metadata %v", len(p.Tensors), len(p.External), p.Metadata)
			}
			p.Close()
			loadAndCheck(t, out, func(name string, x []float32, n int) []float32 {
				rf := refs[name]
				var pp projShape
				for _, q := range projections() {
					if q.name == name {
						pp = q
					}
				}
				return ternaryOracle(rf.w, pp.out, pp.in, rf.s, rf.bias, x, n)
			})
		})
	}
}

// floatModel writes a float checkpoint (weights in dt) and returns the float32 values the
// checkpoint holds for every projection.
func floatModel(t *testing.T, dir string, dt paged.DType, quant string) map[string][]float32 {
	t.Helper()
	r := rand.New(rand.NewPCG(11, 12))
	vals := map[string][]float32{}
	var entries []paged.STEntry
	for _, p := range projections() {
		w := randFloats(r, p.out*p.in, 0.05)
		var data []byte
		switch dt {
		case paged.F32:
			data = f32le(w)
		case paged.BF16:
			for i := range w {
				w[i] = kernels.RoundBF16(w[i])
			}
			data = bf16le(w)
		case paged.F16:
			for i := range w {
				w[i] = float32(math.Round(float64(w[i])*4096) / 4096) // exact in binary16
			}
			data = f16le(w)
		}
		vals[p.name] = w
		entries = append(entries, paged.STEntry{TensorInfo: paged.TensorInfo{Name: p.name + ".weight", DType: dt, Shape: []int64{int64(p.out), int64(p.in)}}, Data: data})
	}
	entries = append(entries, unquantizedEntries(r)...)
	writeCheckpoint(t, dir, modelConfig(quant), entries, false)
	return vals
}

func shapeOf(name string) projShape {
	for _, p := range projections() {
		if p.name == name {
			return p
		}
	}
	panic(name)
}

func TestPackFloatCheckpointTernary(t *testing.T) {
	for _, dt := range []paged.DType{paged.F32, paged.BF16, paged.F16} {
		t.Run(string(dt), func(t *testing.T) {
			dir := t.TempDir()
			vals := floatModel(t, dir, dt, "")
			out := filepath.Join(t.TempDir(), "m.bitgo")
			if code, so, se := runCmd(t, "pack", "--format", "i2s", dir, "-o", out, "--verify", "--progress", "off", "--keep-unquantized"); code != 0 {
				t.Fatalf("code %d\n%s\n%s", code, so, se)
			}
			loadAndCheck(t, out, func(name string, x []float32, n int) []float32 {
				w, p := vals[name], shapeOf(name)
				// BitNet b1.58's absmean, written out: s = mean|W|, W_t = clamp(round(W/s)).
				var sum float64
				for _, v := range w {
					sum += math.Abs(float64(v))
				}
				s := max(float32(sum/float64(len(w))), 1e-5)
				wt := make([]int8, len(w))
				for i, v := range w {
					wt[i] = int8(max(-1, min(1, math.RoundToEven(float64(v/s)))))
				}
				return ternaryOracle(wt, p.out, p.in, s, nil, x, n)
			})
			// --keep-unquantized stored the rest, floats as BF16.
			p, err := paged.OpenPack(out, paged.OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if len(p.Tensors) != 5 || len(p.External) != 0 {
				t.Fatalf("tensors %d external %d", len(p.Tensors), len(p.External))
			}
			ck, _ := paged.OpenCheckpoint(dir)
			defer ck.Close()
			for _, name := range []string{"model.embed_tokens.weight", "model.norm.weight"} {
				pt, got, err := p.TensorData(name)
				if err != nil || pt.DType != paged.BF16 {
					t.Fatalf("%s: %+v %v", name, pt, err)
				}
				info, src, _ := ck.Tensor(name)
				f := make([]float32, info.Elements())
				paged.DecodeFloat32(f, src, info.DType)
				if !bytes.Equal(got, bf16le(f)) {
					t.Errorf("%s: stored bytes differ from the BF16 rounding of the source", name)
				}
			}
		})
	}
}

func TestPackFloatCheckpointOtherFormats(t *testing.T) {
	dir := t.TempDir()
	vals := floatModel(t, dir, paged.BF16, "")
	for _, c := range []struct {
		args []string
		spec quantcfg.LayerSpec
	}{
		{[]string{"--format", "int8"}, quantcfg.LayerSpec{Format: quantcfg.Int8}},
		{[]string{"--format", "int2", "--scale", "group:32", "--act", "per-group:32", "--codebook", "-3,-1,1,3"}, quantcfg.LayerSpec{Format: quantcfg.Int2, Scale: quantcfg.GroupScale(32), Act: quantcfg.PerGroup(32), Codebook: quantcfg.Codebook{-3, -1, 1, 3}}},
		{[]string{"--format", "int1", "--scale", "tensor", "--act", "per-tensor"}, quantcfg.LayerSpec{Format: quantcfg.Int1, Scale: quantcfg.PerTensorScale, Act: quantcfg.PerTensor}},
		{[]string{"--format", "tl1", "--scale", "row"}, quantcfg.LayerSpec{Format: quantcfg.TL1, Scale: quantcfg.PerRowScale}},
		{[]string{"--format", "bf16"}, quantcfg.LayerSpec{Format: quantcfg.BF16}},
		{[]string{"--format", "f32"}, quantcfg.LayerSpec{Format: quantcfg.F32}},
	} {
		t.Run(string(c.spec.Format), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "m.bitgo")
			if code, so, se := runCmd(t, append([]string{"pack", dir, "-o", out, "--verify", "--progress", "off", "--align", "4096"}, c.args...)...); code != 0 {
				t.Fatalf("code %d\n%s\n%s", code, so, se)
			}
			// The reference math: the kernels' quantization recipe and reference kernel.
			loadAndCheck(t, out, func(name string, x []float32, n int) []float32 {
				p := shapeOf(name)
				spec := c.spec
				spec.Name, spec.Out, spec.In = name, p.out, p.in
				spec = spec.WithDefaults()
				var w kernels.Weights
				var scales []float32
				var err error
				switch {
				case spec.Format.IsFloat():
					w.F = vals[name]
				case spec.Format.IsTernary():
					w.Q, scales, err = kernels.TernarizeRows(vals[name], p.out, p.in)
				default:
					w.Q, scales, err = kernels.QuantizeWeights(spec.Format, vals[name], p.out, p.in, spec.Scale, spec.Codebook)
				}
				if err != nil {
					t.Fatal(err)
				}
				blob, err := kernels.PackNew(spec.Format, p.out, p.in, w)
				if err != nil {
					t.Fatal(err)
				}
				kl, err := kernels.NewLayer(spec, blob, scales, nil)
				if err != nil {
					t.Fatal(err)
				}
				y, err := kernels.Reference(kl, x, n)
				if err != nil {
					t.Fatal(err)
				}
				return y
			})
		})
	}
}

// TestPackBitgoConfig: a checkpoint whose config.json says quant_method "bitgo" needs no
// --format, and its modules_to_not_convert are honoured.
func TestPackBitgoConfig(t *testing.T) {
	dir := t.TempDir()
	floatModel(t, dir, paged.F32, `{"quant_method": "bitgo", "format": "int8", "scale": "row", "modules_to_not_convert": ["down_proj"]}`)
	out := filepath.Join(t.TempDir(), "m.bitgo")
	if code, so, se := runCmd(t, "pack", dir, "-o", out, "--progress", "off"); code != 0 {
		t.Fatalf("code %d\n%s\n%s", code, so, se)
	}
	p, err := paged.OpenPack(out, paged.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if len(p.Layers) != 12 || p.Layers[0].Spec.Format != quantcfg.Int8 {
		t.Fatalf("%d layers, first %+v", len(p.Layers), p.Layers[0].Spec)
	}
	if _, ok := p.Layer("model.layers.0.mlp.down_proj"); ok {
		t.Error("down_proj was quantized despite modules_to_not_convert")
	}
	if len(p.External) != 7 {
		t.Errorf("%d external tensors, want 5 + 2 down_proj", len(p.External))
	}
	// Natural order: layers.0 ... then layers.1.
	if !strings.HasPrefix(p.Layers[0].Spec.Name, "model.layers.0.") || !strings.HasPrefix(p.Layers[11].Spec.Name, "model.layers.1.") {
		t.Errorf("order: %s ... %s", p.Layers[0].Spec.Name, p.Layers[11].Spec.Name)
	}
}

func TestPackBadInput(t *testing.T) {
	bitnetCfg := modelConfig(`{"quant_method": "bitnet", "linear_class": "bitlinear"}`)
	good := func(r *rand.Rand) []paged.STEntry {
		var e []paged.STEntry
		for _, p := range projections() {
			packed, rows := bitnetPack(randTernary(r, p.out*p.in), p.out, p.in)
			e = append(e,
				paged.STEntry{TensorInfo: paged.TensorInfo{Name: p.name + ".weight", DType: paged.U8, Shape: []int64{int64(rows), int64(p.in)}}, Data: packed},
				paged.STEntry{TensorInfo: paged.TensorInfo{Name: p.name + ".weight_scale", DType: paged.F32, Shape: []int64{1}}, Data: f32le([]float32{2})})
		}
		return e
	}
	find := func(e []paged.STEntry, name string) int {
		for i := range e {
			if e[i].Name == name {
				return i
			}
		}
		panic(name)
	}
	for _, c := range []struct {
		name   string
		config string
		edit   func([]paged.STEntry) []paged.STEntry
		args   []string
		want   []string
	}{
		{"code 3", bitnetCfg, func(e []paged.STEntry) []paged.STEntry {
			i := find(e, "model.layers.1.mlp.up_proj.weight")
			e[i].Data = append([]byte(nil), e[i].Data...)
			e[i].Data[70] |= 0xc0
			return e
		}, nil, []string{`"model.layers.1.mlp.up_proj.weight"`, "code 3", "packed row 1, column 6", "model.safetensors"}},
		{"missing weight_scale", bitnetCfg, func(e []paged.STEntry) []paged.STEntry {
			i := find(e, "model.layers.0.self_attn.k_proj.weight_scale")
			return append(e[:i], e[i+1:]...)
		}, nil, []string{`"model.layers.0.self_attn.k_proj.weight_scale" is missing`}},
		{"weight_scale shape", bitnetCfg, func(e []paged.STEntry) []paged.STEntry {
			i := find(e, "model.layers.0.self_attn.k_proj.weight_scale")
			e[i] = paged.STEntry{TensorInfo: paged.TensorInfo{Name: e[i].Name, DType: paged.F32, Shape: []int64{2}}, Data: f32le([]float32{1, 2})}
			return e
		}, nil, []string{"k_proj.weight_scale", "want one float"}},
		{"zero weight_scale", bitnetCfg, func(e []paged.STEntry) []paged.STEntry {
			i := find(e, "model.layers.0.self_attn.v_proj.weight_scale")
			e[i].Data = f32le([]float32{0})
			return e
		}, nil, []string{"v_proj.weight_scale", "positive and finite"}},
		{"shape vs config", bitnetCfg, func(e []paged.STEntry) []paged.STEntry {
			i := find(e, "model.layers.1.self_attn.k_proj.weight")
			e[i] = paged.STEntry{TensorInfo: paged.TensorInfo{Name: e[i].Name, DType: paged.U8, Shape: []int64{16, tHidden}}, Data: make([]byte, 16*tHidden)}
			return e
		}, nil, []string{`"model.layers.1.self_attn.k_proj.weight"`, "config.json makes out_features 32"}},
		{"lossy target", bitnetCfg, nil, []string{"--format", "int1"}, []string{"int1 cannot hold ternary weights"}},
		{"bad codebook target", bitnetCfg, nil, []string{"--format", "int2", "--codebook", "-3,-1,1,3"}, []string{"cannot hold the ternary weight 0"}},
		{"bad act", bitnetCfg, nil, []string{"--act", "per-group:64", "--format", "tl1"}, []string{"act", "per-group:64"}},
		{"float without format", modelConfig(""), func(e []paged.STEntry) []paged.STEntry {
			return []paged.STEntry{{TensorInfo: paged.TensorInfo{Name: "model.layers.0.self_attn.q_proj.weight", DType: paged.F32, Shape: []int64{tHidden, tHidden}}, Data: make([]byte, 4*tHidden*tHidden)}}
		}, nil, []string{"no quantization_config", "give --format"}},
		{"float NaN", modelConfig(""), func(e []paged.STEntry) []paged.STEntry {
			w := make([]float32, tHidden*tHidden)
			w[77] = float32(math.NaN())
			return []paged.STEntry{{TensorInfo: paged.TensorInfo{Name: "model.layers.0.self_attn.q_proj.weight", DType: paged.F32, Shape: []int64{tHidden, tHidden}}, Data: f32le(w)}}
		}, []string{"--format", "i2s"}, []string{`"model.layers.0.self_attn.q_proj.weight"`, "NaN"}},
		{"float shape vs config", modelConfig(""), func(e []paged.STEntry) []paged.STEntry {
			return []paged.STEntry{{TensorInfo: paged.TensorInfo{Name: "model.layers.0.mlp.down_proj.weight", DType: paged.F32, Shape: []int64{tHidden, 80}}, Data: make([]byte, 4*tHidden*80)}}
		}, []string{"--format", "i2s"}, []string{`"model.layers.0.mlp.down_proj.weight"`, "wants 64x96"}},
		{"bias length", modelConfig(""), func(e []paged.STEntry) []paged.STEntry {
			return []paged.STEntry{
				{TensorInfo: paged.TensorInfo{Name: "x.proj.weight", DType: paged.F32, Shape: []int64{8, 32}}, Data: make([]byte, 4*8*32)},
				{TensorInfo: paged.TensorInfo{Name: "x.proj.bias", DType: paged.F32, Shape: []int64{7}}, Data: make([]byte, 4*7)}}
		}, []string{"--format", "i2s"}, []string{`"x.proj.bias"`, "out_features = 8"}},
		{"nothing to quantize", modelConfig(""), func(e []paged.STEntry) []paged.STEntry {
			return []paged.STEntry{{TensorInfo: paged.TensorInfo{Name: "model.norm.weight", DType: paged.F32, Shape: []int64{4}}, Data: make([]byte, 16)}}
		}, []string{"--format", "i2s"}, []string{"no linear layer"}},
		{"group too large for i2s", modelConfig(""), nil, []string{"--format", "i2s", "--scale", "group:64"}, []string{"scale", "group:64"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			dir := t.TempDir()
			e := good(r)
			if c.edit != nil {
				e = c.edit(e)
			}
			writeCheckpoint(t, dir, c.config, e, false)
			out := filepath.Join(t.TempDir(), "m.bitgo")
			code, so, se := runCmd(t, append([]string{"pack", dir, "-o", out, "--progress", "off"}, c.args...)...)
			if code != 1 {
				t.Fatalf("code %d, want 1\n%s\n%s", code, so, se)
			}
			for _, w := range c.want {
				if !strings.Contains(se, w) {
					t.Errorf("stderr %q lacks %q", se, w)
				}
			}
			if _, err := os.Stat(out); err == nil {
				t.Error("a failed pack left its output file")
			}
			if left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".*")); len(left) != 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
	// A corrupt safetensors header names the file.
	dir := t.TempDir()
	writeCheckpoint(t, dir, bitnetCfg, good(rand.New(rand.NewPCG(1, 2))), false)
	st := filepath.Join(dir, "model.safetensors")
	b, _ := os.ReadFile(st)
	b[9] = 'X'
	os.WriteFile(st, b, 0o644)
	code, _, se := runCmd(t, "pack", dir, "-o", filepath.Join(dir, "m.bitgo"))
	if code != 1 || !strings.Contains(se, st) || !strings.Contains(se, "bad safetensors file") {
		t.Errorf("corrupt safetensors: code %d, %s", code, se)
	}
	// Usage errors.
	for _, args := range [][]string{{"pack"}, {"pack", dir}, {"pack", dir, "x", "-o", "y"}, {"pack", dir, "-o", "y", "--progress", "loud"}, {"pack", dir, "-o", "y", "--threads", "0"}} {
		if code, _, _ := runCmd(t, args...); code != 2 {
			t.Errorf("%v: code %d, want 2", args, code)
		}
	}
	if code, _, _ := runCmd(t, "pack", "-o", "y", "/nonexistent/dir"); code != 1 {
		t.Errorf("missing dir: code %d", code)
	}
}

// TestPackVerifyCatchesMismatch changes the checkpoint after packing: --verify's
// comparison (not the checksums, which still hold) must notice.
func TestPackVerifyCatchesMismatch(t *testing.T) {
	dir := t.TempDir()
	floatModel(t, dir, paged.F32, "")
	out := filepath.Join(t.TempDir(), "m.bitgo")
	o := packOptions{Dir: dir, Out: out, Format: "int8", Threads: 2, NoSync: true}
	if _, err := packModel(o, noProgress{}); err != nil {
		t.Fatal(err)
	}
	floatModel(t, dir, paged.BF16, "") // different values, same shapes
	pl, err := planPack(o)
	if err != nil {
		t.Fatal(err)
	}
	defer pl.ckpt.Close()
	err = verifyPack(pl, o)
	if err == nil || !strings.Contains(err.Error(), "differ from a fresh conversion") {
		t.Fatalf("verify after the source changed: %v", err)
	}
}

func TestPackProgressBar(t *testing.T) {
	var b bytes.Buffer
	p := newProgress("bar", &b)
	p.start(3, 300)
	p.step("a", "", 100)
	p.step("b", "", 100)
	p.step("c", "", 100)
	p.finish(nil)
	if s := b.String(); !strings.Contains(s, "\r") || !strings.Contains(s, "100%") || !strings.Contains(s, "3/3") {
		t.Fatalf("bar output %q", s)
	}
	if isTerminal(&b) {
		t.Error("a buffer is not a terminal")
	}
	var l bytes.Buffer
	p = newProgress("auto", &l)
	p.start(1, 10)
	p.step("layer.x", "i2s 32x32", 10)
	p.finish(errors.New("boom"))
	if s := l.String(); !strings.Contains(s, "name=layer.x") || !strings.Contains(s, "pack failed") {
		t.Fatalf("log output %q", s)
	}
}

func TestNaturalOrder(t *testing.T) {
	names := []string{"model.layers.10.a", "model.layers.2.b", "model.layers.2.a", "lm_head", "model.layers.01.a"}
	sortNatural(names)
	want := "lm_head model.layers.01.a model.layers.2.a model.layers.2.b model.layers.10.a"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("%s\nwant %s", got, want)
	}
}

// TestUnpackBitNet checks the word-at-a-time unpacking against the definition, over
// widths that exercise the 8-byte path and the byte tail, and finds a code 3 anywhere.
func TestUnpackBitNet(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, k := range []int{1, 7, 8, 13, 64, 77} {
		for _, m := range []int{1, 4, 5, 34} {
			w := randTernary(r, m*k)
			packed, rows := bitnetPack(w, m, k)
			q := make([]int8, m*k)
			if err := unpackBitNet(q, packed, rows, m, k); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(unsafeBytes(q), unsafeBytes(w)) {
				t.Fatalf("m=%d k=%d: unpacked weights differ", m, k)
			}
			// A code 3 in any valid row and column is refused with its position.
			row, col := r.IntN(m), r.IntN(k)
			bad := append([]byte(nil), packed...)
			i, j := row/rows, row%rows
			bad[j*k+col] |= 3 << (2 * i)
			err := unpackBitNet(q, bad, rows, m, k)
			want := fmt.Sprintf("packed row %d, column %d, bits %d-%d hold code 3 (output row %d)", j, col, 2*i, 2*i+1, row)
			if !errors.Is(err, kernels.ErrWeights) || !strings.Contains(err.Error(), want) {
				t.Fatalf("m=%d k=%d: %v, want %q", m, k, err, want)
			}
		}
	}
}

func unsafeBytes(q []int8) []byte {
	b := make([]byte, len(q))
	for i, v := range q {
		b[i] = byte(v)
	}
	return b
}

// TestPackBitNetOnline: quant_method bitnet with quantization_mode online has float
// weights, ternarized by absmean at pack time.
func TestPackBitNetOnline(t *testing.T) {
	dir := t.TempDir()
	floatModel(t, dir, paged.BF16, `{"quant_method": "bitnet", "linear_class": "autobitlinear", "quantization_mode": "online"}`)
	out := filepath.Join(t.TempDir(), "m.bitgo")
	if code, so, se := runCmd(t, "pack", dir, "-o", out, "--progress", "off", "--verify"); code != 0 {
		t.Fatalf("code %d\n%s\n%s", code, so, se)
	}
	p, err := paged.OpenPack(out, paged.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if len(p.Layers) != 14 || p.Layers[0].Spec.Format != quantcfg.I2S || len(p.Layers[0].Scales) != 1 {
		t.Fatalf("%d layers, %+v", len(p.Layers), p.Layers[0])
	}
}
