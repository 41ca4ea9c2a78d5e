// Package kernels owns the arithmetic of every weight format: packing logical weights into
// the layouts the SIMD kernels read, unpacking them, activation quantization, the
// reference (pure Go) GEMV/GEMM that defines every result bit for bit, the SIMD kernels,
// and the CPU-feature dispatch between them. It owns no threads and no memory mapping:
// callers hand it row-block ranges and byte slices.
//
// # The arithmetic (one definition for every CPU, GPU and Python path)
//
// A layer has M output rows and K inputs; x is N tokens of K float32 values (bf16 inputs
// are widened exactly first). Outputs are out[t*M+m], float32, or bf16 rounded from the
// float32 result to nearest even (NaN becomes the quiet NaN 0x7FC0).
//
// Non-finite activations (NaN, ±Inf) are refused with ErrNonFinite naming the token and
// the index: the answer would be garbage, and quietly so after quantization.
//
// Integer formats (i2s, tl1, tl2, int2, int1, int8):
//
//  1. Activation quantization, per the layer's act mode. A quantization group is the whole
//     token (per-token), all N*K values of the call (per-tensor), or the inputs
//     [g*G, min(K,(g+1)*G)) of one token (per-group:G). For each group, in float32:
//     amax = max|x|, xs = 127 / max(amax, 1e-5), and for each x in it
//     xq = clamp(roundHalfEven(x*xs), -128, 127) with x*xs a float32 product.
//  2. Integer weights wq[m][k]: ternary -1/0/1, int2 codebook[code], int1 ±1, int8 itself.
//     Weight scales ws: one (tensor), ws[m] (row), or ws[m*ceil(K/G)+g] (group:G).
//  3. Segments: the groups of whichever of act/scale is grouped (the finer one when both
//     are; one divides the other), else the single segment [0, K). Per token t, row m and
//     segment j, acc_j = sum over k in j of wq[m][k]*xq[t][k], exact in int32.
//  4. Epilogue, float32, no fused multiply-add, in exactly this order:
//     p_j = (float32(acc_j) * ws(m,j)) / xs(t,j)
//     y = p_0; y = y + p_1; ...; y = y + p_last  (left to right)
//     y = y + bias[m]                            (when the layer has a bias)
//
// Float formats (bf16, f32), activations "none": per token and row,
// acc = +0, then for k = 0..K-1 in order: acc = acc + float32(w[m][k]*x[t][k]) (the
// product rounded to float32, then the sum; no FMA); y = acc (+ bias[m]).
//
// The lossless property follows: for ternary weights W_t = clamp(round(W/s), -1, 1) with
// s = mean|W|, a layer in i2s/tl1/tl2 with per-tensor scale s and per-token activations
// returns exactly (float32(W_t . xq) * s) / xs, BitNet b1.58's reference recipe.
//
// # Layouts
//
// Every layout pads M up to Mp = a multiple of 32 and stores each block of 32 rows (a row
// block) as one contiguous byte stream, so a kernel working through a row block reads
// sequentially and threads take contiguous ranges of row blocks. tl1 and tl2 are the
// exceptions: their kernels sweep K in chunks (the lookup tables of a chunk stay in L1 while
// every row block of the range uses them), so their blobs store chunk after chunk, each with
// the row blocks' pieces side by side, and a thread still reads one stream. K is padded per format
// (Kp). Padding weights (rows >= M, inputs >= K) hold the value 0 where the format has one
// (ternary formats, int8, floats), code 0 in int2 and +1 in int1, so a blob is a pure function
// of the logical weights; kernels see zero activations over [K, Kp), so padding never changes
// a result. Scales and biases are separate float32 slices, never in the
// blob. The pictures are in each format's file (i2s.go, tl1.go, tl2.go, int2.go, int1.go,
// int8.go, float.go); Layout computes sizes and offsets.
//
//	format  Kp                     row block bytes            unit
//	i2s     roundup(K,128)         8*Kp                       4 rows x 128 k in 4x32 B (I2_S order)
//	tl1     roundup(K,4)           8*Kp                       32 rows x 4 k in 32 B (two 4-bit pair indices per row);
//	                                                          chunk-major: chunks of <= 256 units
//	tl2     K3=48*floor(K/48),     320*K3/48 + 8*Kp1          32 rows x 48 k in 320 B (five planes of 5-bit codes);
//	        tail K1=K-K3 as tl1,                              chunk-major: chunks of <= 10 blocks,
//	        Kp1=roundup(K1,4)                                 the tl1 tail in the last
//	int2    roundup(K,32)          8*Kp                       32 rows x 4 k in 32 B (VNNI4, 2-bit planes)
//	int1    roundup(K,32)          4*Kp                       32 rows x 32 k in 128 B (two planes of 16-bit words);
//	                                                          panel-major: panels of <= 32 row blocks
//	int8    roundup(K,32)          32*Kp                      32 rows x 4 k in 128 B (VNNI4)
//	bf16    K                      64*K                       32 rows x 1 k in 64 B
//	f32     K                      128*K                      32 rows x 1 k in 128 B
//
// Every real model dimension (1600, 2048, 2560, 4096, 6912, 8192, 14336, a 128256-row
// vocabulary) fits; the only padding they see is K=1600 in i2s (to 1664) and M=1600
// (to 1600, already a multiple of 32). Shapes beyond quantcfg's limits are refused by
// quantcfg.LayerSpec.Validate with the dimension named.
package kernels
