//go:build !noasm

package kernels

import "bitgo/quantcfg"

// The assembly kernels of this build, registered ahead of the reference in priority order.

func init() {
	var list []Kernel
	for _, isa := range []ISA{ISAAVX512, ISAAVXVNNI, ISAAVX2} {
		for _, f := range kernelFormats {
			if o := asmOps(isa, f); o != nil {
				list = append(list, &simdKernel{isa: isa, format: f, ops: o})
			}
		}
	}
	kernelList = append(list, kernelList...)
}

var kernelFormats = []quantcfg.Format{quantcfg.I2S, quantcfg.TL1, quantcfg.TL2, quantcfg.Int2, quantcfg.Int1, quantcfg.Int8, quantcfg.BF16, quantcfg.F32}

// asmOps returns the operations of one ISA path for one format, or nil.
func asmOps(isa ISA, f quantcfg.Format) *fmtOps {
	switch isa {
	case ISAAVX512:
		o := &fmtOps{epi: epilogueAVX512, tileMaxU: 255, gemvMaxU: 255, gemvT: 4}
		switch f {
		case quantcfg.Int2:
			o.gemv = gemv4(gemvInt2T1AVX512, gemvInt2T2AVX512, gemvInt2T3AVX512, gemvInt2T4AVX512)
			o.kstep, o.tabKind = 8, tabInt2Z
		case quantcfg.I2S:
			o.gemv = gemv4(gemvI2ST1AVX512, gemvI2ST2AVX512, gemvI2ST3AVX512, gemvI2ST4AVX512)
			o.kstep = 128
		case quantcfg.Int8:
			o.gemv = gemv4(gemvInt8T1AVX512, gemvInt8T2AVX512, gemvInt8T3AVX512, gemvInt8T4AVX512)
			o.kstep = 16
		case quantcfg.Int1:
			o.gemv = gemv4(gemvInt1T1AVX512, gemvInt1T2AVX512, gemvInt1T3AVX512, gemvInt1T4AVX512)
			o.kstep, o.xKind = 16, xInt1Perm
		case quantcfg.TL1:
			o.gemv = gemv4(gemvTL1T1AVX512, gemvTL1T2AVX512, gemvTL1T3AVX512, gemvTL1T4AVX512)
			o.kstep, o.tabKind, o.exact = 4, tabTL1Z, true
		case quantcfg.TL2:
			o.gemv = gemv4(gemvTL2T1AVX512, gemvTL2T2AVX512, gemvTL2T3AVX512, gemvTL2T4AVX512)
			o.tabKind, o.exact = tabTL2Z, true
		default:
			return nil
		}
		return o
	}
	return nil
}

func gemv4(f1, f2, f3, f4 func(*byte)) [maxGemvT + 1]func(*byte) {
	return [maxGemvT + 1]func(*byte){nil, f1, f2, f3, f4}
}
