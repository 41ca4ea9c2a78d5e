//go:build !amd64 || noasm

package kernels

// hasAsm: this build has no assembly (another architecture, or -tags noasm); only the
// reference kernel runs.
const hasAsm = false
