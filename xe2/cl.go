package xe2

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
)

// handle is an OpenCL object (platform, device, context, queue, program, kernel, buffer
// or event) as the C API returns it; 0 is none.
type handle uintptr

// libName is the OpenCL ICD loader to open: $BITD_OPENCL_LIB when set (tests use it to
// simulate a machine without OpenCL), else libOpenCL.so.1.
func libName() string {
	if s := os.Getenv("BITD_OPENCL_LIB"); s != "" {
		return s
	}
	return "libOpenCL.so.1"
}

// OpenCL error codes xe2 tests for by value.
const (
	clDeviceNotFound      = -1
	clInvalidBinary       = -42
	clPlatformNotFoundKHR = -1001
)

var clErrNames = map[int32]string{
	0: "CL_SUCCESS", -1: "CL_DEVICE_NOT_FOUND", -2: "CL_DEVICE_NOT_AVAILABLE",
	-3: "CL_COMPILER_NOT_AVAILABLE", -4: "CL_MEM_OBJECT_ALLOCATION_FAILURE",
	-5: "CL_OUT_OF_RESOURCES", -6: "CL_OUT_OF_HOST_MEMORY",
	-7: "CL_PROFILING_INFO_NOT_AVAILABLE", -8: "CL_MEM_COPY_OVERLAP",
	-11: "CL_BUILD_PROGRAM_FAILURE", -12: "CL_MAP_FAILURE",
	-13: "CL_MISALIGNED_SUB_BUFFER_OFFSET", -14: "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST",
	-30: "CL_INVALID_VALUE", -31: "CL_INVALID_DEVICE_TYPE", -32: "CL_INVALID_PLATFORM",
	-33: "CL_INVALID_DEVICE", -34: "CL_INVALID_CONTEXT", -35: "CL_INVALID_QUEUE_PROPERTIES",
	-36: "CL_INVALID_COMMAND_QUEUE", -37: "CL_INVALID_HOST_PTR", -38: "CL_INVALID_MEM_OBJECT",
	-42: "CL_INVALID_BINARY", -43: "CL_INVALID_BUILD_OPTIONS", -44: "CL_INVALID_PROGRAM",
	-45: "CL_INVALID_PROGRAM_EXECUTABLE", -46: "CL_INVALID_KERNEL_NAME",
	-47: "CL_INVALID_KERNEL_DEFINITION", -48: "CL_INVALID_KERNEL", -49: "CL_INVALID_ARG_INDEX",
	-50: "CL_INVALID_ARG_VALUE", -51: "CL_INVALID_ARG_SIZE", -52: "CL_INVALID_KERNEL_ARGS",
	-53: "CL_INVALID_WORK_DIMENSION", -54: "CL_INVALID_WORK_GROUP_SIZE",
	-55: "CL_INVALID_WORK_ITEM_SIZE", -56: "CL_INVALID_GLOBAL_OFFSET",
	-57: "CL_INVALID_EVENT_WAIT_LIST", -58: "CL_INVALID_EVENT", -59: "CL_INVALID_OPERATION",
	-61: "CL_INVALID_BUFFER_SIZE", -63: "CL_INVALID_GLOBAL_WORK_SIZE",
	-66: "CL_INVALID_COMPILER_OPTIONS", -1001: "CL_PLATFORM_NOT_FOUND_KHR",
}

// clError wraps ErrOpenCL with the failing call and the code's name.
func clError(call string, code int32) error {
	name, ok := clErrNames[code]
	if !ok {
		name = "unknown OpenCL error"
	}
	return fmt.Errorf("%w: %s: %s (%d)", ErrOpenCL, call, name, code)
}

func trimNul(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(bytes.TrimSpace(b))
}

func leUint32(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

func leUint64(b []byte) uint64 {
	switch {
	case len(b) >= 8:
		return binary.LittleEndian.Uint64(b)
	case len(b) >= 4:
		return uint64(binary.LittleEndian.Uint32(b))
	}
	return 0
}
