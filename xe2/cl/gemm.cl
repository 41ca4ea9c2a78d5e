// gemm.cl: fused int2 x (f32 | bf16) -> (f32 | bf16) linear layers for Xe2, in the arithmetic
// of package kernels (doc.go): int8 activation quantization, exact int32 segment sums,
// the float32 epilogue p_j = (float(acc_j) * ws) / xs summed left to right, bias, bf16 RNE.
//
// Tile options (-D): XE2_TN tokens per DPAS (1, 2, 4, 8: its M), XE2_SGN token tiles per
// sub-group, XE2_SGM 16-row blocks per sub-group, XE2_WGS sub-groups per work-group,
// XE2_FUSED (1: abs-max and int8 quantization in the kernel; 0: read xe2_act_quant's
// output). Layer constants come in `prm` (see xe2/kernel.go, the prm* indices).
//
// Weights: VNNI16, [ceil(M/16)][ceil(K/32)][2][16] uint32: word (blk, s, h, lane) holds
// rows blk*16+lane, inputs s*32 + h*16 + i at bits 2i..2i+1 as two's complement 2-bit
// fields t = code - 2 (decoded through the code book: w = CBA * t + CBB when the book
// is affine, else LUT[field]).
//
// Split-K: grid dimension 2 splits K. With one segment, split s sums steps
// [s*C, (s+1)*C) and writes its int32 partial to OUT as unit s (integers add exactly in
// any order); with several segments, split s owns whole segments [s*C, (s+1)*C) and
// writes each segment's int32 sum as unit j. xe2_combine then applies the epilogue in
// segment order, so the float arithmetic is the reference's.

#ifndef XE2_TN
#define XE2_TN 1
#endif
#ifndef XE2_SGN
#define XE2_SGN 1
#endif
#ifndef XE2_SGM
#define XE2_SGM 1
#endif
#ifndef XE2_WGS
#define XE2_WGS 1
#endif
#ifndef XE2_FUSED
#define XE2_FUSED 1
#endif

#if XE2_TN != 1 && XE2_TN != 2 && XE2_TN != 4 && XE2_TN != 8
#error "XE2_TN must be 1, 2, 4 or 8 (the M of a DPAS)"
#endif

#define NTOK (XE2_TN * XE2_SGN)
#define NACC (NTOK * XE2_SGM)

// prm indices (mirrored in xe2/kernel.go).
#define P_M 0
#define P_K 1
#define P_KS 2
#define P_NBLK 3
#define P_ACT 4
#define P_GA 5
#define P_NGA 6
#define P_SK 7
#define P_GS 8
#define P_NGS 9
#define P_L 10
#define P_J 11
#define P_HASB 12
#define P_CBA 13
#define P_CBB 14
#define P_LUT 15
#define P_KP 16

inline float w_scale(const __global float *WS, __constant int *prm, int m, int k0) {
	const int sk = prm[P_SK];
	m = min(m, prm[P_M] - 1);
	if (sk == 0)
		return WS[0];
	if (sk == 1)
		return WS[m];
	return WS[m * prm[P_NGS] + k0 / prm[P_GS]];
}

// token_absmax: max |x| over inputs [k0, k1) of token t (0 when t >= n), across the sub-group.
inline float token_absmax(const __global uchar *X, int xdt, int K, int n, int t, int k0, int k1, __local int *scr) {
	float m = 0.0f;
	if (t < n)
		for (int k = k0 + SG_LID(); k < k1; k += XE2_SG)
			m = fmax(m, fabs(load_x(X, xdt, (long)t * K + k)));
	return sg_reduce_max_f(m, scr);
}

inline void store_y(__global uchar *OUT, int xdt, long i, float v) {
	if (xdt == 0)
		((__global float *)OUT)[i] = v;
	else
		((__global ushort *)OUT)[i] = bf16_rne(v);
}

inline void gemm_body(const __global uint *W, const __global float *WS, const __global float *BIAS,
		const __global uchar *X, __global float *XS, __global uchar *OUT, __constant int *prm,
		int n, int xdt, int S, int C, int t0, __local int *scr) {
	const int lid = SG_LID();
	const int M = prm[P_M], K = prm[P_K], KS = prm[P_KS], NBLK = prm[P_NBLK];
	const int ACT = prm[P_ACT], GA = prm[P_GA], NGA = prm[P_NGA];
	const int L = prm[P_L], J = prm[P_J];
	const int CBA = prm[P_CBA], CBB = prm[P_CBB];
	const uint LUT = (uint)prm[P_LUT];
	const int KP = prm[P_KP];
	const int sg = (int)get_group_id(0) * XE2_WGS + SG_IDX();
	const int blk0 = sg * XE2_SGM;
	const int split = (int)get_group_id(2);
	int j0, j1, s0, s1;
	if (J == 1) {
		j0 = 0; j1 = 1;
		s0 = split * C; s1 = min(KS, s0 + C);
	} else {
		j0 = split * C; j1 = min(J, j0 + C);
		s0 = j0 * L; s1 = min(KS, j1 * L);
	}

	float xs[NTOK];
	int acc[NACC];
	float y[NACC];
	int sx[NTOK];
	for (int a = 0; a < NACC; a++)
		y[a] = 0.0f;

#if XE2_FUSED
	if (ACT == 1) { // per-tensor: one scale over every token of the call
		float m = 0.0f;
		for (int t = 0; t < n; t++)
			for (int k = lid; k < K; k += XE2_SG)
				m = fmax(m, fabs(load_x(X, xdt, (long)t * K + k)));
		m = sg_reduce_max_f(m, scr);
		const float v = xdiv(127.0f, fmax(m, 1e-5f));
		for (int i = 0; i < NTOK; i++)
			xs[i] = v;
	} else if (ACT == 0) { // per-token
		for (int i = 0; i < NTOK; i++)
			xs[i] = xdiv(127.0f, fmax(token_absmax(X, xdt, K, n, t0 + i, 0, K, scr), 1e-5f));
	}
	if (ACT != 2 && S > 1 && sg == 0 && lid == 0 && s0 == 0)
		for (int i = 0; i < NTOK; i++)
			if (t0 + i < n)
				XS[(t0 + i) * NGA] = xs[i];
	int ga_cur = -1;
#endif

	for (int j = j0; j < j1; j++) {
		const int k0 = j * L * 32; // the segment's first input
#if XE2_FUSED
		if (ACT == 2) {
			const int ga = k0 / GA;
			if (ga != ga_cur) {
				ga_cur = ga;
				const int g0 = ga * GA, g1 = min(K, g0 + GA);
				for (int i = 0; i < NTOK; i++)
					xs[i] = xdiv(127.0f, fmax(token_absmax(X, xdt, K, n, t0 + i, g0, g1, scr), 1e-5f));
				if (S > 1 && sg == 0 && lid == 0 && g0 / 32 >= s0)
					for (int i = 0; i < NTOK; i++)
						if (t0 + i < n)
							XS[(t0 + i) * NGA + ga] = xs[i];
			}
		}
#else
		{
			const int ga = ACT == 2 ? k0 / GA : 0;
			for (int i = 0; i < NTOK; i++)
				xs[i] = t0 + i < n ? XS[(t0 + i) * NGA + ga] : 1.0f;
		}
#endif
		for (int a = 0; a < NACC; a++)
			acc[a] = 0;
		for (int i = 0; i < NTOK; i++)
			sx[i] = 0;
		const int sa = max(j * L, s0), sb = min(min((j + 1) * L, KS), s1);
		for (int s = sa; s < sb; s++) {
			uint2 b[XE2_SGM];
			for (int mb = 0; mb < XE2_SGM; mb++) {
				const int blk = blk0 + mb;
				b[mb] = blk < NBLK ? sg_load_w2(W + ((long)blk * KS + s) * 32) : (uint2)(0u, 0u);
			}
			for (int c = 0; c < XE2_SGN; c++) {
				short a[XE2_TN];
				for (int r = 0; r < XE2_TN; r++) {
					const int i = c * XE2_TN + r, t = t0 + i;
					int q0 = 0, q1 = 0;
					if (t < n) {
#if XE2_FUSED
						const int k = s * 32 + 2 * lid;
						if (k < K)
							q0 = quant1(load_x(X, xdt, (long)t * K + k), xs[i]);
						if (k + 1 < K)
							q1 = quant1(load_x(X, xdt, (long)t * K + k + 1), xs[i]);
#else
						const short pr = ((const __global short *)(X + (long)t * KP + s * 32))[lid];
						q0 = (char)(pr & 0xff);
						q1 = (char)(pr >> 8);
#endif
					}
					sx[i] += q0 + q1;
					a[r] = (short)((q0 & 0xff) | ((q1 & 0xff) << 8));
				}
#if XE2_NATIVE && XE2_DPAS
				for (int mb = 0; mb < XE2_SGM; mb++)
					XE2_DPAS_CALL(acc + (c * XE2_SGM + mb) * XE2_TN, a, b[mb]);
#else
				short ag[XE2_TN * XE2_SG];
				sg_gather_a(a, ag, XE2_TN, scr);
				for (int mb = 0; mb < XE2_SGM; mb++)
					mad_cols(acc + (c * XE2_SGM + mb) * XE2_TN, ag, b[mb], XE2_TN, XE2_DPAS, LUT);
#endif
			}
		}
#if XE2_DPAS
		// DPAS summed two's complement fields t; the levels are CBA * t + CBB.
		if (CBA != 1 || CBB != 0) {
			for (int i = 0; i < NTOK; i++) {
				const int sxi = CBB != 0 ? sg_reduce_add_i(sx[i], scr) : 0;
				const int c = i / XE2_TN, r = i % XE2_TN;
				for (int mb = 0; mb < XE2_SGM; mb++) {
					const int ai = (c * XE2_SGM + mb) * XE2_TN + r;
					acc[ai] = CBA * acc[ai] + CBB * sxi;
				}
			}
		}
#endif
		if (S == 1) {
			for (int c = 0; c < XE2_SGN; c++)
				for (int mb = 0; mb < XE2_SGM; mb++) {
					const int m = (blk0 + mb) * XE2_SG + lid;
					const float wsv = w_scale(WS, prm, m, k0);
					for (int r = 0; r < XE2_TN; r++) {
						const int ai = (c * XE2_SGM + mb) * XE2_TN + r;
						const float p = xdiv((float)acc[ai] * wsv, xs[c * XE2_TN + r]);
						y[ai] = j == j0 ? p : y[ai] + p;
					}
				}
		} else {
			const int unit = J == 1 ? split : j;
			for (int c = 0; c < XE2_SGN; c++)
				for (int mb = 0; mb < XE2_SGM; mb++) {
					const int m = (blk0 + mb) * XE2_SG + lid;
					for (int r = 0; r < XE2_TN; r++) {
						const int t = t0 + c * XE2_TN + r;
						if (t < n && m < M)
							((__global int *)OUT)[((long)unit * n + t) * M + m] = acc[(c * XE2_SGM + mb) * XE2_TN + r];
					}
				}
		}
	}

	if (S == 1) {
		const int hasb = prm[P_HASB];
		for (int c = 0; c < XE2_SGN; c++)
			for (int mb = 0; mb < XE2_SGM; mb++) {
				const int m = (blk0 + mb) * XE2_SG + lid;
				for (int r = 0; r < XE2_TN; r++) {
					const int t = t0 + c * XE2_TN + r;
					if (t < n && m < M) {
						float v = y[(c * XE2_SGM + mb) * XE2_TN + r];
						if (hasb)
							v = v + BIAS[m];
						store_y(OUT, xdt, (long)t * M + m, v);
					}
				}
			}
	}
}

// xe2_decode: n <= XE2_TN tokens (XE2_SGN = 1), one token tile.
__kernel XE2_SG_ATTR __attribute__((reqd_work_group_size(XE2_SG * XE2_WGS, 1, 1)))
void xe2_decode(const __global uint *W, const __global float *WS, const __global float *BIAS,
		const __global uchar *X, __global float *XS, __global uchar *OUT, __constant int *prm,
		int n, int xdt, int S, int C) {
	__local int scr[XE2_SCRATCH * XE2_WGS];
	gemm_body(W, WS, BIAS, X, XS, OUT, prm, n, xdt, S, C, 0, scr + SG_IDX() * XE2_SCRATCH);
}

// xe2_prefill: any n; grid dimension 1 walks token tiles of XE2_TN * XE2_SGN tokens.
__kernel XE2_SG_ATTR __attribute__((reqd_work_group_size(XE2_SG * XE2_WGS, 1, 1)))
void xe2_prefill(const __global uint *W, const __global float *WS, const __global float *BIAS,
		const __global uchar *X, __global float *XS, __global uchar *OUT, __constant int *prm,
		int n, int xdt, int S, int C) {
	__local int scr[XE2_SCRATCH * XE2_WGS];
	gemm_body(W, WS, BIAS, X, XS, OUT, prm, n, xdt, S, C, (int)get_group_id(1) * NTOK,
		scr + SG_IDX() * XE2_SCRATCH);
}

// xe2_combine: y[t][m] from split-K partials, the epilogue in segment order.
__kernel __attribute__((reqd_work_group_size(64, 1, 1)))
void xe2_combine(const __global int *P, const __global float *WS, const __global float *BIAS,
		const __global float *XS, __global uchar *OUT, __constant int *prm, int n, int xdt, int S) {
	const int m = (int)get_global_id(0), t = (int)get_global_id(1);
	const int M = prm[P_M], J = prm[P_J], L = prm[P_L], NGA = prm[P_NGA], GA = prm[P_GA];
	const int ACT = prm[P_ACT];
	if (m >= M || t >= n)
		return;
	float y;
	if (J == 1) {
		int acc = 0;
		for (int s = 0; s < S; s++)
			acc += P[((long)s * n + t) * M + m];
		y = xdiv((float)acc * w_scale(WS, prm, m, 0), XS[t * NGA]);
	} else {
		for (int j = 0; j < J; j++) {
			const int k0 = j * L * 32;
			const float xs = XS[t * NGA + (ACT == 2 ? k0 / GA : 0)];
			const float p = xdiv((float)P[((long)j * n + t) * M + m] * w_scale(WS, prm, m, k0), xs);
			y = j == 0 ? p : y + p;
		}
	}
	if (prm[P_HASB])
		y = y + BIAS[m];
	store_y(OUT, xdt, (long)t * M + m, y);
}

#define XE2_AWG 64

inline float wg_max(float v, __local float *red) {
	const int lid = (int)get_local_id(0);
	red[lid] = v;
	barrier(CLK_LOCAL_MEM_FENCE);
	for (int h = XE2_AWG / 2; h > 0; h >>= 1) {
		if (lid < h)
			red[lid] = fmax(red[lid], red[lid + h]);
		barrier(CLK_LOCAL_MEM_FENCE);
	}
	const float m = red[0];
	barrier(CLK_LOCAL_MEM_FENCE);
	return m;
}

// xe2_act_amax: max |x| of each token (group t), for per-tensor activations.
__kernel __attribute__((reqd_work_group_size(XE2_AWG, 1, 1)))
void xe2_act_amax(const __global uchar *X, __global float *AMAX, __constant int *prm, int n, int xdt) {
	__local float red[XE2_AWG];
	const int t = (int)get_group_id(0), K = prm[P_K];
	float m = 0.0f;
	for (int k = (int)get_local_id(0); k < K; k += XE2_AWG)
		m = fmax(m, fabs(load_x(X, xdt, (long)t * K + k)));
	m = wg_max(m, red);
	if (get_local_id(0) == 0)
		AMAX[t] = m;
}

// xe2_act_quant: the separate activation pass. Group (g, t) quantizes act group g of
// token t (g = 0: the whole token) into XQ ([n][KP] int8, zero over [K, KP)) and writes
// its scale to XS[t * NGA + g].
__kernel __attribute__((reqd_work_group_size(XE2_AWG, 1, 1)))
void xe2_act_quant(const __global uchar *X, __global char *XQ, __global float *XS,
		const __global float *AMAX, __constant int *prm, int n, int xdt) {
	__local float red[XE2_AWG];
	const int g = (int)get_group_id(0), t = (int)get_group_id(1), lid = (int)get_local_id(0);
	const int K = prm[P_K], KP = prm[P_KP], ACT = prm[P_ACT], GA = prm[P_GA], NGA = prm[P_NGA];
	const int k0 = ACT == 2 ? g * GA : 0, k1 = ACT == 2 ? min(K, k0 + GA) : K;
	float m = 0.0f;
	if (ACT == 1) {
		for (int i = 0; i < n; i++)
			m = fmax(m, AMAX[i]);
	} else {
		for (int k = k0 + lid; k < k1; k += XE2_AWG)
			m = fmax(m, fabs(load_x(X, xdt, (long)t * K + k)));
		m = wg_max(m, red);
	}
	const float xs = xdiv(127.0f, fmax(m, 1e-5f));
	for (int k = k0 + lid; k < k1; k += XE2_AWG)
		XQ[(long)t * KP + k] = (char)quant1(load_x(X, xdt, (long)t * K + k), xs);
	if (k1 == K)
		for (int k = K + lid; k < KP; k += XE2_AWG)
			XQ[(long)t * KP + k] = 0;
	if (lid == 0)
		XS[t * NGA + g] = xs;
}
