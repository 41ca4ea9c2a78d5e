// Package quantcfg is bitgo's vocabulary: weight formats, activation-quantization modes,
// weight-scale granularities, the int2 code book, their validation, and the reading of a
// Hugging Face config.json's quantization_config. It does no arithmetic and imports
// nothing of bitgo's; every other package names formats and modes through it.
//
// # Formats
//
//	name  weights                          bits/w  scales             activations
//	i2s   ternary {-1,0,1}                 2       tensor | row       per-token | per-tensor | per-group:G (G%128==0)
//	tl1   ternary, pair -> 4-bit index     2       tensor | row       per-token | per-tensor
//	tl2   ternary, triple -> sign+index    5/3     tensor | row       per-token | per-tensor
//	int2  2-bit code -> 4-level code book  2       row | tensor | group:G   per-token | per-tensor | per-group:G
//	int1  ±1 (bit 0 -> +1, bit 1 -> -1)    1       row | tensor | group:G   per-token | per-tensor | per-group:G
//	int8  int8                             8       row | tensor | group:G   per-token | per-tensor | per-group:G
//	bf16  bfloat16                         16      none               none
//	f32   float32                          32      none               none
//
// The first granularity and mode listed are the defaults. Group sizes are positive
// multiples of 32; the last group of a row may be short when G does not divide K. When
// both activations and scales are grouped, one group size must divide the other.
// The exact arithmetic (activation quantization, integer accumulation, the float
// epilogue) is defined once by the reference in package kernels.
//
// # The bitgo schema (quant_method "bitgo")
//
// A checkpoint quantized for bitgo carries, in config.json:
//
//	"quantization_config": {
//	  "quant_method": "bitgo",
//	  "format": "int2",                        // required: a format name above
//	  "act": "per-token",                      // optional: the format's default
//	  "scale": "group:128",                    // optional: the format's default
//	  "codebook": [-3, -1, 1, 3],              // int2 only; default [-2, -1, 0, 1]
//	  "modules_to_not_convert": ["lm_head"]    // optional: name fragments kept unquantized
//	}
//
// Unknown keys are errors (they are usually typos). Code c of an int2 weight means
// codebook[c].
//
// # transformers' BitNet checkpoints (quant_method "bitnet")
//
// These are imported as format i2s with per-token activations and per-tensor scales,
// which is lossless for them; see BitNet for the packed weight layout and for the two
// meanings of weight_scale (bitlinear stores the inverse of the absmean scale,
// autobitlinear the scale itself). lm_head is always kept unquantized, as transformers does.
//
// Any other quant_method is an error that lists the supported ones; a config.json with no
// quantization_config gives ErrNoQuantConfig (a float checkpoint, which `bitd pack
// --format F` can quantize).
package quantcfg
