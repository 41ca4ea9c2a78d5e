//go:build !linux || !amd64 || noasm

package kernels

import "errors"

// amxPermit: only Linux's permission request is implemented.
func amxPermit() error { return errors.New("AMX needs Linux's arch_prctl permission request") }
