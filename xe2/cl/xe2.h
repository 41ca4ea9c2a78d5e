// xe2.h: every Intel builtin the xe2 kernels use, behind one interface, with a portable
// emulation of each so that the same kernel bodies run on any OpenCL 1.2 device (PoCL's
// CPU device in CI) and are checked bit for bit against the Go reference.
//
// Build options (set by the Go side, see xe2/program.go):
//   XE2_NATIVE=1   use Intel sub-groups: cl_intel_subgroups + cl_intel_required_subgroup_size
//                  (Khronos OpenCL-Docs extensions/cl_intel_subgroups.asciidoc rev 8:
//                  intel_sub_group_shuffle, sub_group_reduce_{add,max},
//                  intel_sub_group_block_read2 reads p[lid] then p[lid + 16]).
//   XE2_NATIVE=0   emulate a 16-lane sub-group as 16 consecutive work items of dimension 0
//                  of the work-group, exchanging data through local memory with work-group
//                  barriers. Every emulated operation is reached by all work items of the
//                  work-group (the kernels keep control flow uniform), as barriers require.
//   XE2_DPAS=1     multiply with int8 x int2 DPAS semantics (two's complement 2-bit weights,
//                  affine code book correction); native: intel_sub_group_i8_i2_matrix_mad_k32.
//   XE2_DPAS=0     the fallback: convert the 2-bit fields through the code book in registers.
//   XE2_SOFTDIV=1  correctly rounded float32 division in integer arithmetic, for devices
//                  that do not report CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT.
//
// The DPAS builtin: Intel Graphics Compiler IGC/BiFModule/Languages/OpenCL/IBiF_dpas.cl
// defines, for sub-group size 16 (PVC, Xe2), under cl_intel_subgroup_matrix_multiply_accumulate,
//   int  intel_sub_group_i8_i2_matrix_mad_k32(short  a, int2 b, int  acc)   // M = 1
//   int2 intel_sub_group_i8_i2_matrix_mad_k32(short2 a, int2 b, int2 acc)   // M = 2
//   int4 ...(short4 a, int2 b, int4 acc); int8 ...(short8 a, int2 b, int8 acc)
// (the public extension text documents the i8 x i8 form: `a` has M rows of K = 32 int8,
// each lane contributing 2 consecutive k of every row as one short, low byte first; `b` is
// one column per lane, N = 16; result lane n, row r = acc + sum_k a[r][k] * b[k][n]).
// For the 2-bit `b`, the 32 k of a lane's column fill 64 bits, 16 per 32-bit word, k at
// bits 2k..2k+1 of b.s0 for k < 16 and of b.s1 for k >= 16: the VNNI16 layout. That bit
// order is not in a public spec; the device probe runs this emulation against the builtin
// (a known-answer kernel) and uses DPAS only when they agree bit for bit.

#pragma OPENCL FP_CONTRACT OFF

#define XE2_SG 16

#if XE2_NATIVE
#define XE2_SG_ATTR __attribute__((intel_reqd_sub_group_size(16)))
#define SG_LID() ((int)get_sub_group_local_id())
#define SG_IDX() ((int)get_sub_group_id())
#else
#define XE2_SG_ATTR
#define SG_LID() ((int)(get_local_id(0) & 15))
#define SG_IDX() ((int)(get_local_id(0) >> 4))
#endif

// Scratch words of local memory one emulated sub-group needs (0 when native).
#if XE2_NATIVE
#define XE2_SCRATCH 1
#else
#define XE2_SCRATCH (8 * XE2_SG)
#endif

// sg_reduce_max_f: the maximum of v over the sub-group (exact: max has no rounding).
inline float sg_reduce_max_f(float v, __local int *scr) {
#if XE2_NATIVE
	return sub_group_reduce_max(v);
#else
	const int lid = SG_LID();
	scr[lid] = as_int(v);
	barrier(CLK_LOCAL_MEM_FENCE);
	float m = as_float(scr[0]);
	for (int i = 1; i < XE2_SG; i++)
		m = fmax(m, as_float(scr[i]));
	barrier(CLK_LOCAL_MEM_FENCE);
	return m;
#endif
}

// sg_reduce_add_i: the sum of v over the sub-group (exact in int32).
inline int sg_reduce_add_i(int v, __local int *scr) {
#if XE2_NATIVE
	return sub_group_reduce_add(v);
#else
	const int lid = SG_LID();
	scr[lid] = v;
	barrier(CLK_LOCAL_MEM_FENCE);
	int s = 0;
	for (int i = 0; i < XE2_SG; i++)
		s += scr[i];
	barrier(CLK_LOCAL_MEM_FENCE);
	return s;
#endif
}

// sg_load_w2: lane l gets (p[l], p[16 + l]), p 4-byte aligned and uniform across the
// sub-group (intel_sub_group_block_read2).
inline uint2 sg_load_w2(const __global uint *p) {
#if XE2_NATIVE
	return intel_sub_group_block_read2(p);
#else
	const int lid = SG_LID();
	return (uint2)(p[lid], p[XE2_SG + lid]);
#endif
}

// sg_gather_a: every lane receives all 16 lanes' A shorts of each of the tn rows:
// out[r * 16 + i] = a[r] of lane i. It is the cross-lane half of a DPAS.
inline void sg_gather_a(const short *a, short *out, int tn, __local int *scr) {
#if XE2_NATIVE
	for (int r = 0; r < tn; r++)
		for (int i = 0; i < XE2_SG; i++)
			out[r * XE2_SG + i] = (short)intel_sub_group_shuffle((int)a[r], (uint)i);
#else
	const int lid = SG_LID();
	for (int r = 0; r < tn; r++)
		scr[r * XE2_SG + lid] = (int)a[r];
	barrier(CLK_LOCAL_MEM_FENCE);
	for (int r = 0; r < tn; r++)
		for (int i = 0; i < XE2_SG; i++)
			out[r * XE2_SG + i] = (short)scr[r * XE2_SG + i];
	barrier(CLK_LOCAL_MEM_FENCE);
#endif
}

// The 2-bit field of k (0..31) in a lane's VNNI16 column.
inline int vnni16_field(uint2 b, int k) {
	return (int)(((k < 16 ? b.s0 : b.s1) >> (2 * (k & 15))) & 3u);
}

// mad_cols: acc[r] += sum_k A[r][k] * w(field(b, k)) for r < tn, where A comes from
// sg_gather_a and w is the two's complement value of the field (dpas != 0, exactly what
// DPAS computes) or the code book byte lut[field] (dpas == 0).
inline void mad_cols(int *acc, const short *ag, uint2 b, int tn, int dpas, uint lut) {
	char w[32];
	for (int k = 0; k < 32; k++) {
		int f = vnni16_field(b, k);
		w[k] = dpas ? (char)(f >= 2 ? f - 4 : f) : (char)(lut >> (8 * f));
	}
	for (int r = 0; r < tn; r++) {
		int s = acc[r];
		for (int i = 0; i < XE2_SG; i++) {
			short v = ag[r * XE2_SG + i];
			s += (int)(char)(v & 0xff) * (int)w[2 * i] + (int)(char)(v >> 8) * (int)w[2 * i + 1];
		}
		acc[r] = s;
	}
}

#if XE2_NATIVE && XE2_DPAS
// dpas_i8_i2: acc[0..TN) += A (TN rows) x B (this lane's column), the real instruction.
#if XE2_TN == 1
#define XE2_DPAS_CALL(acc, a, b) do { (acc)[0] = intel_sub_group_i8_i2_matrix_mad_k32((a)[0], as_int2(b), (acc)[0]); } while (0)
#elif XE2_TN == 2
#define XE2_DPAS_CALL(acc, a, b) vstore2(intel_sub_group_i8_i2_matrix_mad_k32(vload2(0, (a)), as_int2(b), vload2(0, (acc))), 0, (acc))
#elif XE2_TN == 4
#define XE2_DPAS_CALL(acc, a, b) vstore4(intel_sub_group_i8_i2_matrix_mad_k32(vload4(0, (a)), as_int2(b), vload4(0, (acc))), 0, (acc))
#else
#define XE2_DPAS_CALL(acc, a, b) vstore8(intel_sub_group_i8_i2_matrix_mad_k32(vload8(0, (a)), as_int2(b), vload8(0, (acc))), 0, (acc))
#endif
#endif

// xdiv: a / b in float32, correctly rounded (round to nearest even, denormals kept).
inline float xdiv(float a, float b) {
#if !XE2_SOFTDIV
	return a / b;
#else
	uint ua = as_uint(a), ub = as_uint(b);
	uint ea = (ua >> 23) & 0xffu, eb = (ub >> 23) & 0xffu;
	// NaN, infinities and zeros: every division of these is exact.
	if (ea == 0xffu || eb == 0xffu || (ua << 1) == 0u || (ub << 1) == 0u)
		return a / b;
	uint sign = (ua ^ ub) & 0x80000000u;
	uint ma = ua & 0x7fffffu, mb = ub & 0x7fffffu;
	int xa, xb;
	if (ea == 0u) { int sh = (int)clz(ma) - 8; ma <<= sh; xa = -126 - sh; } else { ma |= 0x800000u; xa = (int)ea - 127; }
	if (eb == 0u) { int sh = (int)clz(mb) - 8; mb <<= sh; xb = -126 - sh; } else { mb |= 0x800000u; xb = (int)eb - 127; }
	// ma, mb in [2^23, 2^24): a/b = (ma << 40) / mb * 2^(xa - xb - 40).
	ulong num = (ulong)ma << 40;
	ulong q = num / (ulong)mb;
	int sticky = (num - q * (ulong)mb) != 0;
	int e = xa - xb - 40;
	int p = 63 - (int)clz(q);     // q's top bit: 39 or 40
	int E = e + p;                 // the result's binary exponent
	if (E > 127)
		return as_float(sign | 0x7f800000u);
	int dropn = p - 23, dropd = -149 - e;
	int normal = dropn >= dropd;
	int drop = normal ? dropn : dropd;
	if (drop >= 64)
		return as_float(sign);
	ulong kept = q >> drop;
	ulong rem = q & ((1ul << drop) - 1ul);
	ulong halfway = 1ul << (drop - 1);
	if (rem > halfway || (rem == halfway && (sticky || (kept & 1ul))))
		kept++;
	uint bits = normal ? ((uint)(E + 126) << 23) + (uint)kept : (uint)kept;
	return as_float(sign | bits);
#endif
}

// bf16_rne: float32 to bfloat16 bits, round to nearest even; NaN -> quiet NaN 0x7FC0 (sign kept).
inline ushort bf16_rne(float f) {
	uint b = as_uint(f);
	if ((b & 0x7fffffffu) > 0x7f800000u)
		return (ushort)((b >> 16) | 0x7fc0u);
	b += 0x7fffu + ((b >> 16) & 1u);
	return (ushort)(b >> 16);
}

// quant1: clamp(roundHalfEven(x * xs), -128, 127); x * xs is one float32 product.
inline int quant1(float x, float xs) {
	float p = x * xs;
	return clamp(convert_int_sat_rte(p), -128, 127);
}

// load_x: activation k of token t, float32 (dt == 0) or bfloat16 widened exactly (dt == 1).
inline float load_x(const __global uchar *x, int dt, long i) {
	if (dt == 0)
		return ((const __global float *)x)[i];
	return as_float((uint)((const __global ushort *)x)[i] << 16);
}
