//go:build !noasm

package kernels

// hasAsm: this build has the generated amd64 assembly.
const hasAsm = true
