package quantcfg

import (
	"fmt"
	"strings"
)

// DType is the element type of activations and outputs crossing an API or the wire.
// Outputs have the dtype of their inputs.
type DType string

// Activation dtypes.
const (
	DTypeF32  DType = "f32"  // IEEE float32, little-endian
	DTypeBF16 DType = "bf16" // bfloat16 (the top half of a float32), little-endian
)

// Size is the element size in bytes (0 for an unknown dtype).
func (d DType) Size() int {
	switch d {
	case DTypeF32:
		return 4
	case DTypeBF16:
		return 2
	}
	return 0
}

// ParseDType reads "f32"/"float32" or "bf16"/"bfloat16".
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "f32", "float32", "fp32":
		return DTypeF32, nil
	case "bf16", "bfloat16":
		return DTypeBF16, nil
	}
	return "", fmt.Errorf("%w: dtype %q: allowed: f32, bf16", ErrInvalid, s)
}
