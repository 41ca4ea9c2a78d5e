package quantcfg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Method is a quantization_config's quant_method.
type Method string

// The quant_method values bitgo reads.
const (
	MethodBitgo  Method = "bitgo"  // our schema (Config)
	MethodBitNet Method = "bitnet" // transformers' BitNet integration
)

// ErrNoQuantConfig: the config.json has no quantization_config (a float checkpoint).
var ErrNoQuantConfig = errors.New("config.json has no quantization_config")

// BitNet describes a transformers BitNet checkpoint (quant_method "bitnet").
//
// Its linear weights are ternary, stored 4 per uint8 as the codes w+1 in {0,1,2} and packed
// along out_features in block layout: with R = ceil(out/4), packed row j, bits 2i..2i+1,
// hold output row i*R + j (so a [out, in] weight is stored as [R, in] uint8). Each linear
// layer has a per-tensor weight_scale. Activations are int8 per token (absmax).
type BitNet struct {
	// LinearClass is "bitlinear" or "autobitlinear".
	LinearClass string `json:"linear_class"`
	// QuantizationMode is "offline" (packed ternary weights + weight_scale in the
	// checkpoint) or "online" (float weights, ternarized by absmean when loaded).
	QuantizationMode string `json:"quantization_mode"`
	// UseRMSNorm: an RMSNorm (eps RMSNormEps) is applied to each linear layer's input. It is
	// part of the model code, which stays in the host framework.
	UseRMSNorm bool    `json:"use_rms_norm"`
	RMSNormEps float64 `json:"rms_norm_eps"`
	// WeightScaleInverse tells how to read weight_scale. bitlinear computes
	// y = (xq . W_t) / (weight_scale * s_x): weight_scale is the inverse of the absmean
	// scale. autobitlinear computes y = (x_deq . W_t + b) * weight_scale: weight_scale is
	// the absmean scale itself (and scales the bias too).
	WeightScaleInverse bool `json:"weight_scale_inverse"`
}

// HFQuant is what a config.json's quantization_config says, in bitgo's terms.
type HFQuant struct {
	Method Method `json:"method"`
	// Config is the effective bitgo configuration (defaults filled in). For BitNet
	// checkpoints it is i2s, per-token activations, per-tensor scales: the lossless
	// target; `bitd pack --format` may pick another ternary format.
	Config Config  `json:"config"`
	BitNet *BitNet `json:"bitnet,omitempty"`
}

var bitgoKeys = []string{"quant_method", "format", "act", "scale", "codebook", "modules_to_not_convert"}

// ParseHFConfig reads the quantization_config of a Hugging Face config.json. It returns
// ErrNoQuantConfig (wrapped) when there is none, and an error listing the supported
// methods for any other quant_method.
func ParseHFConfig(configJSON []byte) (HFQuant, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(configJSON, &top); err != nil {
		return HFQuant{}, fmt.Errorf("%w: config.json is not a JSON object: %v", ErrConfig, err)
	}
	raw, ok := top["quantization_config"]
	if !ok || string(raw) == "null" {
		return HFQuant{}, ErrNoQuantConfig
	}
	return ParseQuantizationConfig(raw)
}

// ParseQuantizationConfig reads one quantization_config object.
func ParseQuantizationConfig(raw []byte) (HFQuant, error) {
	var qc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &qc); err != nil {
		return HFQuant{}, fmt.Errorf("%w: quantization_config is not a JSON object: %v", ErrConfig, err)
	}
	var method string
	if m, ok := qc["quant_method"]; ok {
		if err := json.Unmarshal(m, &method); err != nil {
			return HFQuant{}, fmt.Errorf("%w: quantization_config.quant_method: want a string: %v", ErrConfig, err)
		}
	}
	switch Method(strings.ToLower(method)) {
	case MethodBitgo:
		return parseBitgo(raw, qc)
	case MethodBitNet:
		return parseBitNet(raw)
	case "":
		return HFQuant{}, fmt.Errorf("%w: quantization_config.quant_method is missing; supported: %q (bitgo's schema), %q (transformers BitNet checkpoints)", ErrConfig, MethodBitgo, MethodBitNet)
	}
	return HFQuant{}, fmt.Errorf("%w: quantization_config.quant_method %q is not supported; supported: %q (bitgo's schema), %q (transformers BitNet checkpoints); float checkpoints without a quantization_config can be quantized with `bitd pack --format`", ErrConfig, method, MethodBitgo, MethodBitNet)
}

func parseBitgo(raw []byte, qc map[string]json.RawMessage) (HFQuant, error) {
	var unknown []string
	for k := range qc {
		if !containsString(bitgoKeys, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return HFQuant{}, fmt.Errorf("%w: quantization_config (bitgo): unknown key(s) %s; allowed keys: %s", ErrConfig, strings.Join(unknown, ", "), strings.Join(bitgoKeys, ", "))
	}
	var c Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&struct {
		*Config
		QuantMethod string `json:"quant_method"`
	}{Config: &c}); err != nil {
		return HFQuant{}, fmt.Errorf("%w: quantization_config (bitgo): %v", ErrConfig, err)
	}
	if c.Format == "" {
		return HFQuant{}, fmt.Errorf("%w: quantization_config (bitgo): format is missing; allowed formats are %s", ErrConfig, formatNames())
	}
	f, err := ParseFormat(string(c.Format))
	if err != nil {
		return HFQuant{}, fmt.Errorf("%w: quantization_config (bitgo): %w", ErrConfig, err)
	}
	c.Format = f
	if err := c.Validate(); err != nil {
		return HFQuant{}, fmt.Errorf("%w: quantization_config (bitgo): %w", ErrConfig, err)
	}
	return HFQuant{Method: MethodBitgo, Config: c.WithDefaults()}, nil
}

func parseBitNet(raw []byte) (HFQuant, error) {
	var b struct {
		BitNet
		ModulesToNotConvert []string `json:"modules_to_not_convert"`
		RMSNormEps          *float64 `json:"rms_norm_eps"`
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		return HFQuant{}, fmt.Errorf("%w: quantization_config (bitnet): %v", ErrConfig, err)
	}
	bn := b.BitNet
	if bn.LinearClass == "" {
		bn.LinearClass = "bitlinear"
	}
	if bn.QuantizationMode == "" {
		bn.QuantizationMode = "offline"
	}
	bn.RMSNormEps = 1e-6
	if b.RMSNormEps != nil {
		bn.RMSNormEps = *b.RMSNormEps
	}
	if bn.LinearClass != "bitlinear" && bn.LinearClass != "autobitlinear" {
		return HFQuant{}, fmt.Errorf("%w: quantization_config (bitnet): linear_class %q: allowed: \"bitlinear\", \"autobitlinear\"", ErrConfig, bn.LinearClass)
	}
	if bn.QuantizationMode != "offline" && bn.QuantizationMode != "online" {
		return HFQuant{}, fmt.Errorf("%w: quantization_config (bitnet): quantization_mode %q: allowed: \"offline\", \"online\"", ErrConfig, bn.QuantizationMode)
	}
	bn.WeightScaleInverse = bn.LinearClass == "bitlinear"
	skip := []string{"lm_head"}
	for _, m := range b.ModulesToNotConvert {
		if !containsString(skip, m) {
			skip = append(skip, m)
		}
	}
	c := Config{Format: I2S, Act: PerToken, Scale: PerTensorScale, ModulesToNotConvert: skip}
	if err := c.Validate(); err != nil {
		return HFQuant{}, fmt.Errorf("%w: quantization_config (bitnet): %w", ErrConfig, err)
	}
	return HFQuant{Method: MethodBitNet, Config: c, BitNet: &bn}, nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
