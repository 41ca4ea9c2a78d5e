package xe2

import (
	"fmt"
	"testing"
)

// intelStubs declare the Intel builtins the native path calls, with the signatures of
// IGC's IBiF_dpas.cl (sub-group size 16) and the cl_intel_subgroups specification, as
// bodies that only type-check. Prepended to the sources, they let PoCL compile the native
// code path (XE2_NATIVE=1), which otherwise only an Intel driver compiles: calls with
// wrong argument types or vector widths fail here.
const intelStubs = `
#define XE2_OVL __attribute__((overloadable))
uint XE2_OVL get_sub_group_local_id(void) { return get_local_id(0) & 15; }
uint XE2_OVL get_sub_group_id(void) { return get_local_id(0) >> 4; }
float XE2_OVL sub_group_reduce_max(float v) { return v; }
int XE2_OVL sub_group_reduce_add(int v) { return v; }
int XE2_OVL intel_sub_group_shuffle(int v, uint c) { return v + (int)c; }
uint2 XE2_OVL intel_sub_group_block_read2(const __global uint *p) { return (uint2)(p[0], p[16]); }
int XE2_OVL intel_sub_group_i8_i2_matrix_mad_k32(short a, int2 b, int acc) { return acc + a + b.x; }
int2 XE2_OVL intel_sub_group_i8_i2_matrix_mad_k32(short2 a, int2 b, int2 acc) { return acc + convert_int2(a) + b.x; }
int4 XE2_OVL intel_sub_group_i8_i2_matrix_mad_k32(short4 a, int2 b, int4 acc) { return acc + convert_int4(a) + b.x; }
int8 XE2_OVL intel_sub_group_i8_i2_matrix_mad_k32(short8 a, int2 b, int8 acc) { return acc + convert_int8(a) + b.x; }
`

// TestNativeSourceCompiles compiles the Intel-only code paths of gemm.cl and probe.cl
// against the stubs for every DPAS height, with and without DPAS (compile only: the stubs
// do not compute).
func TestNativeSourceCompiles(t *testing.T) {
	d := testDevice(t, "")
	for _, file := range []string{"gemm.cl", "probe.cl"} {
		for _, tn := range []int{1, 2, 4, 8} {
			for _, dpas := range []bool{true, false} {
				if file == "probe.cl" && (tn != 1 || !dpas) {
					continue
				}
				src, err := clSource(file)
				if err != nil {
					t.Fatal(err)
				}
				tile := Tile{TN: tn, SGN: 2, SGM: 2, WGS: 2, Split: 1, Fused: tn%2 == 0}
				opts := fmt.Sprintf("-cl-std=CL1.2 -cl-opt-disable -D XE2_NATIVE=1 -D XE2_SOFTDIV=0 %s", tile.defines(dpas))
				d.mu.Lock()
				p, err := d.buildCached(file, "native", intelStubs+src, opts)
				if err == nil {
					for _, k := range []string{"xe2_decode", "xe2_prefill", "xe2_combine", "xe2_act_quant"} {
						if file == "probe.cl" {
							k = "xe2_kat_dpas"
						}
						kh, kerr := clCreateKernel(p, k)
						if kerr != nil {
							err = kerr
							break
						}
						clReleaseKernel(kh)
					}
					clReleaseProgram(p)
				}
				d.mu.Unlock()
				if err != nil {
					t.Fatalf("%s tn=%d dpas=%v: %v", file, tn, dpas, err)
				}
			}
		}
	}
}
