//go:build linux && cgo

package xe2

// The OpenCL binding: libOpenCL.so.1 is opened with dlopen at run time, so a bitd binary
// needs no OpenCL library to start; without one the backend reports itself unavailable.
// Only the entry points xe2 uses are resolved. The declarations below are written here
// (OpenCL 1.2 C API, Khronos cl.h) rather than taken from opencl-c-headers, so building
// needs nothing but libc and -ldl.

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

typedef int32_t  cl_int;
typedef uint32_t cl_uint;
typedef uint64_t cl_ulong;
typedef cl_ulong cl_bitfield;
typedef struct _cl_platform_id*   cl_platform_id;
typedef struct _cl_device_id*     cl_device_id;
typedef struct _cl_context*       cl_context;
typedef struct _cl_command_queue* cl_command_queue;
typedef struct _cl_mem*           cl_mem;
typedef struct _cl_program*       cl_program;
typedef struct _cl_kernel*        cl_kernel;
typedef struct _cl_event*         cl_event;

static struct {
	void *lib;
	cl_int (*GetPlatformIDs)(cl_uint, cl_platform_id*, cl_uint*);
	cl_int (*GetPlatformInfo)(cl_platform_id, cl_uint, size_t, void*, size_t*);
	cl_int (*GetDeviceIDs)(cl_platform_id, cl_bitfield, cl_uint, cl_device_id*, cl_uint*);
	cl_int (*GetDeviceInfo)(cl_device_id, cl_uint, size_t, void*, size_t*);
	cl_context (*CreateContext)(const intptr_t*, cl_uint, const cl_device_id*, void*, void*, cl_int*);
	cl_int (*ReleaseContext)(cl_context);
	cl_command_queue (*CreateCommandQueue)(cl_context, cl_device_id, cl_bitfield, cl_int*);
	cl_int (*ReleaseCommandQueue)(cl_command_queue);
	cl_program (*CreateProgramWithSource)(cl_context, cl_uint, const char**, const size_t*, cl_int*);
	cl_program (*CreateProgramWithBinary)(cl_context, cl_uint, const cl_device_id*, const size_t*, const unsigned char**, cl_int*, cl_int*);
	cl_int (*BuildProgram)(cl_program, cl_uint, const cl_device_id*, const char*, void*, void*);
	cl_int (*GetProgramBuildInfo)(cl_program, cl_device_id, cl_uint, size_t, void*, size_t*);
	cl_int (*GetProgramInfo)(cl_program, cl_uint, size_t, void*, size_t*);
	cl_int (*ReleaseProgram)(cl_program);
	cl_kernel (*CreateKernel)(cl_program, const char*, cl_int*);
	cl_int (*ReleaseKernel)(cl_kernel);
	cl_int (*SetKernelArg)(cl_kernel, cl_uint, size_t, const void*);
	cl_int (*GetKernelWorkGroupInfo)(cl_kernel, cl_device_id, cl_uint, size_t, void*, size_t*);
	cl_mem (*CreateBuffer)(cl_context, cl_bitfield, size_t, void*, cl_int*);
	cl_int (*ReleaseMemObject)(cl_mem);
	cl_int (*EnqueueWriteBuffer)(cl_command_queue, cl_mem, cl_uint, size_t, size_t, const void*, cl_uint, const cl_event*, cl_event*);
	cl_int (*EnqueueReadBuffer)(cl_command_queue, cl_mem, cl_uint, size_t, size_t, void*, cl_uint, const cl_event*, cl_event*);
	cl_int (*EnqueueFillBuffer)(cl_command_queue, cl_mem, const void*, size_t, size_t, size_t, cl_uint, const cl_event*, cl_event*);
	cl_int (*EnqueueNDRangeKernel)(cl_command_queue, cl_kernel, cl_uint, const size_t*, const size_t*, const size_t*, cl_uint, const cl_event*, cl_event*);
	cl_int (*Finish)(cl_command_queue);
	cl_int (*WaitForEvents)(cl_uint, const cl_event*);
	cl_int (*GetEventProfilingInfo)(cl_event, cl_uint, size_t, void*, size_t*);
	cl_int (*ReleaseEvent)(cl_event);
} bgo;

// bgo_load opens the library and resolves every entry point; on failure it writes the
// reason into err and returns -1.
static int bgo_load(const char *name, char *err, size_t errlen) {
	if (bgo.lib) return 0;
	void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return -1;
	}
#define SYM(f) do { \
		*(void**)(&bgo.f) = dlsym(lib, "cl" #f); \
		if (!bgo.f) { snprintf(err, errlen, "%s: missing symbol cl%s", name, #f); dlclose(lib); memset(&bgo, 0, sizeof bgo); return -1; } \
	} while (0)
	SYM(GetPlatformIDs); SYM(GetPlatformInfo); SYM(GetDeviceIDs); SYM(GetDeviceInfo);
	SYM(CreateContext); SYM(ReleaseContext); SYM(CreateCommandQueue); SYM(ReleaseCommandQueue);
	SYM(CreateProgramWithSource); SYM(CreateProgramWithBinary); SYM(BuildProgram);
	SYM(GetProgramBuildInfo); SYM(GetProgramInfo); SYM(ReleaseProgram);
	SYM(CreateKernel); SYM(ReleaseKernel); SYM(SetKernelArg); SYM(GetKernelWorkGroupInfo);
	SYM(CreateBuffer); SYM(ReleaseMemObject); SYM(EnqueueWriteBuffer); SYM(EnqueueReadBuffer);
	SYM(EnqueueFillBuffer); SYM(EnqueueNDRangeKernel); SYM(Finish);
	SYM(WaitForEvents); SYM(GetEventProfilingInfo); SYM(ReleaseEvent);
#undef SYM
	bgo.lib = lib;
	return 0;
}

static cl_int bgo_GetPlatformIDs(cl_uint n, uintptr_t *out, cl_uint *num) {
	return bgo.GetPlatformIDs(n, (cl_platform_id*)out, num);
}
static cl_int bgo_GetPlatformInfo(uintptr_t p, cl_uint param, size_t size, void *v, size_t *ret) {
	return bgo.GetPlatformInfo((cl_platform_id)p, param, size, v, ret);
}
static cl_int bgo_GetDeviceIDs(uintptr_t p, cl_bitfield typ, cl_uint n, uintptr_t *out, cl_uint *num) {
	return bgo.GetDeviceIDs((cl_platform_id)p, typ, n, (cl_device_id*)out, num);
}
static cl_int bgo_GetDeviceInfo(uintptr_t d, cl_uint param, size_t size, void *v, size_t *ret) {
	return bgo.GetDeviceInfo((cl_device_id)d, param, size, v, ret);
}
static uintptr_t bgo_CreateContext(uintptr_t d, cl_int *err) {
	cl_device_id dev = (cl_device_id)d;
	return (uintptr_t)bgo.CreateContext(NULL, 1, &dev, NULL, NULL, err);
}
static cl_int bgo_ReleaseContext(uintptr_t c) { return bgo.ReleaseContext((cl_context)c); }
static uintptr_t bgo_CreateCommandQueue(uintptr_t c, uintptr_t d, cl_bitfield props, cl_int *err) {
	return (uintptr_t)bgo.CreateCommandQueue((cl_context)c, (cl_device_id)d, props, err);
}
static cl_int bgo_ReleaseCommandQueue(uintptr_t q) { return bgo.ReleaseCommandQueue((cl_command_queue)q); }
static uintptr_t bgo_CreateProgramWithSource(uintptr_t c, const char *src, size_t len, cl_int *err) {
	return (uintptr_t)bgo.CreateProgramWithSource((cl_context)c, 1, &src, &len, err);
}
static uintptr_t bgo_CreateProgramWithBinary(uintptr_t c, uintptr_t d, const unsigned char *bin, size_t len, cl_int *status, cl_int *err) {
	cl_device_id dev = (cl_device_id)d;
	return (uintptr_t)bgo.CreateProgramWithBinary((cl_context)c, 1, &dev, &len, &bin, status, err);
}
static cl_int bgo_BuildProgram(uintptr_t p, uintptr_t d, const char *opts) {
	cl_device_id dev = (cl_device_id)d;
	return bgo.BuildProgram((cl_program)p, 1, &dev, opts, NULL, NULL);
}
static cl_int bgo_GetProgramBuildInfo(uintptr_t p, uintptr_t d, cl_uint param, size_t size, void *v, size_t *ret) {
	return bgo.GetProgramBuildInfo((cl_program)p, (cl_device_id)d, param, size, v, ret);
}
static cl_int bgo_GetProgramInfo(uintptr_t p, cl_uint param, size_t size, void *v, size_t *ret) {
	return bgo.GetProgramInfo((cl_program)p, param, size, v, ret);
}
// bgo_GetProgramBinary copies the (single-device) program binary into buf.
static cl_int bgo_GetProgramBinary(uintptr_t p, unsigned char *buf) {
	unsigned char *ptrs[1] = { buf };
	return bgo.GetProgramInfo((cl_program)p, 0x1166, sizeof ptrs, ptrs, NULL); // CL_PROGRAM_BINARIES
}
static cl_int bgo_ReleaseProgram(uintptr_t p) { return bgo.ReleaseProgram((cl_program)p); }
static uintptr_t bgo_CreateKernel(uintptr_t p, const char *name, cl_int *err) {
	return (uintptr_t)bgo.CreateKernel((cl_program)p, name, err);
}
static cl_int bgo_ReleaseKernel(uintptr_t k) { return bgo.ReleaseKernel((cl_kernel)k); }
static cl_int bgo_SetKernelArg(uintptr_t k, cl_uint i, size_t size, const void *v) {
	return bgo.SetKernelArg((cl_kernel)k, i, size, v);
}
static cl_int bgo_SetKernelArgMem(uintptr_t k, cl_uint i, uintptr_t m) {
	cl_mem mem = (cl_mem)m;
	return bgo.SetKernelArg((cl_kernel)k, i, sizeof mem, &mem);
}
static cl_int bgo_GetKernelWorkGroupInfo(uintptr_t k, uintptr_t d, cl_uint param, size_t size, void *v, size_t *ret) {
	return bgo.GetKernelWorkGroupInfo((cl_kernel)k, (cl_device_id)d, param, size, v, ret);
}
static uintptr_t bgo_CreateBuffer(uintptr_t c, cl_bitfield flags, size_t size, uintptr_t host, cl_int *err) {
	return (uintptr_t)bgo.CreateBuffer((cl_context)c, flags, size, (void*)host, err);
}
static cl_int bgo_ReleaseMemObject(uintptr_t m) { return bgo.ReleaseMemObject((cl_mem)m); }
static cl_int bgo_WriteBuffer(uintptr_t q, uintptr_t m, size_t off, size_t size, const void *src) {
	return bgo.EnqueueWriteBuffer((cl_command_queue)q, (cl_mem)m, 1, off, size, src, 0, NULL, NULL);
}
static cl_int bgo_ReadBuffer(uintptr_t q, uintptr_t m, size_t off, size_t size, void *dst) {
	return bgo.EnqueueReadBuffer((cl_command_queue)q, (cl_mem)m, 1, off, size, dst, 0, NULL, NULL);
}
static cl_int bgo_FillBuffer(uintptr_t q, uintptr_t m, const void *pat, size_t psize, size_t off, size_t size) {
	return bgo.EnqueueFillBuffer((cl_command_queue)q, (cl_mem)m, pat, psize, off, size, 0, NULL, NULL);
}
static cl_int bgo_NDRange(uintptr_t q, uintptr_t k, cl_uint dim, const size_t *gs, const size_t *ls, uintptr_t *ev) {
	return bgo.EnqueueNDRangeKernel((cl_command_queue)q, (cl_kernel)k, dim, NULL, gs, ls, 0, NULL, (cl_event*)ev);
}
static cl_int bgo_Finish(uintptr_t q) { return bgo.Finish((cl_command_queue)q); }
static cl_int bgo_EventTimes(uintptr_t e, cl_ulong *start, cl_ulong *end) {
	cl_event ev = (cl_event)e;
	cl_int r = bgo.WaitForEvents(1, &ev);
	if (r) return r;
	r = bgo.GetEventProfilingInfo(ev, 0x1282, sizeof *start, start, NULL); // CL_PROFILING_COMMAND_START
	if (r) return r;
	return bgo.GetEventProfilingInfo(ev, 0x1283, sizeof *end, end, NULL);  // CL_PROFILING_COMMAND_END
}
static cl_int bgo_ReleaseEvent(uintptr_t e) { return bgo.ReleaseEvent((cl_event)e); }
*/
import "C"

import (
	"sync"
	"unsafe"
)

// cgoEnabled reports that this build has the OpenCL binding.
const cgoEnabled = true

var loadOnce struct {
	sync.Once
	err error
}

// clLoad opens libOpenCL.so.1 (or $BITD_OPENCL_LIB) once.
func clLoad() error {
	loadOnce.Do(func() {
		name := libName()
		cname := C.CString(name)
		defer C.free(unsafe.Pointer(cname))
		var buf [512]C.char
		if C.bgo_load(cname, &buf[0], C.size_t(len(buf))) != 0 {
			loadOnce.err = unavailable("cannot load %s: %s", name, C.GoString(&buf[0]))
		}
	})
	return loadOnce.err
}

func clPlatforms() ([]handle, error) {
	var n C.cl_uint
	if r := C.bgo_GetPlatformIDs(0, nil, &n); r != 0 || n == 0 {
		if r == clPlatformNotFoundKHR || n == 0 {
			return nil, nil
		}
		return nil, clErr("clGetPlatformIDs", r)
	}
	ids := make([]C.uintptr_t, n)
	if r := C.bgo_GetPlatformIDs(n, &ids[0], nil); r != 0 {
		return nil, clErr("clGetPlatformIDs", r)
	}
	return toHandles(ids), nil
}

func clPlatformInfo(p handle, param uint32) ([]byte, error) {
	var size C.size_t
	if r := C.bgo_GetPlatformInfo(C.uintptr_t(p), C.cl_uint(param), 0, nil, &size); r != 0 {
		return nil, clErr("clGetPlatformInfo", r)
	}
	buf := make([]byte, int(size)+1)
	if r := C.bgo_GetPlatformInfo(C.uintptr_t(p), C.cl_uint(param), size, unsafe.Pointer(&buf[0]), nil); r != 0 {
		return nil, clErr("clGetPlatformInfo", r)
	}
	return buf[:size], nil
}

func clDevices(p handle, typ uint64) ([]handle, error) {
	var n C.cl_uint
	r := C.bgo_GetDeviceIDs(C.uintptr_t(p), C.cl_bitfield(typ), 0, nil, &n)
	if r == clDeviceNotFound || (r == 0 && n == 0) {
		return nil, nil
	}
	if r != 0 {
		return nil, clErr("clGetDeviceIDs", r)
	}
	ids := make([]C.uintptr_t, n)
	if r := C.bgo_GetDeviceIDs(C.uintptr_t(p), C.cl_bitfield(typ), n, &ids[0], nil); r != 0 {
		return nil, clErr("clGetDeviceIDs", r)
	}
	return toHandles(ids), nil
}

func clDeviceInfo(d handle, param uint32) ([]byte, error) {
	var size C.size_t
	if r := C.bgo_GetDeviceInfo(C.uintptr_t(d), C.cl_uint(param), 0, nil, &size); r != 0 {
		return nil, clErr("clGetDeviceInfo", r)
	}
	buf := make([]byte, int(size)+1)
	if r := C.bgo_GetDeviceInfo(C.uintptr_t(d), C.cl_uint(param), size, unsafe.Pointer(&buf[0]), nil); r != 0 {
		return nil, clErr("clGetDeviceInfo", r)
	}
	return buf[:size], nil
}

func clCreateContext(d handle) (handle, error) {
	var r C.cl_int
	c := C.bgo_CreateContext(C.uintptr_t(d), &r)
	if r != 0 {
		return 0, clErr("clCreateContext", r)
	}
	return handle(c), nil
}

func clReleaseContext(c handle) { C.bgo_ReleaseContext(C.uintptr_t(c)) }

func clCreateQueue(c, d handle, profiling bool) (handle, error) {
	var props C.cl_bitfield
	if profiling {
		props = 1 << 1 // CL_QUEUE_PROFILING_ENABLE
	}
	var r C.cl_int
	q := C.bgo_CreateCommandQueue(C.uintptr_t(c), C.uintptr_t(d), props, &r)
	if r != 0 {
		return 0, clErr("clCreateCommandQueue", r)
	}
	return handle(q), nil
}

func clReleaseQueue(q handle) { C.bgo_ReleaseCommandQueue(C.uintptr_t(q)) }

// clBuild creates a program from source (bin == nil) or from a device binary, and builds
// it with opts. It returns the build log whether or not the build succeeded.
func clBuild(c, d handle, src string, bin []byte, opts string) (handle, string, error) {
	var r C.cl_int
	var p C.uintptr_t
	if bin == nil {
		csrc := C.CString(src)
		defer C.free(unsafe.Pointer(csrc))
		p = C.bgo_CreateProgramWithSource(C.uintptr_t(c), csrc, C.size_t(len(src)), &r)
		if r != 0 {
			return 0, "", clErr("clCreateProgramWithSource", r)
		}
	} else {
		if len(bin) == 0 {
			return 0, "", clErr("clCreateProgramWithBinary", clInvalidBinary)
		}
		cbin := C.CBytes(bin)
		defer C.free(cbin)
		var status C.cl_int
		p = C.bgo_CreateProgramWithBinary(C.uintptr_t(c), C.uintptr_t(d), (*C.uchar)(cbin), C.size_t(len(bin)), &status, &r)
		if r == 0 && status != 0 {
			r = status
		}
		if r != 0 {
			if p != 0 {
				C.bgo_ReleaseProgram(p)
			}
			return 0, "", clErr("clCreateProgramWithBinary", r)
		}
	}
	copts := C.CString(opts)
	defer C.free(unsafe.Pointer(copts))
	br := C.bgo_BuildProgram(p, C.uintptr_t(d), copts)
	log := buildLog(handle(p), d)
	if br != 0 {
		C.bgo_ReleaseProgram(p)
		return 0, log, clErr("clBuildProgram", br)
	}
	return handle(p), log, nil
}

func buildLog(p, d handle) string {
	const clProgramBuildLog = 0x1183
	var size C.size_t
	if C.bgo_GetProgramBuildInfo(C.uintptr_t(p), C.uintptr_t(d), clProgramBuildLog, 0, nil, &size) != 0 || size == 0 {
		return ""
	}
	buf := make([]byte, int(size))
	if C.bgo_GetProgramBuildInfo(C.uintptr_t(p), C.uintptr_t(d), clProgramBuildLog, size, unsafe.Pointer(&buf[0]), nil) != 0 {
		return ""
	}
	return trimNul(buf)
}

// clProgramBinary returns the program's device binary (the program has one device).
func clProgramBinary(p handle) ([]byte, error) {
	const clProgramBinarySizes = 0x1165
	var size C.size_t
	if r := C.bgo_GetProgramInfo(C.uintptr_t(p), clProgramBinarySizes, C.size_t(unsafe.Sizeof(size)), unsafe.Pointer(&size), nil); r != 0 {
		return nil, clErr("clGetProgramInfo(CL_PROGRAM_BINARY_SIZES)", r)
	}
	if size == 0 {
		return nil, clErr("clGetProgramInfo(CL_PROGRAM_BINARY_SIZES)", clInvalidBinary)
	}
	cbuf := C.malloc(size)
	defer C.free(cbuf)
	if r := C.bgo_GetProgramBinary(C.uintptr_t(p), (*C.uchar)(cbuf)); r != 0 {
		return nil, clErr("clGetProgramInfo(CL_PROGRAM_BINARIES)", r)
	}
	return C.GoBytes(cbuf, C.int(size)), nil
}

func clReleaseProgram(p handle) { C.bgo_ReleaseProgram(C.uintptr_t(p)) }

func clCreateKernel(p handle, name string) (handle, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var r C.cl_int
	k := C.bgo_CreateKernel(C.uintptr_t(p), cname, &r)
	if r != 0 {
		return 0, clErr("clCreateKernel("+name+")", r)
	}
	return handle(k), nil
}

func clReleaseKernel(k handle) { C.bgo_ReleaseKernel(C.uintptr_t(k)) }

func clKernelWGInfo(k, d handle, param uint32) ([]byte, error) {
	var size C.size_t
	if r := C.bgo_GetKernelWorkGroupInfo(C.uintptr_t(k), C.uintptr_t(d), C.cl_uint(param), 0, nil, &size); r != 0 {
		return nil, clErr("clGetKernelWorkGroupInfo", r)
	}
	buf := make([]byte, int(size)+1)
	if r := C.bgo_GetKernelWorkGroupInfo(C.uintptr_t(k), C.uintptr_t(d), C.cl_uint(param), size, unsafe.Pointer(&buf[0]), nil); r != 0 {
		return nil, clErr("clGetKernelWorkGroupInfo", r)
	}
	return buf[:size], nil
}

func clSetArgMem(k handle, i int, m handle) error {
	if r := C.bgo_SetKernelArgMem(C.uintptr_t(k), C.cl_uint(i), C.uintptr_t(m)); r != 0 {
		return clErr("clSetKernelArg", r)
	}
	return nil
}

func clSetArgInt(k handle, i int, v int32) error {
	c := C.cl_int(v)
	if r := C.bgo_SetKernelArg(C.uintptr_t(k), C.cl_uint(i), C.size_t(unsafe.Sizeof(c)), unsafe.Pointer(&c)); r != 0 {
		return clErr("clSetKernelArg", r)
	}
	return nil
}

// clCreateBuffer creates a buffer; host, when not nil, is memory outside the Go heap
// (CL_MEM_USE_HOST_PTR keeps using it for the buffer's lifetime).
func clCreateBuffer(c handle, flags uint64, size int, host unsafe.Pointer) (handle, error) {
	var r C.cl_int
	m := C.bgo_CreateBuffer(C.uintptr_t(c), C.cl_bitfield(flags), C.size_t(size), C.uintptr_t(uintptr(host)), &r)
	if r != 0 {
		return 0, clErr("clCreateBuffer", r)
	}
	return handle(m), nil
}

func clReleaseMem(m handle) { C.bgo_ReleaseMemObject(C.uintptr_t(m)) }

// clWrite copies src into the buffer at off and waits for the copy.
func clWrite(q, m handle, off int, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if r := C.bgo_WriteBuffer(C.uintptr_t(q), C.uintptr_t(m), C.size_t(off), C.size_t(len(src)), unsafe.Pointer(&src[0])); r != 0 {
		return clErr("clEnqueueWriteBuffer", r)
	}
	return nil
}

// clRead copies the buffer at off into dst and waits for the copy.
func clRead(q, m handle, off int, dst []byte) error {
	if len(dst) == 0 {
		return nil
	}
	if r := C.bgo_ReadBuffer(C.uintptr_t(q), C.uintptr_t(m), C.size_t(off), C.size_t(len(dst)), unsafe.Pointer(&dst[0])); r != 0 {
		return clErr("clEnqueueReadBuffer", r)
	}
	return nil
}

func clFill(q, m handle, pattern []byte, off, size int) error {
	cpat := C.CBytes(pattern)
	defer C.free(cpat)
	if r := C.bgo_FillBuffer(C.uintptr_t(q), C.uintptr_t(m), cpat, C.size_t(len(pattern)), C.size_t(off), C.size_t(size)); r != 0 {
		return clErr("clEnqueueFillBuffer", r)
	}
	return nil
}

// clEnqueue launches k over global with work-group size local; with wantEvent it returns
// an event the caller must release.
func clEnqueue(q, k handle, global, local []int, wantEvent bool) (handle, error) {
	var gs, ls [3]C.size_t
	for i := range global {
		gs[i], ls[i] = C.size_t(global[i]), C.size_t(local[i])
	}
	var ev C.uintptr_t
	var evp *C.uintptr_t
	if wantEvent {
		evp = &ev
	}
	if r := C.bgo_NDRange(C.uintptr_t(q), C.uintptr_t(k), C.cl_uint(len(global)), &gs[0], &ls[0], evp); r != 0 {
		return 0, clErr("clEnqueueNDRangeKernel", r)
	}
	return handle(ev), nil
}

func clFinish(q handle) error {
	if r := C.bgo_Finish(C.uintptr_t(q)); r != 0 {
		return clErr("clFinish", r)
	}
	return nil
}

// clEventTimes waits for ev and returns its device start and end times in nanoseconds.
func clEventTimes(ev handle) (start, end uint64, err error) {
	var s, e C.cl_ulong
	if r := C.bgo_EventTimes(C.uintptr_t(ev), &s, &e); r != 0 {
		return 0, 0, clErr("clGetEventProfilingInfo", r)
	}
	return uint64(s), uint64(e), nil
}

func clReleaseEvent(ev handle) { C.bgo_ReleaseEvent(C.uintptr_t(ev)) }

func clErr(call string, r C.cl_int) error { return clError(call, int32(r)) }

func toHandles(ids []C.uintptr_t) []handle {
	out := make([]handle, len(ids))
	for i, id := range ids {
		out[i] = handle(id)
	}
	return out
}
