package quantcfg

import (
	"errors"
	"fmt"
	"strings"
)

// Config is how one model (or one layer) is quantized: the `quant_method: "bitgo"` schema
// of a config.json's quantization_config, and the in-memory form of every other source
// once imported. Zero fields take the format's defaults (see WithDefaults).
type Config struct {
	Format   Format    `json:"format"`
	Act      ActMode   `json:"act,omitempty"`
	Scale    ScaleGran `json:"scale,omitempty"`
	Codebook *Codebook `json:"codebook,omitempty"`
	// ModulesToNotConvert lists module-name fragments that stay unquantized; a module is
	// skipped when any fragment occurs in its dotted name (transformers' rule).
	ModulesToNotConvert []string `json:"modules_to_not_convert,omitempty"`
}

// WithDefaults fills unset fields with the format's defaults. It does not validate.
func (c Config) WithDefaults() Config {
	fi, ok := c.Format.Info()
	if !ok {
		return c
	}
	if c.Act.IsZero() {
		c.Act = ActMode{Kind: fi.Acts[0]}
	}
	if c.Scale.IsZero() {
		c.Scale = ScaleGran{Kind: fi.Scales[0]}
	}
	if c.Format == Int2 && c.Codebook == nil {
		cb := DefaultCodebook
		c.Codebook = &cb
	}
	return c
}

// Validate checks every field, after defaults, and returns all problems joined; each
// names the field and the allowed values.
func (c Config) Validate() error {
	fi, ok := c.Format.Info()
	if !ok {
		return fmt.Errorf("%w: format %q: allowed formats are %s", ErrInvalid, string(c.Format), formatNames())
	}
	c = c.WithDefaults()
	var errs []error
	if !containsAct(fi.Acts, c.Act.Kind) {
		errs = append(errs, fmt.Errorf("%w: act %q with format %s: allowed: %s", ErrUnsupported, c.Act, c.Format, actList(fi.Acts)))
	} else if c.Act.Kind == ActPerGroup {
		if _, err := parseGroup(fmt.Sprint(c.Act.Group)); err != nil {
			errs = append(errs, fmt.Errorf("%w: act %q: %v", ErrInvalid, c.Act, err))
		}
	}
	if !containsScale(fi.Scales, c.Scale.Kind) {
		errs = append(errs, fmt.Errorf("%w: scale %q with format %s: allowed: %s", ErrUnsupported, c.Scale, c.Format, scaleList(fi.Scales)))
	} else if c.Scale.Kind == ScaleGroup {
		if _, err := parseGroup(fmt.Sprint(c.Scale.Group)); err != nil {
			errs = append(errs, fmt.Errorf("%w: scale %q: %v", ErrInvalid, c.Scale, err))
		}
	}
	if c.Act.Kind == ActPerGroup && c.Scale.Kind == ScaleGroup {
		a, s := c.Act.Group, c.Scale.Group
		if a%s != 0 && s%a != 0 {
			errs = append(errs, fmt.Errorf("%w: act %q and scale %q: one group size must be a multiple of the other", ErrUnsupported, c.Act, c.Scale))
		}
	}
	if c.Format == I2S && c.Act.Kind == ActPerGroup && c.Act.Group%128 != 0 {
		errs = append(errs, fmt.Errorf("%w: act %q with format i2s: the group must be a multiple of 128 (i2s packs K in blocks of 128)", ErrUnsupported, c.Act))
	}
	if c.Codebook != nil {
		if c.Format != Int2 {
			errs = append(errs, fmt.Errorf("%w: codebook given for format %s: only int2 uses a code book", ErrInvalid, c.Format))
		} else if err := c.Codebook.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	for i, m := range c.ModulesToNotConvert {
		if strings.TrimSpace(m) == "" {
			errs = append(errs, fmt.Errorf("%w: modules_to_not_convert[%d] is empty", ErrInvalid, i))
		}
	}
	return errors.Join(errs...)
}

// Skips reports whether the module with the given dotted name stays unquantized.
func (c Config) Skips(module string) bool {
	for _, m := range c.ModulesToNotConvert {
		if m != "" && strings.Contains(module, m) {
			return true
		}
	}
	return false
}

func containsAct(list []ActKind, k ActKind) bool {
	for _, x := range list {
		if x == k {
			return true
		}
	}
	return false
}

func containsScale(list []ScaleKind, k ScaleKind) bool {
	for _, x := range list {
		if x == k {
			return true
		}
	}
	return false
}

func actList(list []ActKind) string {
	s := make([]string, len(list))
	for i, k := range list {
		s[i] = string(k)
		if k == ActPerGroup {
			s[i] += ":G"
		}
	}
	return strings.Join(s, ", ")
}

func scaleList(list []ScaleKind) string {
	s := make([]string, len(list))
	for i, k := range list {
		s[i] = string(k)
		if k == ScaleGroup {
			s[i] += ":G"
		}
	}
	return strings.Join(s, ", ")
}

// LayerSpec is one linear layer as the engine and the wire know it: y = x W^T (+ b) with
// W of Out rows and In columns.
type LayerSpec struct {
	Name     string
	Format   Format
	Out, In  int // M (output features, rows of W) and K (input features)
	Act      ActMode
	Scale    ScaleGran
	Codebook Codebook // int2 only
	Bias     bool
}

// Config returns the layer's quantization settings.
func (s LayerSpec) Config() Config {
	c := Config{Format: s.Format, Act: s.Act, Scale: s.Scale}
	if s.Format == Int2 {
		cb := s.Codebook
		c.Codebook = &cb
	}
	return c
}

// WithDefaults fills unset settings with the format's defaults.
func (s LayerSpec) WithDefaults() LayerSpec {
	c := s.Config().WithDefaults()
	s.Act, s.Scale = c.Act, c.Scale
	if s.Format == Int2 && s.Codebook == (Codebook{}) {
		s.Codebook = DefaultCodebook
	}
	return s
}

// NumScales is the number of weight scales the layer stores.
func (s LayerSpec) NumScales() int { return s.Scale.Count(s.Out, s.In) }

// Validate checks the settings (as Config.Validate) and the shape: both dimensions in
// [1, MaxDim] and In within the format's MaxK. Errors name the layer and the dimension.
func (s LayerSpec) Validate() error {
	name := s.Name
	if name == "" {
		name = "(unnamed)"
	}
	var errs []error
	if err := s.Config().Validate(); err != nil {
		errs = append(errs, err)
	}
	if s.Out < 1 || s.Out > MaxDim {
		errs = append(errs, fmt.Errorf("%w: out_features (M) = %d: must be in [1, %d]", ErrShape, s.Out, MaxDim))
	}
	if s.In < 1 || s.In > MaxDim {
		errs = append(errs, fmt.Errorf("%w: in_features (K) = %d: must be in [1, %d]", ErrShape, s.In, MaxDim))
	} else if fi, ok := s.Format.Info(); ok && s.In > fi.MaxK {
		errs = append(errs, fmt.Errorf("%w: in_features (K) = %d: format %s takes K <= %d (larger K could overflow its int32 accumulators); split the layer along K", ErrShape, s.In, s.Format, fi.MaxK))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("layer %s: %w", name, err)
	}
	return nil
}
