// probe.cl: known-answer kernels the device probe runs before trusting a device.

// xe2_kat_fp: the float32 steps of the epilogue and the quantizer on edge values
// (denormals, ties, huge and tiny scales). out[4i..4i+3] = bits of a/b, quant1(a, b),
// bf16_rne(a), float(int(b)) for pair i; compared bit for bit with Go.
__kernel void xe2_kat_fp(const __global float *A, const __global float *B, __global uint *OUT, int n) {
	const int i = (int)get_global_id(0);
	if (i >= n)
		return;
	const float a = A[i], b = B[i];
	OUT[4 * i + 0] = as_uint(xdiv(a, b));
	OUT[4 * i + 1] = (uint)quant1(a, b);
	OUT[4 * i + 2] = (uint)bf16_rne(a);
	OUT[4 * i + 3] = as_uint((float)as_int(b));
}

#if XE2_NATIVE && XE2_DPAS
// xe2_kat_dpas: one int8 x int2 DPAS with M = 8 and M = 1 on patterned operands.
// A: 8 rows x 16 lanes of shorts; B: [2][16] uint (VNNI16 words); OUT: 8 x 16 (M = 8)
// then 16 (M = 1) ints.
__kernel XE2_SG_ATTR __attribute__((reqd_work_group_size(16, 1, 1)))
void xe2_kat_dpas(const __global short *A, const __global uint *B, __global int *OUT) {
	const int lid = SG_LID();
	short8 a = (short8)(A[0 * 16 + lid], A[1 * 16 + lid], A[2 * 16 + lid], A[3 * 16 + lid],
			A[4 * 16 + lid], A[5 * 16 + lid], A[6 * 16 + lid], A[7 * 16 + lid]);
	const int2 b = as_int2((uint2)(B[lid], B[16 + lid]));
	const int8 r8 = intel_sub_group_i8_i2_matrix_mad_k32(a, b, (int8)(0));
	OUT[0 * 16 + lid] = r8.s0; OUT[1 * 16 + lid] = r8.s1; OUT[2 * 16 + lid] = r8.s2; OUT[3 * 16 + lid] = r8.s3;
	OUT[4 * 16 + lid] = r8.s4; OUT[5 * 16 + lid] = r8.s5; OUT[6 * 16 + lid] = r8.s6; OUT[7 * 16 + lid] = r8.s7;
	OUT[8 * 16 + lid] = intel_sub_group_i8_i2_matrix_mad_k32(a.s0, b, 7);
}
#endif

// xe2_read_bw: reads n uint4 (grid-stride) and writes one sum per work item, so the
// reads cannot be optimized away: the device's read bandwidth for `bitd bench`.
__kernel void xe2_read_bw(const __global uint4 *p, __global uint *out, int n) {
	const int gid = (int)get_global_id(0), gs = (int)get_global_size(0);
	uint4 s = (uint4)(0u);
	for (int i = gid; i < n; i += gs)
		s ^= p[i];
	out[gid] = s.x ^ s.y ^ s.z ^ s.w;
}
