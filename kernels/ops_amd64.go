//go:build !noasm

package kernels

import "bitgo/quantcfg"

// The assembly kernels of this build, registered ahead of the reference in priority order.

func init() {
	var list []Kernel
	for _, isa := range []ISA{ISAAVX512, ISAAVXVNNI, ISAAVX2} {
		for _, f := range kernelFormats {
			if isa == ISAAVXVNNI && f == quantcfg.Int8 {
				list = append(list, newSIMDKernel(isa, f, int8VNNIOps(), true))
			}
			if o := asmOps(isa, f); o != nil {
				list = append(list, newSIMDKernel(isa, f, o, false))
			}
		}
	}
	kernelList = append(list, kernelList...)
	if zmmCPU() {
		lutBuilders[tabTL1Z], lutBuilders[tabTL2Z], lutBuilders[tabTL2B] = lutBuildTL1AVX512, lutBuildTL2AVX512, lutBuildTL2BAVX512
		lutBuilders[tabTL1M] = lutBuildTL1MAVX512
	}
	prefetchSpans = prefetchSpansT1
	if cpu.avx512 {
		actLoopsBy[ISAAVX512] = actLoops{absBitsMaxAVX512, nonFiniteF32AVX512, quantizeF32AVX512}
		bf16LoopsBy[ISAAVX512] = bf16Loops{bf16ToF32AVX512, f32ToBF16AVX512}
	}
	if cpu.avx2 {
		actLoopsBy[ISAAVX2] = actLoops{absBitsMaxAVX2, nonFiniteF32AVX2, quantizeF32AVX2}
		bf16LoopsBy[ISAAVX2] = bf16Loops{bf16ToF32AVX2, f32ToBF16AVX2}
	}
	if cpu.avx2 {
		lutBuilders[tabTL1Y], lutBuilders[tabTL2Y] = lutBuildTL1AVX2, lutBuildTL2AVX2
		lutBuilders[tabInt1Y] = func(x *int8, n int, dst *byte) { int1BuildTabYAVX2(x, n/32, dst) }
		sumInt8Fast = sumInt8AVX2
	}
}

var kernelFormats = []quantcfg.Format{quantcfg.I2S, quantcfg.TL1, quantcfg.TL2, quantcfg.Int2, quantcfg.Int1, quantcfg.Int8, quantcfg.BF16, quantcfg.F32}

// asmOps returns the operations of one ISA path for one format, or nil.
func asmOps(isa ISA, f quantcfg.Format) *fmtOps {
	switch isa {
	case ISAAVX512:
		o := &fmtOps{epi: epilogueAVX512, epiRows: epilogueRowsAVX512, tileMaxU: 255, gemvMaxU: 255, gemvT: 4, tileT: maxTileT, unpack: unpackers[f]}
		if o.unpack != nil {
			o.amx = gemmAMX
		}
		switch f {
		case quantcfg.I2S:
			o.amxv = gemvAMXI2S
		case quantcfg.Int2:
			o.amxv = gemvAMXInt2
		}
		o.tile = [maxTileT + 1]func(*byte){nil, tileT1AVX512, tileT2AVX512, tileT3AVX512, tileT4AVX512, tileT5AVX512,
			tileT6AVX512, tileT7AVX512, tileT8AVX512, tileT9AVX512, tileT10AVX512, tileT11AVX512, tileT12AVX512}
		switch f {
		case quantcfg.Int2:
			o.gemv = gemvN(gemvInt2T1AVX512, gemvInt2T2AVX512, gemvInt2T3AVX512, gemvInt2T4AVX512,
				gemvInt2T5AVX512, gemvInt2T6AVX512, gemvInt2T7AVX512, gemvInt2T8AVX512)
			// Two tokens keep the table kernel: table-free it was no faster. One token
			// table-free read 1-3% more of the roofline (int2 against i2s from DRAM on
			// the 8B shapes and 2560x2560, one and two threads, nine interleaved rounds).
			o.gemvSeq = o.gemv
			o.gemvSeq[1] = gemvInt2SeqT1AVX512
			copy(o.gemvSeq[3:], []func(*byte){gemvInt2SeqT3AVX512, gemvInt2SeqT4AVX512,
				gemvInt2SeqT5AVX512, gemvInt2SeqT6AVX512, gemvInt2SeqT7AVX512, gemvInt2SeqT8AVX512})
			seqTuned := o.gemvSeq
			seqTuned[2] = gemvInt2SeqT2AVX512
			o.gemvSeqTuned = &seqTuned
			o.kstep, o.tabKind, o.gemvT, o.fused = 8, tabInt2Z, 8, true
		case quantcfg.I2S:
			// More than four tokens run four at a time over each row block (the later passes
			// read it from L2). Against kernels for five to eight tokens (two rows a vector,
			// one chain each, 75-78% of the VNNI peak), i2s's time over int2's from DRAM,
			// interleaved rounds: n = 5-8 7-12% less at one thread on the 8B shapes and
			// 2560x2560, at two 2-9% less for n = 7 and 8 and within the noise for 5 and
			// 6; n = 8-63 on the 8B shapes 9-14% less at one and two threads.
			o.gemv = gemv4(gemvI2ST1AVX512, gemvI2ST2AVX512, gemvI2ST3AVX512, gemvI2ST4AVX512)
			o.gemvLong1, o.gemvRow1, o.oneTuned = gemvI2SLongT1AVX512, gemvI2SRowT1AVX512, gemvI2ST1AVX512HW
			tuned := o.gemv
			tuned[2], tuned[3], tuned[4] = gemvI2SAndT2AVX512, gemvI2SAndT3AVX512, gemvI2SAndT4AVX512
			o.gemvTuned = &tuned
			o.kstep = 128
			o.parts[3], o.parts[4] = true, true // gemvI2SRowZ
		case quantcfg.Int8:
			o.gemv = gemvN(gemvInt8T1AVX512, gemvInt8T2AVX512, gemvInt8T3AVX512, gemvInt8T4AVX512,
				gemvInt8T5AVX512, gemvInt8T6AVX512, gemvInt8T7AVX512, gemvInt8T8AVX512)
			o.kstep, o.gemvT, o.fused = 16, 8, true
		case quantcfg.Int1:
			// Every kernel builds a block's tables itself, from the biased activations.
			o.int1Panel = gemv4(int1PanelT1AVX512, int1PanelT2AVX512, int1PanelT3AVX512, int1PanelT4AVX512)
			o.kstep, o.exact = 32, true
		case quantcfg.TL1:
			o.lut = gemv4(lutTL1MT1AVX512, lutTL1MT2AVX512, lutTL1MT3AVX512, lutTL1MT4AVX512)
			o.kstep, o.tabKind = 4, tabTL1M              // sums of u = w+1 times x (lutTL1MZ): not exact
			o.lutOne, o.oneTab = lutTL1T1AVX512, tabTL1Z // (see tl1MAhead)
		case quantcfg.TL2:
			o.lut = gemv4(lutTL2T1AVX512, lutTL2T2AVX512, lutTL2T3AVX512, lutTL2T4AVX512)
			o.oneTuned = lutTL2T1AVX512HW // (chunk-major blobs)
			tuned := o.lut
			tuned[2] = lutTL2T2AVX512NT
			o.lutTuned = &tuned
			o.tabKind, o.lutKind, o.exact, o.lutBuilds = tabTL2Z, tabTL2B, true, true // (tl2Block: vpermw with one and two tokens, vpermb on byte planes with three and four)
			o.panel, o.panelTab, o.panelActs = gemv4(tl2PanelT1AVX512, tl2PanelT2AVX512, tl2PanelT3AVX512, tl2PanelT4AVX512), tabTL2Z, true
		case quantcfg.BF16:
			o.float = [maxTileT + 1]func(*byte){nil, floatBF16T1AVX512, floatBF16T2AVX512, floatBF16T3AVX512, floatBF16T4AVX512,
				floatBF16T5AVX512, floatBF16T6AVX512, floatBF16T7AVX512, floatBF16T8AVX512, floatBF16T9AVX512,
				floatBF16T10AVX512, floatBF16T11AVX512, floatBF16T12AVX512}
			o.floatT, o.oneTuned = maxTileT, floatBF16T1AVX512HW
		case quantcfg.F32:
			o.float = [maxTileT + 1]func(*byte){nil, floatF32T1AVX512, floatF32T2AVX512, floatF32T3AVX512, floatF32T4AVX512,
				floatF32T5AVX512, floatF32T6AVX512, floatF32T7AVX512, floatF32T8AVX512, floatF32T9AVX512,
				floatF32T10AVX512, floatF32T11AVX512, floatF32T12AVX512}
			o.floatT, o.oneTuned = maxTileT, floatF32T1AVX512HW
		default:
			return nil
		}
		return o
	case ISAAVXVNNI, ISAAVX2:
		vnni := isa == ISAAVXVNNI
		o := &fmtOps{epi: epilogueAVX2, epiRows: epilogueRowsAVX2, unpack: unpackers[f], tileMaxU: 127, gemvMaxU: 127, gemvT: 2, tileT: 2}
		o.tile = [maxTileT + 1]func(*byte){nil, tileT1AVX2, tileT2AVX2}
		if vnni {
			o.tileMaxU, o.gemvMaxU, o.tileT = 255, 255, 3
			o.tile = [maxTileT + 1]func(*byte){nil, tileT1AVXVNNI, tileT2AVXVNNI, tileT3AVXVNNI}
		} else {
			o.tile16 = tileT2AVX2x16
		}
		pick := func(avx2, avxvnni [maxGemvT + 1]func(*byte)) [maxGemvT + 1]func(*byte) {
			if vnni {
				return avxvnni
			}
			return avx2
		}
		switch f {
		case quantcfg.I2S:
			o.gemv = pick(gemv4(gemvI2ST1AVX2, gemvI2ST2AVX2, gemvI2ST3AVX2, gemvI2ST4AVX2), gemv4(gemvI2ST1AVXVNNI, gemvI2ST2AVXVNNI, nil, nil))
			o.kstep = 128
			if !vnni {
				o.gemvT = 4 // gemvI2SYMany
				o.l1.gemv1, o.l1.two1 = gemvI2ST1AVX2L1, gemvI2STwoT1AVX2
			}
		case quantcfg.Int2:
			o.gemv = pick(gemv4(gemvInt2T1AVX2, gemvInt2T2AVX2, nil, nil), gemv4(gemvInt2T1AVXVNNI, gemvInt2T2AVXVNNI, nil, nil))
			o.kstep, o.tabKind, o.fused = 4, tabInt2, true
			if vnni {
				// consecutive code books: codes masked in place, no tables (gemvInt2SeqY)
				o.gemvSeq = gemv4(gemvInt2SeqT1AVXVNNI, gemvInt2SeqT2AVXVNNI, nil, nil)
			} else {
				// consecutive code books (span 3) keep int16 sums over 42 units with two tokens
				o.gemvSeq = gemv4(gemvInt2T1AVX2, gemvInt2SeqT2AVX2, nil, nil)
				o.l1.two1 = gemvInt2TwoT1AVX2
			}
		case quantcfg.Int8:
			o.kstep, o.fused = 4, true
			if vnni {
				o.gemv = gemv4(gemvInt8T1AVXVNNI, gemvInt8T2AVXVNNI, nil, nil)
			} else {
				o.gemv, o.gemvT, o.xKind, o.exact = gemv4(gemvInt8T1AVX2, nil, nil, nil), 1, xInt16, true
				o.l1.gemv1 = gemvInt8T1AVX2L1
			}
		case quantcfg.Int1:
			// The lookups need no multiplies: the AVX2 kernels serve AVX-VNNI CPUs as well.
			o.int1Panel, o.int1Tab = gemv4(int1PanelT1AVX2, int1PanelT2AVX2, nil, nil), tabInt1Y
			o.l1.int1Panel1 = int1PanelT1AVX2L1
			o.kstep, o.exact = 32, true
		case quantcfg.TL1:
			o.lut, o.kstep, o.tabKind, o.exact = gemv4(lutTL1T1AVX2, lutTL1T2AVX2, nil, nil), 4, tabTL1Y, true
		case quantcfg.TL2:
			o.lut, o.tabKind, o.exact = gemv4(lutTL2T1AVX2, lutTL2T2AVX2, nil, nil), tabTL2Y, true
			o.panel, o.panelTab = gemv4(tl2PanelT1AVX2, tl2PanelT2AVX2, nil, nil), tabTL2Y
		case quantcfg.BF16:
			o.float, o.floatT = [maxTileT + 1]func(*byte){nil, floatBF16T1AVX2, floatBF16T2AVX2}, 2
			o.floatPair, o.l1.floatPair = floatBF16P1AVX2, floatBF16P1AVX2L1
		case quantcfg.F32:
			o.float, o.floatT = [maxTileT + 1]func(*byte){nil, floatF32T1AVX2, floatF32T2AVX2}, 2
			o.floatPair, o.l1.floatPair = floatF32P1AVX2, floatF32P1AVX2L1
		default:
			return nil
		}
		return o
	}
	return nil
}

// int8VNNIOps is the AVX-VNNI-INT8 int8 kernel's operations (vpdpbssd: signed weights,
// exact sums).
func int8VNNIOps() *fmtOps {
	o := asmOps(ISAAVXVNNI, quantcfg.Int8)
	o.gemv, o.exact = gemv4(gemvInt8T1VNNIINT8AVXVNNI, gemvInt8T2VNNIINT8AVXVNNI, nil, nil), true
	return o
}

// unpackers are AVX2 code, shared by every path.
var unpackers = map[quantcfg.Format]func(*byte){
	quantcfg.I2S: unpackI2SAVX2, quantcfg.TL1: unpackTL1AVX2, quantcfg.TL2: unpackTL2AVX2,
	quantcfg.Int2: unpackInt2AVX2, quantcfg.Int1: unpackInt1AVX2, quantcfg.Int8: unpackInt8AVX2,
}

func gemv4(f1, f2, f3, f4 func(*byte)) [maxGemvT + 1]func(*byte) { return gemvN(f1, f2, f3, f4) }

// gemvN lists the GEMV functions for 1, 2, ... tokens.
func gemvN(fs ...func(*byte)) [maxGemvT + 1]func(*byte) {
	var out [maxGemvT + 1]func(*byte)
	copy(out[1:], fs)
	return out
}
