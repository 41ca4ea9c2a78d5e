package main

import (
	"slices"
	"testing"

	"bitgo/kernels"
	"bitgo/quantcfg"
)

// TestLogicalWeightsRoundTrip: what kernels.Weights.Bytes encodes for the wire,
// logicalWeights (the daemon's side of a register upload) decodes to the same weights
// (bf16: the values rounded to bfloat16), and a wrong length is refused.
func TestLogicalWeightsRoundTrip(t *testing.T) {
	f := []float32{1.5, -2.25, 3.0078125, 1e-3, -7, 0}
	q := []int8{-1, 0, 1, 1, 0, -1}
	for _, c := range []struct {
		f    quantcfg.Format
		w    kernels.Weights
		want kernels.Weights
	}{
		{quantcfg.F32, kernels.Weights{F: f}, kernels.Weights{F: f}},
		{quantcfg.BF16, kernels.Weights{F: f}, kernels.Weights{F: []float32{1.5, -2.25, 3.0, 0.0009994507, -7, 0}}},
		{quantcfg.I2S, kernels.Weights{Q: q}, kernels.Weights{Q: q}},
		{quantcfg.Int8, kernels.Weights{Q: []int8{-128, 127, 0, 5, -5, 1}}, kernels.Weights{Q: []int8{-128, 127, 0, 5, -5, 1}}},
	} {
		spec := quantcfg.LayerSpec{Name: "w", Format: c.f, Out: 2, In: 3}
		b := c.w.Bytes(c.f)
		got, err := logicalWeights(spec, b)
		if err != nil {
			t.Fatalf("%s: %v", c.f, err)
		}
		if !slices.Equal(got.F, c.want.F) || !slices.Equal(got.Q, c.want.Q) {
			t.Errorf("%s: decoded %v %v, want %v %v", c.f, got.F, got.Q, c.want.F, c.want.Q)
		}
		if _, err := logicalWeights(spec, b[:len(b)-1]); err == nil {
			t.Errorf("%s: a short upload was accepted", c.f)
		}
	}
}
