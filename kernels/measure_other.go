//go:build !amd64 || noasm

package kernels

import "unsafe"

func readBytes(_ unsafe.Pointer, _ int, buf []byte) uint64 { return readBytesGeneric(buf) }

func vnniPeak(int) bool { return false }
