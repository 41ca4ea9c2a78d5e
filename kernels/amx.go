package kernels

import (
	"sync/atomic"
	"unsafe"

	"bitgo/quantcfg"

	"github.com/klauspost/cpuid/v2"
)

// AMX (Advanced Matrix Extensions: AMX-TILE and AMX-INT8, on Sapphire Rapids and later
// Xeons) runs the zmm path's GEMM: each unpacked row block is multiplied by 32 tokens at a
// time as 16x64-byte tiles (gemmAMX), where the zmm micro-kernel does one vpdpbusd per 16
// rows, token and quad. It takes prefill and, from amxMinN tokens (12-20 by format), small
// batches, whose GEMV kernels pay vpdpbusd per token. Below that the GEMV kernels stay on
// vpdpbusd: four i2s tokens through tiles (the unpacked weights stored, then loaded as
// tiles) ran no faster than the zmm kernel cache-resident (19 GB/s both, a C prototype on a
// 2-vCPU Xeon guest), since there each weight byte is used by only a few tokens. i2s's
// batches of 3-16 tokens take a GEMV of their own on tiles instead (gemvAMXI2S): the
// weights as the tiles' rows, each row's codes decoded straight into tile rows (no
// transpose), each pair of blocks' decode between the products of the pair before, with
// prefetches across row blocks; from DRAM it reads 10.7-14.9 GB/s a thread at 4-16 tokens
// on the 8B shapes, where one token reads 15-16 on vpdpbusd. int2's batches of 4-16 take one
// too (gemvAMXInt2): its layout is the GEMM's tile order already, so each 64-input step is
// looked up into a small buffer between the products of the step before (11-15 GB/s a
// thread from DRAM at 4-16 tokens, where the vpdpbusd GEMV read 13 at four, 5.4-5.7 at 16).
//
// Linux gives a process the tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM);
// without it the first tile instruction is fatal. The request is made once, at start, on a
// CPU that has AMX-TILE and AMX-INT8, unless BITD_DISABLE_AMX=1.

// amxTileT is the most tokens one gemmAMX call takes (two 16-row token tiles).
const amxTileT = 32

var (
	amxState string // why AMX cannot run here ("" when it can), fixed at start
	amxOff   atomic.Bool
)

func init() {
	amxState = amxDetect()
}

func amxDetect() string {
	if !hasAsm {
		return "built without assembly"
	}
	if !cpuid.CPU.Supports(cpuid.AMXTILE, cpuid.AMXINT8) {
		return "CPU lacks AMX-TILE/AMX-INT8"
	}
	if envBool("BITD_DISABLE_AMX") {
		return "disabled (BITD_DISABLE_AMX=1)"
	}
	if err := amxPermit(); err != nil {
		return "the OS refused the tile state: " + err.Error()
	}
	return ""
}

// AMXReason says why the AMX GEMM cannot run here ("" when it can): the CPU, the OS's
// permission, a kill switch, or the AVX-512 path (whose unpacked row blocks it multiplies)
// being off.
func AMXReason() string {
	if amxState != "" {
		return amxState
	}
	if amxOff.Load() {
		return "disabled (test hook)"
	}
	if r := isaReason(ISAAVX512); r != "" {
		return "the AVX-512 path cannot run: " + r
	}
	return ""
}

// DisableAMX switches the AMX GEMM off until restore is called (tests, benchmarks).
func DisableAMX() (restore func()) {
	old := amxOff.Swap(true)
	return func() { amxOff.Store(old) }
}

// amxFor reports whether the GEMM of l runs on AMX: the path has it, and every segment is
// whole 64-input tile steps.
func (k *simdKernel) amxFor(l *Layer) bool {
	if k.ops.amx == nil || AMXReason() != "" {
		return false
	}
	ly := l.Layout
	return ly.Kp%64 == 0 && l.SegLen%64 == 0
}

// OnAMX reports whether kernel k runs layer l at n tokens on AMX tiles: the GEMM of an
// integer format from amxMinN tokens (gemmMinN where that is lower) where amxFor holds, or
// i2s's small-batch GEMV (amxvFor).
func OnAMX(k Kernel, l *Layer, n int) bool {
	sk, ok := k.(*simdKernel)
	if !ok || sk.format.IsFloat() {
		return false
	}
	p := sk.plan(l, n)
	return p.amx || p.amxv
}

// AMXMinTokens is the fewest tokens of a call that format f's layers of in_features k run
// on AMX with (amxvMinN for i2s, whose small-batch GEMV takes them, amxMinN for the others'
// GEMM), or 0 for the float formats (for `bitd info`).
func AMXMinTokens(f quantcfg.Format, k int) int {
	switch {
	case f.IsFloat():
		return 0
	case f == quantcfg.I2S:
		return amxvMinN(roundUp(k, 128))
	case f == quantcfg.Int2 && roundUp(k, 32)%64 == 0:
		return amxv2MinN
	}
	return min(amxMinN(f), gemmMinN)
}

// The small-batch i2s GEMV on AMX (gemvAMXI2S) takes amxvMinN(Kp) to amxvMaxN tokens, one
// segment (per-token or per-tensor activation scales); fewer run on the vpdpbusd GEMV, more
// on the AMX GEMM.
const amxvMaxN = 16

// amxvMinN is the fewest tokens the AMX GEMV takes at a padded K of kp. Against the
// vpdpbusd GEMV (a Sapphire Rapids-class Xeon guest, one `bitd bench` per build in turn, one
// and two threads) it took 1/(1.06-1.15) of the time at three tokens on 14336x4096 and
// 4096x4096 (at two 1/(0.87-1.04), so two stay), 1/(1.11-1.20) at four, 1/(1.35-1.57) at
// five and six, 1/(1.6-1.9) at 8 to 16 (the AMX GEMM's time at 12 to 16); at K = 2560 (2560x2560, 6912x2560), where the rows are
// shorter against each row block's fixed costs (the sums' gathers and the epilogue), 0.81-0.92
// at three and four tokens, 1.02-1.13 at five, 1.09-1.24 at six.
func amxvMinN(kp int) int {
	if kp >= 4096 {
		return 3
	}
	return 5
}

// amxv2MinN is the fewest tokens int2's AMX GEMV (gemvAMXInt2) takes. Against the vpdpbusd
// GEMV (the 2-vCPU Xeon guest, from DRAM, one `bitd bench` per build in turn; 4096x14336,
// 14336x4096, 2560x2560, one thread / two) it took 1/(1.015, 0.93, 0.96) / 1/(1.025, 0.94,
// 0.90) of the time at three tokens, 1/(1.10, 1.03, 1.07) / 1/(1.11, 1.07, 1.01) at four,
// 1/(1.19, 1.12, 1.07) at five (two threads), 1/(1.28-1.41) at eight and 1/(2.06-2.37) at
// sixteen (one thread).
const amxv2MinN = 4

// amxvFrom is the fewest tokens format f's AMX GEMV takes at a padded K of kp.
func amxvFrom(f quantcfg.Format, kp int) int {
	if f == quantcfg.Int2 {
		return amxv2MinN
	}
	return amxvMinN(kp)
}

// amxvFor reports whether the GEMV of n tokens of l runs on AMX (gemvAMXI2S, gemvAMXInt2:
// one segment; int2 in whole 64-input steps).
func (k *simdKernel) amxvFor(l *Layer, n int) bool {
	if k.ops.amxv == nil || n < amxvFrom(k.format, l.Layout.Kp) || n > amxvMaxN || l.Segments() != 1 || AMXReason() != "" {
		return false
	}
	return k.format != quantcfg.Int2 || l.Layout.Kp%64 == 0
}

// amxv2Args: the small-batch int2 GEMV on AMX (gemvAMXInt2), N <= 16 tokens x NRB
// consecutive row blocks.
type amxv2Args struct {
	W       unsafe.Pointer // the first row block
	X       unsafe.Pointer // the activations as quantized ([N][XStride] int8)
	XStride int            // Kp
	Steps   int            // 64-input steps per row block (Kp/64)
	Sums    unsafe.Pointer // int32 [NRB][N][32]
	N       int
	Buf     unsafe.Pointer // 64-byte aligned, amxv2BufBytes: two steps' decoded tile rows
	Cfg     unsafe.Pointer // amxConfig's for N
	NRB     int            // row blocks, >= 1
	Tab     unsafe.Pointer // the unpacker's tables (buildInt2Tab: low codes, high codes)
	PF      int            // how far ahead the stream is prefetched into L1 (bytes)
}

// amxv2BufBytes is gemvAMXInt2's scratch: two steps of 16 quads x 128 bytes.
const amxv2BufBytes = 4 << 10

// amxv2Ahead is how far ahead gemvAMXInt2 prefetches its stream into L1 (amxv2Args.PF).
// From DRAM at one thread (4 and 16 tokens; 4096x14336, 14336x4096 and 2560x2560; seven
// interleaved rounds) 512 and 2048 bytes ran within 3% of it, none 0-4% slower, 4 KiB
// 12-23% slower.
const amxv2Ahead = 1024

// amxvArgs: the small-batch i2s GEMV on AMX (gemvAMXI2S), N <= 16 tokens x NRB row blocks.
type amxvArgs struct {
	W       unsafe.Pointer // the first row block's stream (quad 0)
	QStride int            // bytes per row quad (Kp)
	Pairs   int            // pairs of 128-input blocks, the last maybe of one (Odd)
	Odd     int            // 1 where Kp/128 is odd
	X       unsafe.Pointer // the activations: pair p, run s's 16 quads x N tokens at X + (4p+s)*BStride
	BStride int            // 64*N
	Sums    unsafe.Pointer // int32 [NRB][N][32]
	N       int
	Buf     unsafe.Pointer // 64-byte aligned, amxvBufBytes: two pairs' decoded rows, then the sums' tiles
	Cfg     unsafe.Pointer // amxvConfig's for N
	NRB     int            // row blocks, >= 1
	RBBytes int            // bytes between row blocks' streams
	I       int            // the kernel's row block counter (written by it)
}

// amxvGroup is the most row blocks one gemvAMXI2S call takes (their sums, 32 KiB at 16
// tokens, stay in L1 for the epilogue after it).
const amxvGroup = 16

// amxvBufBytes is gemvAMXI2S's scratch: 2 x 8 KiB of decoded tile rows, 2 KiB of sums.
const amxvBufBytes = 18 << 10

// amxvConfig writes gemvAMXI2S's tile configuration for N tokens: tiles 0-1 (sums) and 4-7
// (activations, runs 0-3) 16 rows of 4N bytes, tiles 2-3 (codes) 16 rows of 64.
func amxvConfig(c *[64]byte, N int) {
	*c = [64]byte{}
	c[0] = 1
	for tile := 0; tile < 8; tile++ {
		cols := 4 * N
		if tile == 2 || tile == 3 {
			cols = 64
		}
		c[16+2*tile] = byte(cols)
		c[48+tile] = 16
	}
}

// amxvActs writes gemvAMXI2S's activation tiles for n tokens of q ([n][kp] int8) to xt:
// per pair of blocks p and run s, 16 quads of n tokens' dwords, quad i being the tile rows'
// inputs 4i..4i+3: run s of block 2p for i < 8, of block 2p+1 for i >= 8 (zeros past kp).
// One pass, each destination row written in order: Prepare of 8 tokens at K = 14336 took 29
// us instead of 38 with a permutation followed by transposeTiles (BenchmarkPrepare), about 3%
// of the call at one thread.
func amxvActs(q []int8, kp, n int, xt []uint32) {
	x := words(q[:n*kp])
	kw := kp / 4
	for p := 0; p < (kp+255)/256; p++ {
		for s := 0; s < 4; s++ {
			row := xt[(4*p+s)*16*n:][:16*n]
			for h := 0; h < 2; h++ {
				k := (256*p + 128*h + 32*s) / 4
				d := row[8*h*n : 8*(h+1)*n]
				if k >= kw {
					clear(d)
					continue
				}
				var src [amxvMaxN]*[8]uint32
				for t := range n {
					src[t] = (*[8]uint32)(x[t*kw+k:])
				}
				for i := range 8 {
					di := d[i*n : (i+1)*n]
					for t, st := range src[:len(di)] {
						di[t] = st[i]
					}
				}
			}
		}
	}
}

// amxArgs: the AMX GEMM micro-kernel (gemmAMX), T <= 32 tokens x one unpacked row block:
// Sums[j][t][r] = sum over segment j's quads q and i < 4 of B[q][r][i] * X[t][4q+i], the
// activations as quantized (signed), the weights unpacked (unsigned).
type amxArgs struct {
	B       unsafe.Pointer // unpacked row block at quad 0 ([Kp/4][32][4] bytes)
	X       unsafe.Pointer // token 0's activations at input 0
	XStride int            // bytes between tokens in X
	Sums    unsafe.Pointer // int32 [NSeg][T][32]
	SegQ    int            // quads per segment but the last (multiples of 16)
	NSeg    int
	LastQ   int            // quads in the last segment
	SumsSeg int            // bytes between segments in Sums (T*128)
	Cfg     unsafe.Pointer // the tile configuration for T (amxConfig; tile 2 has rows if T > 16)
}

// amxConfig writes the 64-byte tile configuration of gemmAMX for T tokens to c: palette 1;
// tiles 0-3 (sums) and 4-5 (activations) of tokens 0-15 and 16-31, as many rows as tokens,
// 64 bytes a row; tiles 6-7 (weights) 16 rows of 64 bytes. Unused tiles stay zero.
func amxConfig(c *[64]byte, T int) {
	*c = [64]byte{}
	c[0] = 1
	set := func(tile, rows int) {
		if rows > 0 {
			c[16+2*tile] = 64
			c[48+tile] = byte(rows)
		}
	}
	t0, t1 := min(T, 16), max(T-16, 0)
	for _, tile := range []int{0, 1, 4} {
		set(tile, t0)
	}
	for _, tile := range []int{2, 3, 5} {
		set(tile, t1)
	}
	set(6, 16)
	set(7, 16)
}

// AMXPeakOps runs the AMX-INT8 peak loop (four independent tdpbsud on full tiles) for iters
// iterations and returns the int8 operations it performed (multiply and add counted
// separately); 0 where AMX cannot run or iters < 1.
func AMXPeakOps(iters int) float64 {
	if iters < 1 || AMXReason() != "" {
		return 0
	}
	var cfg [64]byte
	amxConfig(&cfg, 32) // every tile full
	amxPeak(&cfg, iters)
	return float64(iters) * 4 * 16 * 16 * 64 * 2
}
