package quantcfg

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// MinGroup is the smallest group size, and every group size is a multiple of it: the
// kernels accumulate whole 32-wide K blocks before applying a group's scale.
const MinGroup = 32

// ActKind is the kind of activation quantization.
type ActKind string

// Activation quantization kinds.
const (
	// ActPerToken: one int8 absmax scale per token (row of x); BitNet b1.58's scheme.
	ActPerToken ActKind = "per-token"
	// ActPerTensor: one int8 absmax scale for the whole call (all tokens).
	ActPerTensor ActKind = "per-tensor"
	// ActPerGroup: one int8 absmax scale per token and per group of G inputs.
	ActPerGroup ActKind = "per-group"
	// ActNone: activations stay float32 (the float formats).
	ActNone ActKind = "none"
)

// ActMode is an activation quantization mode: "per-token", "per-tensor", "per-group:G" or "none".
// The zero value means "the format's default".
type ActMode struct {
	Kind  ActKind
	Group int // G for ActPerGroup, else 0
}

// Activation mode values.
var (
	PerToken  = ActMode{Kind: ActPerToken}
	PerTensor = ActMode{Kind: ActPerTensor}
	NoAct     = ActMode{Kind: ActNone}
)

// PerGroup returns the per-group mode with group size g.
func PerGroup(g int) ActMode { return ActMode{Kind: ActPerGroup, Group: g} }

const actAllowed = `"per-token", "per-tensor", "per-group:G" (G a positive multiple of 32) or "none"`

// ParseActMode reads an activation mode. The empty string gives the zero ActMode (the
// format's default).
func ParseActMode(s string) (ActMode, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	switch t {
	case "":
		return ActMode{}, nil
	case string(ActPerToken), string(ActPerTensor), string(ActNone):
		return ActMode{Kind: ActKind(t)}, nil
	}
	if g, ok := strings.CutPrefix(t, string(ActPerGroup)+":"); ok {
		n, err := parseGroup(g)
		if err != nil {
			return ActMode{}, fmt.Errorf("%w: act %q: %v; allowed: %s", ErrInvalid, s, err, actAllowed)
		}
		return PerGroup(n), nil
	}
	return ActMode{}, fmt.Errorf("%w: act %q: allowed: %s", ErrInvalid, s, actAllowed)
}

func parseGroup(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("group size %q is not an integer", s)
	}
	if n < MinGroup || n%MinGroup != 0 || n > MaxDim {
		return 0, fmt.Errorf("group size %d is not a multiple of %d in [%d, %d]", n, MinGroup, MinGroup, MaxDim)
	}
	return n, nil
}

// String gives the canonical spelling ("" for the zero value).
func (m ActMode) String() string {
	if m.Kind == ActPerGroup {
		return fmt.Sprintf("%s:%d", m.Kind, m.Group)
	}
	return string(m.Kind)
}

// IsZero reports whether m is unset.
func (m ActMode) IsZero() bool { return m.Kind == "" }

// MarshalText writes the canonical spelling.
func (m ActMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText parses with ParseActMode.
func (m *ActMode) UnmarshalText(b []byte) error {
	v, err := ParseActMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// ScaleKind is the granularity of weight scales.
type ScaleKind string

// Scale granularities.
const (
	ScaleTensor ScaleKind = "tensor" // one scale for the layer
	ScaleRow    ScaleKind = "row"    // one scale per output row
	ScaleGroup  ScaleKind = "group"  // one scale per output row and per group of G inputs
	ScaleNone   ScaleKind = "none"   // no scales (float formats)
)

// ScaleGran is a weight scale granularity: "tensor", "row", "group:G" or "none". The zero
// value means "the format's default".
type ScaleGran struct {
	Kind  ScaleKind
	Group int // G for ScaleGroup, else 0
}

// Scale granularity values.
var (
	PerTensorScale = ScaleGran{Kind: ScaleTensor}
	PerRowScale    = ScaleGran{Kind: ScaleRow}
	NoScale        = ScaleGran{Kind: ScaleNone}
)

// GroupScale returns the per-group granularity with group size g.
func GroupScale(g int) ScaleGran { return ScaleGran{Kind: ScaleGroup, Group: g} }

const scaleAllowed = `"tensor", "row", "group:G" (G a positive multiple of 32) or "none"`

// ParseScaleGran reads a scale granularity; "" gives the zero value (the format's default).
func ParseScaleGran(s string) (ScaleGran, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	switch t {
	case "":
		return ScaleGran{}, nil
	case string(ScaleTensor), string(ScaleRow), string(ScaleNone):
		return ScaleGran{Kind: ScaleKind(t)}, nil
	}
	if g, ok := strings.CutPrefix(t, string(ScaleGroup)+":"); ok {
		n, err := parseGroup(g)
		if err != nil {
			return ScaleGran{}, fmt.Errorf("%w: scale %q: %v; allowed: %s", ErrInvalid, s, err, scaleAllowed)
		}
		return GroupScale(n), nil
	}
	return ScaleGran{}, fmt.Errorf("%w: scale %q: allowed: %s", ErrInvalid, s, scaleAllowed)
}

// String gives the canonical spelling ("" for the zero value).
func (g ScaleGran) String() string {
	if g.Kind == ScaleGroup {
		return fmt.Sprintf("%s:%d", g.Kind, g.Group)
	}
	return string(g.Kind)
}

// IsZero reports whether g is unset.
func (g ScaleGran) IsZero() bool { return g.Kind == "" }

// MarshalText writes the canonical spelling.
func (g ScaleGran) MarshalText() ([]byte, error) { return []byte(g.String()), nil }

// UnmarshalText parses with ParseScaleGran.
func (g *ScaleGran) UnmarshalText(b []byte) error {
	v, err := ParseScaleGran(string(b))
	if err != nil {
		return err
	}
	*g = v
	return nil
}

// Count returns how many scales a layer of m rows and k inputs stores: 1 for tensor,
// m for row, m*ceil(k/G) for group (row-major: scale[row*groups + g]), 0 for none.
func (g ScaleGran) Count(m, k int) int {
	switch g.Kind {
	case ScaleTensor:
		return 1
	case ScaleRow:
		return m
	case ScaleGroup:
		return m * ((k + g.Group - 1) / g.Group)
	}
	return 0
}

// Codebook maps the four 2-bit codes of format int2 to int8 levels: code c means weight
// Codebook[c].
type Codebook [4]int8

// DefaultCodebook is offset binary: code c means c-2, so codes 0,1,2,3 are -2,-1,0,1.
var DefaultCodebook = Codebook{-2, -1, 0, 1}

// MarshalJSON writes the four levels as a JSON array of numbers.
func (c Codebook) MarshalJSON() ([]byte, error) {
	return json.Marshal([4]int{int(c[0]), int(c[1]), int(c[2]), int(c[3])})
}

// UnmarshalJSON reads four integers in [-128, 127].
func (c *Codebook) UnmarshalJSON(b []byte) error {
	var v []int
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("%w: codebook: want an array of 4 integers in [-128, 127]: %v", ErrInvalid, err)
	}
	if len(v) != 4 {
		return fmt.Errorf("%w: codebook: want 4 levels, got %d", ErrInvalid, len(v))
	}
	for i, x := range v {
		if x < -128 || x > 127 {
			return fmt.Errorf("%w: codebook[%d] = %d: levels are int8, in [-128, 127]", ErrInvalid, i, x)
		}
		c[i] = int8(x)
	}
	return nil
}

// Validate requires four distinct levels (codes that alias waste the format's range).
func (c Codebook) Validate() error {
	for i := 0; i < 4; i++ {
		for j := i + 1; j < 4; j++ {
			if c[i] == c[j] {
				return fmt.Errorf("%w: codebook %v: levels must be distinct (codes %d and %d are both %d)", ErrInvalid, c, i, j, c[i])
			}
		}
	}
	return nil
}
