package kernels

import (
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/klauspost/cpuid/v2"
)

// ISA names one instruction-set path of the SIMD kernels, in priority order.
type ISA int

// The SIMD paths, best first.
const (
	// ISAAVX512 is AVX-512 F/BW/VL + VNNI + VBMI + VBMI2 and GFNI on zmm registers (Ice Lake
	// and later Xeons, Zen 4 and later).
	ISAAVX512 ISA = iota
	// ISAAVXVNNI is the AVX2 kernels with VEX-encoded vpdpbusd (AVX-VNNI: Alder Lake and later
	// client CPUs, Zen 5), and vpdpbssd for int8 where AVX-VNNI-INT8 exists (Arrow Lake,
	// Lunar Lake).
	ISAAVXVNNI
	// ISAAVX2 is AVX2 with vpmaddubsw/vpmaddwd on ymm registers 0-15.
	ISAAVX2
	numISA
)

var isaNames = [numISA]string{"avx512vnni", "avxvnni", "avx2"}

func (i ISA) String() string {
	if i >= 0 && i < numISA {
		return isaNames[i]
	}
	return "isa(" + strconv.Itoa(int(i)) + ")"
}

// cpu holds what the processor supports, detected once. Tests and kill switches only
// narrow it (see the Disable functions).
var cpu = struct {
	avx2, fma, avx512, avx512vnni, avx512vbmi, avx512vbmi2, gfni, avxvnni, avxvnniint8 bool
}{
	avx2:        cpuid.CPU.Supports(cpuid.AVX2, cpuid.FMA3, cpuid.BMI2),
	fma:         cpuid.CPU.Supports(cpuid.FMA3),
	avx512:      cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VL, cpuid.AVX512DQ),
	avx512vnni:  cpuid.CPU.Supports(cpuid.AVX512VNNI),
	avx512vbmi:  cpuid.CPU.Supports(cpuid.AVX512VBMI),
	avx512vbmi2: cpuid.CPU.Supports(cpuid.AVX512VBMI2),
	gfni:        cpuid.CPU.Supports(cpuid.GFNI),
	avxvnni:     cpuid.CPU.Supports(cpuid.AVXVNNI),
	avxvnniint8: cpuid.CPU.Supports(cpuid.AVXVNNIINT8),
}

// zmmMissing names what the AVX-512 path uses and the CPU lacks.
func zmmMissing() []string {
	var miss []string
	for _, f := range []struct {
		ok   bool
		name string
	}{
		{cpu.avx512, "AVX-512 F/BW/VL/DQ"}, {cpu.avx512vnni, "AVX512_VNNI"},
		{cpu.avx512vbmi, "AVX512_VBMI"}, {cpu.avx512vbmi2, "AVX512_VBMI2"}, {cpu.gfni, "GFNI"},
	} {
		if !f.ok {
			miss = append(miss, f.name)
		}
	}
	return miss
}

// zmmCPU reports whether the CPU has everything the AVX-512 path uses.
func zmmCPU() bool { return len(zmmMissing()) == 0 }

// disabled[i] switches path i off (kill switches and test hooks); purego switches all
// assembly off.
var (
	disabled [numISA]atomic.Bool
	purego   atomic.Bool
	noINT8   atomic.Bool // AVX-VNNI-INT8 off (tests)
)

func init() {
	if envBool("BITD_PUREGO") {
		purego.Store(true)
	}
	if envBool("BITD_DISABLE_AVX512") {
		disabled[ISAAVX512].Store(true)
	}
	if envBool("BITD_DISABLE_AVX2") {
		// The AVX-VNNI path is AVX2 code with VEX dot products: it goes too.
		disabled[ISAAVX2].Store(true)
		disabled[ISAAVXVNNI].Store(true)
	}
	if envBool("BITD_DISABLE_AVXVNNI") {
		disabled[ISAAVXVNNI].Store(true)
	}
}

// envBool reads a boolean kill switch; an unparsable value is reported and ignored.
func envBool(name string) bool {
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return false
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		slog.Warn("ignoring environment variable: not a boolean", "name", name, "value", v)
		return false
	}
	return b
}

// isaReason says why path i cannot run here ("" when it can).
func isaReason(i ISA) string {
	if !hasAsm {
		return "built without assembly (noasm tag or not amd64)"
	}
	if purego.Load() {
		return "assembly disabled (BITD_PUREGO=1 or DisableAsm)"
	}
	if disabled[i].Load() {
		return i.String() + " disabled (kill switch or test hook)"
	}
	switch i {
	case ISAAVX512:
		if miss := zmmMissing(); len(miss) > 0 {
			return "CPU lacks " + strings.Join(miss, ", ")
		}
	case ISAAVXVNNI:
		if !cpu.avx2 {
			return "CPU lacks AVX2/FMA/BMI2"
		}
		if !cpu.avxvnni {
			return "CPU lacks AVX-VNNI (VEX vpdpbusd)"
		}
	case ISAAVX2:
		if !cpu.avx2 {
			return "CPU lacks AVX2/FMA/BMI2"
		}
	}
	return ""
}

// noISA is no SIMD path (helperPath: the Go loops run).
const noISA ISA = -1

// helperPath returns the path whose assembly helpers run now (the activation quantizer's
// loops, the bf16 conversions: each bit for bit its Go loop): AVX-512 where the CPU has
// AVX-512 F/BW/VL/DQ and that path is on, else AVX2 likewise, else noISA. Kernels are chosen
// per layer; the helpers are chosen per call, so the kill switches and the test hooks
// (disable) reach them as they reach the kernels.
func helperPath() ISA {
	switch {
	case !hasAsm || purego.Load():
		return noISA
	case cpu.avx512 && !disabled[ISAAVX512].Load():
		return ISAAVX512
	case cpu.avx2 && !disabled[ISAAVX2].Load():
		return ISAAVX2
	}
	return noISA
}

// HelperPath names the path whose assembly the activation quantizer and the bf16
// conversions run now (helperPath): "avx512vnni" (its AVX-512 F/BW code), "avx2", or "" for
// the Go loops.
func HelperPath() string {
	if p := helperPath(); p != noISA {
		return p.String()
	}
	return ""
}

// hasINT8 reports whether AVX-VNNI-INT8 (VEX vpdpbssd) can run.
func hasINT8() bool { return cpu.avxvnniint8 && !noINT8.Load() }

// ISAAvailable reports whether path i can run on this CPU under the current switches.
func ISAAvailable(i ISA) bool { return isaReason(i) == "" }

func disable(i ISA) (restore func()) {
	old := disabled[i].Swap(true)
	return func() { disabled[i].Store(old) }
}

// DisableAVX512 switches the AVX-512 kernels off until restore is called (tests, benchmarks).
func DisableAVX512() (restore func()) { return disable(ISAAVX512) }

// DisableAVXVNNI switches the AVX-VNNI kernels off until restore is called.
func DisableAVXVNNI() (restore func()) { return disable(ISAAVXVNNI) }

// DisableAVX2 switches the AVX2 and AVX-VNNI kernels off until restore is called.
func DisableAVX2() (restore func()) {
	r1, r2 := disable(ISAAVX2), disable(ISAAVXVNNI)
	return func() { r2(); r1() }
}

// DisableAVXVNNIINT8 switches the vpdpbssd int8 kernel off until restore is called.
func DisableAVXVNNIINT8() (restore func()) {
	old := noINT8.Swap(true)
	return func() { noINT8.Store(old) }
}

// DisableAsm switches every assembly kernel off until restore is called (BITD_PUREGO=1).
func DisableAsm() (restore func()) {
	old := purego.Swap(true)
	return func() { purego.Store(old) }
}

// CPUName is the processor's brand string.
func CPUName() string { return strings.TrimSpace(cpuid.CPU.BrandName) }

// CPUFeatures lists the features the kernels care about that this CPU has.
func CPUFeatures() []string {
	var out []string
	for _, f := range []struct {
		name string
		ok   bool
	}{
		{"avx2", cpu.avx2}, {"fma", cpu.fma}, {"avx512", cpu.avx512}, {"avx512vnni", cpu.avx512vnni},
		{"avx512vbmi", cpu.avx512vbmi}, {"avx512vbmi2", cpu.avx512vbmi2}, {"gfni", cpu.gfni}, {"avxvnni", cpu.avxvnni}, {"avxvnniint8", cpu.avxvnniint8},
		{"avx512bf16", cpuid.CPU.Supports(cpuid.AVX512BF16)},
	} {
		if f.ok {
			out = append(out, f.name)
		}
	}
	return out
}
