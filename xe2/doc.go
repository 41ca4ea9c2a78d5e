// Package xe2 is bitgo's Intel Xe2 GPU backend (Lunar Lake, Battlemage) through OpenCL:
// device discovery and probe, int2 weights in the VNNI16 layout, fused int2 x (f32|bf16)
// -> (f32|bf16) kernels in OpenCL C, the binary cache, and the autotuner. Its results are
// bit for bit those of package kernels' reference (kernels/doc.go): int8 activation
// quantization, exact int32 segment sums, the float32 epilogue in the defined order, bf16
// rounded to nearest even. It does not own the CPU paths or the layer registry (engine).
//
// # OpenCL without a build dependency
//
// libOpenCL.so.1 is opened with dlopen at run time through a small cgo binding (cl_cgo.go,
// linking only -ldl, with its own declarations of the few OpenCL 1.2 entry points used),
// so a bitd binary starts everywhere; Probe reports the backend unavailable with the reason
// (no library, no platform, no usable device). Building with CGO_ENABLED=0 (or off Linux)
// compiles the binding out: a stub reports "built without cgo" and everything else
// (packing, the tune table, the reference) still builds. BITD_OPENCL_LIB names another
// loader (tests use a missing one).
//
// # Devices
//
// Probe lists every OpenCL device: type, vendor, integrated or discrete
// (CL_DEVICE_HOST_UNIFIED_MEMORY), PCI bus (cl_khr_pci_bus_info), UUID (cl_khr_device_uuid),
// graphics IP version and the DPAS feature flag (cl_intel_device_attribute_query), the
// extensions the kernels use (cl_intel_subgroups, cl_intel_required_subgroup_size,
// cl_intel_subgroup_matrix_multiply_accumulate; cl_intel_subgroup_2d_block_io is reported
// but not required), the driver version (compute-runtime MinDriver or newer), and the
// float32 guarantees exactness needs (denormals; correctly rounded division, else an
// integer implementation). xe2:N numbers the usable devices. Open (and Probe with
// knownAnswer) runs known-answer kernels: the float32 steps on edge values, the DPAS lane
// mapping against its emulation (DPAS is turned off when they differ), and a small GEMM
// against the reference. By default only Intel GPUs of IP 20.x (Xe2) are used; Options
// AllowAnyDevice (BITD_XE2_ALLOW_ANY_DEVICE=1) accepts any device, which then runs the
// same kernel bodies through the portable emulation: that is how CI checks every kernel on
// PoCL's CPU device.
//
// # Kernels (cl/)
//
// cl/xe2.h puts every Intel builtin behind one interface with a portable emulation
// (sub-group reductions, shuffles and block reads through local memory; DPAS as a gather
// plus the exact lane arithmetic). cl/gemm.cl holds xe2_decode (n <= 8: one token tile,
// each 16-lane sub-group computes SGM blocks of 16 output rows for TN tokens, one DPAS per
// block and 32-input step), xe2_prefill (grid over tiles of TN*SGN tokens), xe2_combine
// (split-K: int32 partials add exactly in any order; the float epilogue then runs in
// segment order), and the separate activation pass (xe2_act_amax, xe2_act_quant). The
// activation abs-max (sub-group reduction) and int8 quantization are fused in the GEMM
// kernel or done by the separate pass (a tuning choice); dequantization, bias and bf16
// rounding happen in registers before the store. Weights are decoded by DPAS semantics
// (two's complement fields; code books of the form A*(c-2)+B are corrected exactly with
// the segment's activation sum) or, for other code books and devices without int2 DPAS,
// converted through the code book in registers. Tiles are -D options; programs are cached
// on disk keyed by device, driver, source and options.
//
// # Serving layers (the engine's API)
//
//	dev, err := xe2.Open(n, opts)                  // xe2:n; known-answer checked
//	l, err := dev.Register(spec, codes, scales, bias) // int2 codes [M][K] (kernels.Weights.Q)
//	l, err := dev.RegisterBlob(spec, blob, scales, bias) // or a kernels-layout blob (pack files)
//	err = l.Forward(dtype, x, tokens, out)          // f32 or bf16 bytes in and out
//	err = l.Free(); err = dev.Close()
//
// On an integrated GPU the packed weights stay in page-aligned host memory the GPU reads
// in place (CL_MEM_USE_HOST_PTR; Device.HostAlloc may supply arena memory); a discrete GPU
// gets one upload. Calls on one device are serialized on its in-order queue. Tile choice:
// the tune table (Options.TunePath, written by `bitd tune`) for the layer's shape bucket,
// else a heuristic.
package xe2
