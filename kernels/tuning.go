package kernels

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"

	"github.com/klauspost/cpuid/v2"
)

// Tuning is a set of kernel choices that depend on the CPU's memory system and cores more
// than on its instruction set: two CPUs with the same AVX-512 features can want different
// prefetching, or a different kernel for the same format, to read their weights at the
// memory's rate. Every choice gives the same results (the kernels are bit for bit the
// reference); only their speed differs. The tuning is detected once at start and can be
// forced with BITD_TUNING=default|zen4|zen3, either with "+adapt" (TuningAdapt; a bad value
// is reported and ignored).
type Tuning int32

const (
	// TuningDefault is the kernels as measured on Intel Xeons (Emerald Rapids, and a 2-vCPU
	// guest with a 480 MiB L3): every GEMV prefetches its weight stream in software at two
	// levels (into L2 far ahead, into L1 near), one-token i2s on a long K takes two row
	// quads a pass (gemvI2SLongT1AVX512), one-token tl1 looks its pair sums up.
	TuningDefault Tuning = iota
	// TuningZen4 is for AMD Zen 4 (family 19h with AVX-512: 32 KiB L1d, 1 MiB L2, one core
	// reading 32-34 GB/s from DRAM in a 2-vCPU EPYC guest). There, from DRAM at one
	// thread (the 8B shapes and 2560x2560, `bitd bench`, two or three rounds per build):
	//   - the one-token bf16 and i2s GEMVs (i2s: K below i2sLongK) read 93-103% of the
	//     roofline with no software prefetch, 67-84% with the two-level one, which the
	//     hardware's stream prefetchers then trail: they run their ...HW variants (f32,
	//     two lines an input, read 99-101% either way and takes its HW variant too; two
	//     tokens and more keep the prefetch: bf16 with two tokens 85-103 with it, 80-90
	//     without);
	//   - one-token i2s on a long K takes the row kernel of three and four tokens
	//     (gemvI2SRowT1AVX512: activations as two 64-byte loads a block, the driver's
	//     prefetch distances, parts of K beyond i2sPartBytes, codes taken by ands): 90-93%
	//     on 4096x14336, where two quads a pass read 61-69 and one quad a pass 51-66 with or
	//     without prefetch (prefetchnta 0.5-4 KiB ahead: 62-73). The one-quad kernel without
	//     prefetch falls with K (4096x4096 to 4096x16384: 95, 91, 85, 90, 71, 64, 56), though
	//     from L3 it still reads 36.5 GB/s at K = 14336, so it is its DRAM stream that
	//     stalls; that the activations and a quad's stream outgrow L1 together is a guess
	//     (parts of K, 4 and 8 KiB of activations, did not help the row kernel: 64 and 82
	//     against 83 whole, before its ands). Four chains of a vpaddd a block that nothing
	//     reads (rowPad in _asm/gemv.go) then took it from 86.7-89.2% to 90.8-96.1% at one
	//     thread on 4096x14336 and 2048x8192, measured in one process against the kernel
	//     without them, though from L2 and L3 they slow it by 12-14%;
	//   - (until layout kernels/9, one-token int1 with K up to 2560 ran on activations each
	//     thread expanded per call, +2-6% from DRAM at one thread on 2560x2560 and
	//     6912x2560; int1's lookup kernels have no variant of their own here;)
	//   - one-token tl1 multiplies (lutTL1MZ, as from two tokens on) instead of looking up:
	//     80-89% against 66-71 (the lookup kernel runs 22 GB/s even from L3 there);
	//   - three- and four-token i2s (and so five to eight, four at a time) take their codes
	//     with a shift and ands (gemvI2SAndT3AVX512, gemvI2SAndT4AVX512): vgf2p8affineqb runs
	//     on the pipes of vpdpbusd there. From L3 four tokens ran at 90-91% of the int8 peak
	//     against 76, from DRAM 15-25% faster. Two tokens run the row kernel too
	//     (gemvI2SAndT2AVX512): 80-85% of the roofline against 49-55 on a long K at one
	//     thread (see _asm/gemv.go, gemvI2SRowZNamed);
	//   - two-token int2 of a consecutive code book runs table-free (gemvInt2SeqT2AVX512,
	//     ands where the pair kernel's five vpermb share vpdpbusd's pipes): from L3 95% of
	//     the int8 peak against 82, from DRAM at one thread 78-84% of the roofline against
	//     69-73 (8B shapes, 2560x2560, 2560x6912; two rounds), at two threads the same;
	//   - one-token tl2 runs lutTL2T1AVX512HW: no software prefetch into L2 and L1, and
	//     each weight line marked non-temporal (prefetchnta 128 bytes ahead) so that the
	//     stream leaves the chunk's tables in L1. From DRAM, four rounds in turn with the
	//     build before (no prefetch at all): one thread 80-88% of the roofline against
	//     59-66, two threads 86-97 against 76-89 (the 8B shapes and 2560x2560; one round
	//     of each dipped lower at two threads with the host's memory rate). That build
	//     had read 58-66% at one thread against 57-61 with the default's prefetch; its
	//     lookups run 34 GB/s from L3, about the memory's rate. Other builds from DRAM (most
	//     timing-only, with wrong sums; the 8B shapes at one thread, two to four rounds,
	//     each in turn with it):
	//       - half the 16 vpermw a block taking a table from a register instead of memory,
	//         the instructions otherwise the same: 89-95; all 16: 92-96;
	//       - half of them reading the table line the vpermw before them read (the same
	//         loads and micro-ops, 8 lines a block): 90-96; reading the next block's line
	//         instead (16 lines a block, the same 8 over a chunk): 60-65;
	//       - every block reading the first block's 16 table lines (1 KiB of tables in
	//         all): 79-86, and 82-95 with the next chunk's tables built between chunks
	//         instead of during the one before (which alone moved nothing: 63-65); the
	//         Sums of every row block in one place instead: 51-64;
	//       - each table loaded apart from its vpermw (a load, then a register vpermw):
	//         37-42; the next block's table lines prefetched: 46-54;
	//       - prefetchnta of the weight lines 0 to 384 bytes ahead: 73-88 (512 to 1024
	//         bytes: 61-70);
	//         their loads as vmovntdqa instead: 48-63;
	//       - two row blocks a pass, each table loaded once for both (tl2Pairs without
	//         software prefetch): 37-39; with the second one's stream prefetched 40-48;
	//         read as one stream, as if the layout interleaved the two row blocks' blocks,
	//         61-71, whether each table went to a register or was folded into both vpermw;
	//       - table chunks of 1, 4 or 6 blocks instead of 12: 41-52, 60-65, 57-64 (1 with
	//         every vpermw's table from a register: 49-59); prefetching into L2 only:
	//         46-51;
	//       - calls over 1, 2, 3 or 6 of a chunk's blocks at a time (less of the tables
	//         in use, the stream in strides): 47-50, 25-27, 26-29, 30-31;
	//       - two triples' magnitude tables on one line, modelled by the 8-line build
	//         with the three more operations a lookup the signs would then cost (vpord for
	//         the index, vptestmw and a masked vpaddw into a second chain): 53-60.
	//     So it was neither the micro-ops (16 vpermw, 16 vpaddw, 10 vpmultishiftqb and the
	//     gather of triple 15: 28.5 cycles a block from L1) nor the count of table loads a
	//     byte, but table lines that the weight stream had pushed out of L1: each such miss
	//     waits behind the stream's misses to DRAM (so from L3 nothing shows). The
	//     interleaved pairs, which touch each table line once per 640 bytes, are the
	//     figure that fits this least. Decoding the codes to int8 weights for vpdpbusd is
	//     no way to the 1.15x over i2s: a prototype (four rows a pass, 128 triples a row
	//     as 64 bytes of magnitudes and 16 of signs, three vpermb digit tables, the signs
	//     by a masked vpaddb) ran 25 GB/s with its weights in L2, below the memory's rate,
	//     and 16.5-18.5 from DRAM; its vpermb and vpdpbusd share pipes (from L2 without
	//     the vpermb 35 GB/s, without the vpdpbusd 27, without the signs 33). (One token
	//     once read 40-94% with one and the same binary, depending on where the page cache
	//     put the file's pages; four copies of the binary later read 57-58 alike.)
	//     Later its blocks were cut from 52 vector operations to 47 (vpsrlw for
	//     vpmultishiftqb, triple 15 gathered with vpshldw from five plane registers; see
	//     onShiftPipes in _asm/gemv.go): from DRAM 2-9% more at one thread (twelve rounds
	//     in turn), from L2 and L3 9-13% more (medians).
	//     At two threads with the memory in its fast state (about 55 GB/s for two
	//     threads), the kernel reads only 35-37 GB/s on 6912x2560 (from L3 63 at two
	//     threads), where i2s reads 47-51; in one process against it (11-15 rounds, two
	//     threads, K = 2560): prefetcht0 for prefetchnta 0.94-0.97x (one thread 0.82-0.98x),
	//     prefetchnta 320 or 640 bytes ahead 0.93-0.94x and 0.85-0.88x, no prefetch at all
	//     0.94-1.00x, prefetchnta and prefetcht1 2 KiB ahead 0.91-1.01x (one thread
	//     0.77-0.94x).
	//   - two-token tl2 (lutTL2T2AVX512NT, two row blocks a pass, two tokens' tables in L1)
	//     marks its weight lines non-temporal too, and prefetches the next pair of row
	//     blocks into L2 only: 59-67% of the roofline at one thread against 31-33, three
	//     rounds in turn (the 8B shapes and 2560x2560). Without any prefetch it had read
	//     21% against 32. Three and four tokens, whose kernels look up byte planes with
	//     vpermb, gained nothing from it (28-29 against 26-29, 25-28 against 25-26), nor did
	//     two to four tokens of i2s and two of int2 (their activations the only lines to
	//     keep). So three or more tl2 tokens run in passes of two (lutTunedT): three 38-42%
	//     against 26-28, four 32-36 against 24-26, eight 16-19 against 14-15.
	// The int2, int1 and int8 kernels keep the default's prefetch: without it int2 read
	// 63-75% instead of 91-95 (the table-free one-token kernel later, in one process
	// against itself with the prefetch: 0.59-0.89x at one thread, 0.67-0.86x at two). For
	// one-token int2 (in one process, `bitd bench -tuning` against scratch tunings, 11-21
	// rounds, each order once, the 8B shapes and 2560x2560):
	//   - prefetching 16-32 KiB ahead into L2 instead of 8: within +-4% at one thread, 1-2%
	//     slower at two; 4 KiB ahead, or 4 KiB into L1, 0.72-0.82x;
	//   - each step's two 32-byte units in one 64-byte load instead of two vbroadcasti64x4
	//     (which takes a shuffle pipe on Zen 4 besides the load), the activations' dwords
	//     per half by vpbroadcastq and vpermd: a C copy of the loop 15-20% faster from L1,
	//     the kernel 1.10-1.12x from L3, but from DRAM at one thread 0.88-1.04x (four idle
	//     vpaddd chains, rowPad's, as well: 0.94-0.95x). As with int1's expanded
	//     activations on a long K (before kernels/9), a block that is faster from cache does not make the
	//     one-thread DRAM stream faster here; from L2 the one-token int2 and i2s kernels
	//     already read 30 and 33 GB/s, about DRAM's rate. So did the one-token i2s kernel
	//     below i2sLongK on activations each call stored with every 32-input run twice (a
	//     plain 64-byte load where it takes vbroadcasti64x4): from cache 1.04-1.14x, from
	//     DRAM 0.76-0.94x at one thread and 0.86-0.93x at two (14336x4096, 4096x4096,
	//     2560x2560, 6912x2560 and 8192x2048; 11 rounds in one process). Nor did
	//     a burst of software prefetches over the first 4-64 KiB of each worker's range,
	//     before its tables and sweep, shorten a call from DRAM (i2s 0.92-1.01x, tl2
	//     0.86-1.04x on 512x4096 and 2560x2560, where a call costs some microseconds more
	//     than its bytes at the stream's rate).
	TuningZen4
	// TuningZen3 is for AMD Zen 3 (family 19h without AVX-512: the AVX2 path; a 2-vCPU EPYC
	// guest, family 19h model 1, reading 22-26 GB/s from DRAM at one thread). There software
	// prefetch straight into L1 (prefetcht0 8 KiB ahead, no prefetcht1) reads faster than
	// the default's, so its one-token AVX2 kernels of i2s, int8, int1 and the bf16/f32 pairs
	// run their ...L1 variants (fmtOps.l1). Against the default's, from DRAM on
	// 4096x14336, 14336x4096 and 2560x2560 at one and two threads (`bitd bench -tuning
	// default,zen4` of a build whose zen4 tuning took them, then `-tuning zen3,default`; 15
	// rounds, medians): int1, whose default leaves its weights to the hardware's
	// prefetchers, 1.11-1.30x (three runs); i2s 0.93-1.19x (four runs, 19 of 24 above 1.00;
	// in the last, the command, kernels the same under both tunings moved
	// 0.86-1.05x); the bf16 pair 0.97-1.10x, int8 0.98-1.15x (four runs), f32 0.95-1.09x
	// (three; see _asm: withL1). Two and four tokens, int2 and the
	// tl2 panel kernels moved within the noise (0.91-1.13x) and are the default's. On a
	// Xeon the AVX-512 i2s kernel prefetching into L1 only ran 0.7x (see _asm: i2sFar), and
	// the Zen 4 guest's AVX2 int1 read as fast with any prefetch or none: so only Zen 3
	// takes these.
	//
	// Its one-token i2s also reads two row blocks at once (runTwo, gemvI2STwoT1AVX2):
	// row block rb with the one half the layer on (RunSplit splits the call in such pairs:
	// Paired; a Run of a range alone pairs within it), and the kernel runs each chunk of a
	// row quad (up to seven 128-byte blocks) on one stream, then the same chunk on the
	// other. A C loop of the i2s block over 1 GiB read 11-12% faster from two
	// streams 256 KiB to 7 MiB apart than from one, alternating every block or every 7
	// (every 28: 3%; nearer streams gain less or lose: twoMinDist). Against the one-stream
	// L1 kernel, in one process (a build whose default tuning took the pair; 15 rounds,
	// 4096x14336, 14336x4096, 2560x2560): one thread 1.09-1.12x and 1.07-1.15x (two runs),
	// two threads 1.01-1.24x and 1.01-1.11x, where int2, the same kernel under both, moved
	// 0.87-1.04x. The pair prefetches on two levels, into L2 8 KiB ahead and into L1 2 KiB:
	// at two threads 1.00-1.14x as fast as with 4 KiB into L2 (i2sFar, the default's), at
	// one 0.96-1.05x; into L1 only it read 0.96-1.08x as fast, with none 0.85-0.91x (see
	// _asm: gemvI2SY1Two).
	// One-token int2 with per-row scales reads two streams as well (gemvInt2TwoT1AVX2; in
	// groups its kernel runs the epilogue, and it keeps one): on a day its kernel read 21.8
	// GB/s from cache, 1.00-1.09x as fast as one stream in one process (three runs, 11-15
	// rounds; 17 of 18 above 1.00, one round of noise 0.83x); on a slower day, its kernel at
	// 16 GB/s from cache, below the memory's rate, where i2s's read 18-21, 0.95-1.07x.
	TuningZen3
	numTunings
)

// TuningAdapt marks a tuning adaptive (its name then ends in "+adapt"): its one-token
// GEMVs that have a kernel of each kind of prefetch (i2s below i2sLongK, tl2, bf16, f32 on
// the AVX-512 path) choose between the two as they run, starting from the tuning's choice
// (see oneSite). Zen 4 runs zen4+adapt. There the zen4 kernels, which leave the weight
// stream to the hardware's prefetchers, read 93-103% of the roofline on a quiet host, but
// with a busy neighbour in the L3 and memory (the cache-resident i2s canary at 22-33 GB/s
// instead of 39-50) the default's read up to 1.3x faster on some shapes. `bitd bench
// -tuning zen4,zen4+adapt,default` (i2s, tl2, bf16; 4096x14336, 14336x4096, 2560x2560,
// 6912x2560; one and two threads), on such a host with the first version of the choice (9
// rounds): zen4+adapt over zen4 0.96-1.24x, and where the default was 1.09-1.30x faster
// than zen4 it was 1.05-1.24x; on a quiet host, as it is now (the bench, 15
// rounds, the 8B shapes and 2560x2560): 0.98-1.02x, as the kernels that do not adapt
// (int2: 0.97-1.02x).
const TuningAdapt Tuning = 1 << 8

const adaptSuffix = "+adapt"

var tuningNames = [numTunings]string{"default", "zen4", "zen3"}

// base is t without TuningAdapt: the kernel set it starts from.
func (t Tuning) base() Tuning { return t &^ TuningAdapt }

// Adaptive reports whether t carries TuningAdapt.
func (t Tuning) Adaptive() bool { return t&TuningAdapt != 0 }

func (t Tuning) String() string {
	b := t.base()
	if b < 0 || b >= numTunings {
		return fmt.Sprintf("tuning(%d)", int(t))
	}
	if t.Adaptive() {
		return tuningNames[b] + adaptSuffix
	}
	return tuningNames[b]
}

// ParseTuning reads a tuning's name ("default", "zen4", either with "+adapt").
func ParseTuning(s string) (Tuning, error) {
	name, flag := strings.TrimSpace(s), Tuning(0)
	if len(name) > len(adaptSuffix) && strings.EqualFold(name[len(name)-len(adaptSuffix):], adaptSuffix) {
		name, flag = name[:len(name)-len(adaptSuffix)], TuningAdapt
	}
	for i, n := range tuningNames {
		if strings.EqualFold(name, n) {
			return Tuning(i) | flag, nil
		}
	}
	return 0, fmt.Errorf("unknown kernel tuning %q (want one of %s)", s, strings.Join(TuningNames(), ", "))
}

// TuningNames lists the tunings' names, in order, each then with "+adapt".
func TuningNames() []string {
	var ns []string
	for _, n := range tuningNames {
		ns = append(ns, n)
	}
	for _, n := range tuningNames {
		ns = append(ns, n+adaptSuffix)
	}
	return ns
}

// tunedOne: the one-token float, i2s and tl2 GEMVs run their variants without software
// prefetch (fmtOps.oneTuned).
func (t Tuning) tunedOne() bool { return t.base() == TuningZen4 }

// i2sLongRow: one-token i2s on a long K runs the row kernel (fmtOps.gemvRow1) instead of
// two row quads a pass (fmtOps.gemvLong1).
func (t Tuning) i2sLongRow() bool { return t.base() == TuningZen4 }

// l1Prefetch: the one-token AVX2 kernels that have one run their variant that prefetches
// into L1 only (fmtOps.l1).
func (t Tuning) l1Prefetch() bool { return t.base() == TuningZen3 }

// fewTuned: the GEMVs of a few tokens take the tuning's kernels (fmtOps.gemvTuned,
// gemvSeqTuned, lutTuned): two-token i2s runs the row kernel (gemvI2SAndT2AVX512), three-
// and four-token i2s take their codes with a shift and ands (gemvI2SAndT3AVX512,
// gemvI2SAndT4AVX512) in place of vgf2p8affineqb, two-token int2 of a consecutive code book
// runs table-free (gemvInt2SeqT2AVX512), two-token tl2 marks its weight lines non-temporal
// and prefetches the next pair of row blocks into L2 only (lutTL2T2AVX512NT), and more tl2
// tokens run in passes of two (lutTunedT).
func (t Tuning) fewTuned() bool { return t.base() == TuningZen4 }

// tl1Multiply: one-token tl1 runs the multiplying kernel (lut[1]) instead of the lookup one
// (fmtOps.lutOne).
func (t Tuning) tl1Multiply() bool { return t.base() == TuningZen4 }

// Idle tells why t changes nothing that runs ("" when it does): zen3's choices are AVX2
// kernels' (the ymm paths' fmtOps), so they run only where the AVX-512 path does not and
// AVX2's does; every other choice is an AVX-512 kernel's (the zmm path's fmtOps), so with
// the AVX-512 kernels switched off (BITD_DISABLE_AVX512, BITD_PUREGO) the kernels that run
// are the default's.
func (t Tuning) Idle() string {
	switch {
	case t.l1Prefetch() && ISAAvailable(ISAAVX512):
		return "not in effect: its kernels are AVX2's, and the AVX-512 path runs here"
	case t.l1Prefetch() && !ISAAvailable(ISAAVX2):
		return "not in effect: its kernels are AVX2's, and " + isaReason(ISAAVX2)
	case t.l1Prefetch(), t.base() == TuningDefault && !t.Adaptive() || ISAAvailable(ISAAVX512):
		return ""
	}
	return "not in effect: its kernels are AVX-512's, and " + isaReason(ISAAVX512)
}

// Changes lists what t changes against the default, for `bitd info`.
func (t Tuning) Changes() []string {
	var c []string
	if t.tunedOne() {
		start := ""
		if t.Adaptive() {
			start = " start"
		}
		c = append(c, fmt.Sprintf("one-token bf16, f32, i2s (K < %d) and tl2 GEMVs%s without software prefetch (tl2: its weight lines marked non-temporal, its block in 47 vector operations: vpsrlw shifts, triple 15 gathered by vpshldw)", i2sLongK, start))
	}
	if t.i2sLongRow() {
		c = append(c, fmt.Sprintf("one-token i2s with K >= %d on the row kernel of two to four tokens, its block with idle vpaddd chains (faster from DRAM there)", i2sLongK))
	}
	if t.fewTuned() {
		c = append(c, "two- to four-token i2s GEMVs on the row kernel, codes taken by shift and and (no vgf2p8affineqb)")
		c = append(c, "two-token int2 GEMVs (consecutive code books) table-free, as one token and three or more; tl2 GEMVs of two or more tokens in passes of two, their weight lines marked non-temporal")
	}
	if t.tl1Multiply() {
		c = append(c, "one-token tl1 multiplies (vpdpbusd) instead of looking up")
	}
	if t.l1Prefetch() {
		c = append(c, "one-token AVX2 i2s, int8, int1 and bf16/f32 (two row blocks a call) GEMVs prefetch their weights into L1 only, 8 KiB ahead (int1 had left them to the hardware's prefetchers)")
		c = append(c, "one-token AVX2 i2s and int2 (per-row scales) GEMVs read two row blocks at once, half the layer apart: two streams (each prefetched into L2 8 KiB ahead and into L1 2 KiB)")
	}
	if t.Adaptive() {
		c = append(c, fmt.Sprintf("one-token i2s (K < %d), tl2, bf16 and f32 GEMVs choose as they run between their kernels with and without software prefetch, by the time per byte of each shape's calls: every %dth to %dth piece of %d KiB or more runs the other kernel (bitd_kernel_adaptive_* metrics)", i2sLongK, adaptProbe, adaptProbeMax, adaptMinBytes>>10))
	}
	return c
}

var (
	tuning    atomic.Int32
	tuningWhy string
)

func init() {
	t, why := detectTuning()
	if v, ok := os.LookupEnv("BITD_TUNING"); ok && v != "" {
		if f, err := ParseTuning(v); err != nil {
			slog.Warn("ignoring environment variable", "name", "BITD_TUNING", "value", v, "err", err)
		} else {
			t, why = f, "BITD_TUNING="+v
		}
	}
	tuning.Store(int32(t))
	tuningWhy = why
}

// detectTuning picks the tuning for this CPU and says why.
func detectTuning() (Tuning, string) {
	c := cpuid.CPU
	if c.VendorID == cpuid.AMD && c.Family == 0x19 && zmmCPU() {
		return TuningZen4 | TuningAdapt, "AMD family 19h with AVX-512 (Zen 4), adaptive: a shared host changes which prefetch reads faster"
	}
	if c.VendorID == cpuid.AMD && c.Family == 0x19 && !c.Supports(cpuid.AVX512F) && c.Supports(cpuid.AVX2) {
		return TuningZen3, "AMD family 19h without AVX-512 (Zen 3)"
	}
	return TuningDefault, fmt.Sprintf("%s family %xh: no measured tuning of its own", c.VendorString, c.Family)
}

// CurrentTuning is the tuning the kernels run with, and why it was chosen.
func CurrentTuning() (Tuning, string) { return Tuning(tuning.Load()), tuningWhy }

func currentTuning() Tuning { return Tuning(tuning.Load()) }

// SwitchTuning makes the kernels run with t and returns the tuning it replaced (tests,
// benchmarks; it allocates nothing: a benchmark switches per call). It must not change
// while calls run: a call's Prepare and Run read it separately.
func SwitchTuning(t Tuning) (old Tuning) { return Tuning(tuning.Swap(int32(t))) }
