package main

import (
	"fmt"
	"log/slog"

	"bitgo/engine"
	"bitgo/quantcfg"
	"bitgo/xe2"
)

// openBackend opens the device `bitd serve --device` names: nil for "cpu", else the Xe2
// GPU as an engine.Backend. The returned function closes it.
func openBackend(device string, log *slog.Logger) (engine.Backend, func(), error) {
	if device == "" || device == "cpu" {
		return nil, func() {}, nil
	}
	n, err := parseXe2Device(device)
	if err != nil {
		return nil, nil, err
	}
	opts, warns := xe2.DefaultOptions()
	for _, w := range warns {
		log.Warn("bitd serve: xe2 option", "warning", w)
	}
	dev, err := xe2.Open(n, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("opening %s: %w", device, err)
	}
	log.Info("bitd serve: device open", "device", device)
	return xe2Backend{name: device, dev: dev}, func() {
		if err := dev.Close(); err != nil {
			log.Error("bitd serve: closing the device", "device", device, "err", err)
		}
	}, nil
}

// xe2Backend serves int2 and ternary layers on one Xe2 GPU.
type xe2Backend struct {
	name string
	dev  *xe2.Device
}

func (b xe2Backend) Name() string { return b.name }

func (b xe2Backend) Accepts(spec quantcfg.LayerSpec) (bool, string) {
	switch spec.Format {
	case quantcfg.Int2, quantcfg.I2S, quantcfg.TL1, quantcfg.TL2:
		return true, ""
	}
	return false, fmt.Sprintf("the xe2 kernels serve int2 and ternary formats, not %s", spec.Format)
}

func (b xe2Backend) Register(spec quantcfg.LayerSpec, blob []byte, scales, bias []float32) (engine.BackendLayer, error) {
	return b.dev.RegisterBlob(spec, blob, scales, bias)
}
