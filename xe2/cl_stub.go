//go:build !linux || !cgo

package xe2

import "unsafe"

// Without cgo (CGO_ENABLED=0) or off Linux the OpenCL binding is compiled out: every entry
// point reports ErrUnavailable, so Probe answers "unavailable" with the reason and every
// CPU path of bitd works unchanged. Packing, the tune table and the reference stay.

const cgoEnabled = false

func errNoCgo() error {
	return unavailable("this bitd was built without cgo (CGO_ENABLED=0) or not for Linux: the OpenCL binding is compiled out; rebuild with CGO_ENABLED=1 on Linux")
}

func clLoad() error                                      { return errNoCgo() }
func clPlatforms() ([]handle, error)                     { return nil, errNoCgo() }
func clPlatformInfo(handle, uint32) ([]byte, error)      { return nil, errNoCgo() }
func clDevices(handle, uint64) ([]handle, error)         { return nil, errNoCgo() }
func clDeviceInfo(handle, uint32) ([]byte, error)        { return nil, errNoCgo() }
func clCreateContext(handle) (handle, error)             { return 0, errNoCgo() }
func clReleaseContext(handle)                            {}
func clCreateQueue(handle, handle, bool) (handle, error) { return 0, errNoCgo() }
func clReleaseQueue(handle)                              {}
func clBuild(handle, handle, string, []byte, string) (handle, string, error) {
	return 0, "", errNoCgo()
}
func clProgramBinary(handle) ([]byte, error)                             { return nil, errNoCgo() }
func clReleaseProgram(handle)                                            {}
func clCreateKernel(handle, string) (handle, error)                      { return 0, errNoCgo() }
func clReleaseKernel(handle)                                             {}
func clKernelWGInfo(handle, handle, uint32) ([]byte, error)              { return nil, errNoCgo() }
func clSetArgMem(handle, int, handle) error                              { return errNoCgo() }
func clSetArgInt(handle, int, int32) error                               { return errNoCgo() }
func clCreateBuffer(handle, uint64, int, unsafe.Pointer) (handle, error) { return 0, errNoCgo() }
func clReleaseMem(handle)                                                {}
func clWrite(handle, handle, int, []byte) error                          { return errNoCgo() }
func clRead(handle, handle, int, []byte) error                           { return errNoCgo() }
func clFill(handle, handle, []byte, int, int) error                      { return errNoCgo() }
func clEnqueue(handle, handle, []int, []int, bool) (handle, error)       { return 0, errNoCgo() }
func clFinish(handle) error                                              { return errNoCgo() }
func clEventTimes(handle) (uint64, uint64, error)                        { return 0, 0, errNoCgo() }
func clReleaseEvent(handle)                                              {}
