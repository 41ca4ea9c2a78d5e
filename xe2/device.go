package xe2

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// OpenCL device info parameters and values used by discovery (Khronos cl.h, cl_ext.h).
const (
	clDeviceTypeParam        = 0x1000
	clDeviceVendorID         = 0x1001
	clDeviceMaxComputeUnits  = 0x1002
	clDeviceMaxWorkGroupSize = 0x1004
	clDeviceMaxClock         = 0x100C
	clDeviceMaxMemAlloc      = 0x1010
	clDeviceSingleFPConfig   = 0x101B
	clDeviceGlobalCacheSize  = 0x101E
	clDeviceGlobalMemSize    = 0x101F
	clDeviceLocalMemSize     = 0x1023
	clDeviceAvailable        = 0x1027
	clDeviceCompilerAvail    = 0x1028
	clDeviceName             = 0x102B
	clDeviceVendor           = 0x102C
	clDriverVersion          = 0x102D
	clDeviceVersion          = 0x102F
	clDeviceExtensions       = 0x1030
	clDeviceHostUnifiedMem   = 0x1035
	clDeviceOpenCLCVersion   = 0x103D
	clDeviceUUIDKHR          = 0x106A
	clDeviceSubGroupSizes    = 0x4108 // CL_DEVICE_SUB_GROUP_SIZES_INTEL
	clDevicePCIBusInfoKHR    = 0x410F
	clDeviceIPVersionIntel   = 0x4250
	clDeviceFeatureCapsIntel = 0x4256

	clPlatformName    = 0x0902
	clPlatformVersion = 0x0901

	clDeviceTypeCPU = 1 << 1
	clDeviceTypeGPU = 1 << 2
	clDeviceTypeAll = 0xFFFFFFFF

	clFPDenorm        = 1 << 0
	clFPRoundNearest  = 1 << 2
	clFPCorrectDivide = 1 << 7

	clFeatureDPASIntel = 1 << 1

	intelVendorID = 0x8086
)

// Extensions the Xe2 kernels use, as `bitd info` lists them.
var xe2Extensions = []string{
	"cl_intel_subgroups",
	"cl_intel_required_subgroup_size",
	"cl_intel_subgroup_matrix_multiply_accumulate",
	"cl_intel_subgroup_2d_block_io",
}

// MinDriver is the oldest Intel compute-runtime (CL_DRIVER_VERSION "YY.WW....") with
// Xe2 (Lunar Lake, Battlemage) support.
var MinDriver = [2]int{24, 48}

// DeviceInfo is what discovery found about one OpenCL device and whether xe2 uses it.
type DeviceInfo struct {
	// Index is the N of --device xe2:N, or -1 when the device is not used.
	Index      int    `json:"index"`
	Platform   string `json:"platform"`
	Name       string `json:"name"`
	Vendor     string `json:"vendor"`
	VendorID   uint32 `json:"vendor_id"`
	Type       string `json:"type"`
	Driver     string `json:"driver"`
	Version    string `json:"version"`
	OpenCLC    string `json:"opencl_c"`
	Integrated bool   `json:"integrated"` // CL_DEVICE_HOST_UNIFIED_MEMORY: shares host memory
	PCI        string `json:"pci,omitempty"`
	UUID       string `json:"uuid,omitempty"`
	// IPVersion is Intel's graphics IP version (major.minor.revision; 20.x is Xe2).
	IPVersion     string          `json:"ip_version,omitempty"`
	ComputeUnits  int             `json:"compute_units"`
	ClockMHz      int             `json:"clock_mhz"`
	GlobalMem     uint64          `json:"global_mem"`
	MaxAlloc      uint64          `json:"max_alloc"`
	CacheBytes    uint64          `json:"cache_bytes"`
	LocalMem      uint64          `json:"local_mem"`
	MaxWorkGroup  int             `json:"max_work_group"`
	SubGroupSizes []int           `json:"sub_group_sizes,omitempty"`
	Extensions    map[string]bool `json:"extensions"`
	DPASFlag      bool            `json:"dpas_flag"`   // CL_DEVICE_FEATURE_FLAG_DPAS_INTEL
	CorrectDiv    bool            `json:"correct_div"` // CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT
	Denormals     bool            `json:"denormals"`   // CL_FP_DENORM
	// Usable says whether xe2 serves layers on this device; Reasons says why not, or
	// what it falls back from (for example DPAS refused).
	Usable  bool     `json:"usable"`
	Reasons []string `json:"reasons,omitempty"`
	// Path is how the kernels run: "native+dpas", "native+convert" (Intel sub-groups
	// with in-register conversion) or "emulated" (portable emulation of the builtins).
	Path string `json:"path,omitempty"`
	// KnownAnswer is the probe's known-answer result ("" when not run).
	KnownAnswer string `json:"known_answer,omitempty"`

	native, dpas, softDiv bool
	ipMajor               int
	platform, device      handle
}

// Report is the result of discovery.
type Report struct {
	// Available is false when no OpenCL runtime could be loaded or asked; Reason says why.
	Available bool         `json:"available"`
	Reason    string       `json:"reason,omitempty"`
	Devices   []DeviceInfo `json:"devices"`
}

// Usable returns the devices xe2 uses, in --device xe2:N order.
func (r Report) Usable() []DeviceInfo {
	var out []DeviceInfo
	for _, d := range r.Devices {
		if d.Usable {
			out = append(out, d)
		}
	}
	return out
}

// Probe lists every OpenCL device with what xe2 needs from it, decides which devices it
// uses and why not the others. With knownAnswer it also compiles and runs the
// known-answer kernels on each candidate (a few seconds on first use; binaries are
// cached), exactly as Open does.
func Probe(opts Options, knownAnswer bool) Report {
	if err := clLoad(); err != nil {
		return Report{Reason: strings.TrimPrefix(err.Error(), ErrUnavailable.Error()+": ")}
	}
	plats, err := clPlatforms()
	if err != nil {
		return Report{Reason: err.Error()}
	}
	if len(plats) == 0 {
		return Report{Reason: fmt.Sprintf("%s: no OpenCL platform installed (no ICD in /etc/OpenCL/vendors)", libName())}
	}
	rep := Report{Available: true}
	next := 0
	for _, p := range plats {
		pname := platformString(p, clPlatformName)
		devs, err := clDevices(p, clDeviceTypeAll)
		if err != nil {
			rep.Devices = append(rep.Devices, DeviceInfo{Index: -1, Platform: pname, Reasons: []string{err.Error()}})
			continue
		}
		for _, d := range devs {
			info := describe(p, d, pname)
			judge(&info, opts)
			if info.Usable && knownAnswer {
				knownAnswerCheck(&info, opts)
			}
			if info.Usable {
				info.Index = next
				next++
			}
			rep.Devices = append(rep.Devices, info)
		}
	}
	if len(rep.Devices) == 0 {
		rep.Reason = "no OpenCL device found"
	} else if next == 0 {
		rep.Reason = "no usable device (see each device's reasons)"
	}
	return rep
}

func platformString(p handle, param uint32) string {
	b, err := clPlatformInfo(p, param)
	if err != nil {
		return ""
	}
	return trimNul(b)
}

func devString(d handle, param uint32) string {
	b, err := clDeviceInfo(d, param)
	if err != nil {
		return ""
	}
	return trimNul(b)
}

func devUint(d handle, param uint32) uint64 {
	b, err := clDeviceInfo(d, param)
	if err != nil {
		return 0
	}
	return leUint64(b)
}

// describe reads everything discovery needs; optional queries that the device refuses
// (vendor extensions) read as absent.
func describe(p, d handle, pname string) DeviceInfo {
	info := DeviceInfo{Index: -1, Platform: pname, platform: p, device: d}
	info.Name = devString(d, clDeviceName)
	info.Vendor = devString(d, clDeviceVendor)
	info.VendorID = uint32(devUint(d, clDeviceVendorID))
	switch t := devUint(d, clDeviceTypeParam); {
	case t&clDeviceTypeGPU != 0:
		info.Type = "gpu"
	case t&clDeviceTypeCPU != 0:
		info.Type = "cpu"
	default:
		info.Type = fmt.Sprintf("other(%#x)", t)
	}
	info.Driver = devString(d, clDriverVersion)
	info.Version = devString(d, clDeviceVersion)
	info.OpenCLC = devString(d, clDeviceOpenCLCVersion)
	info.Integrated = devUint(d, clDeviceHostUnifiedMem) != 0
	info.ComputeUnits = int(devUint(d, clDeviceMaxComputeUnits))
	info.ClockMHz = int(devUint(d, clDeviceMaxClock))
	info.GlobalMem = devUint(d, clDeviceGlobalMemSize)
	info.MaxAlloc = devUint(d, clDeviceMaxMemAlloc)
	info.CacheBytes = devUint(d, clDeviceGlobalCacheSize)
	info.LocalMem = devUint(d, clDeviceLocalMemSize)
	info.MaxWorkGroup = int(devUint(d, clDeviceMaxWorkGroupSize))
	fp := devUint(d, clDeviceSingleFPConfig)
	info.CorrectDiv = fp&clFPCorrectDivide != 0
	info.Denormals = fp&clFPDenorm != 0
	exts := " " + devString(d, clDeviceExtensions) + " "
	info.Extensions = map[string]bool{}
	for _, e := range xe2Extensions {
		info.Extensions[e] = strings.Contains(exts, " "+e+" ")
	}
	if strings.Contains(exts, " cl_khr_pci_bus_info ") {
		if b, err := clDeviceInfo(d, clDevicePCIBusInfoKHR); err == nil && len(b) >= 16 {
			info.PCI = fmt.Sprintf("%04x:%02x:%02x.%x", leUint32(b[0:]), leUint32(b[4:]), leUint32(b[8:]), leUint32(b[12:]))
		}
	}
	if strings.Contains(exts, " cl_khr_device_uuid ") {
		if b, err := clDeviceInfo(d, clDeviceUUIDKHR); err == nil && len(b) >= 16 {
			info.UUID = hex.EncodeToString(b[:16])
		}
	}
	if strings.Contains(exts, " cl_intel_required_subgroup_size ") {
		if b, err := clDeviceInfo(d, clDeviceSubGroupSizes); err == nil {
			for i := 0; i+8 <= len(b); i += 8 {
				info.SubGroupSizes = append(info.SubGroupSizes, int(leUint64(b[i:])))
			}
		}
	}
	if strings.Contains(exts, " cl_intel_device_attribute_query ") {
		// CL_DEVICE_IP_VERSION_INTEL packs major << 22 | minor << 14 | revision; Xe2 is
		// 20.x (Battlemage G21 is 20.1: SYCL's device_architecture.def 0x05004000).
		if v := devUint(d, clDeviceIPVersionIntel); v != 0 {
			info.ipMajor = int(v >> 22)
			info.IPVersion = fmt.Sprintf("%d.%d.%d", v>>22, (v>>14)&0xff, v&0x3fff)
		}
		info.DPASFlag = devUint(d, clDeviceFeatureCapsIntel)&clFeatureDPASIntel != 0
	}
	_ = devUint(d, clDeviceAvailable)
	return info
}

// judge decides whether xe2 uses the device, and how.
func judge(info *DeviceInfo, opts Options) {
	var refuse []string
	d := info.device
	if devUint(d, clDeviceAvailable) == 0 {
		refuse = append(refuse, "device reports CL_DEVICE_AVAILABLE = false")
	}
	if devUint(d, clDeviceCompilerAvail) == 0 {
		refuse = append(refuse, "device has no OpenCL C compiler (CL_DEVICE_COMPILER_AVAILABLE = false)")
	}
	intelGPU := info.Type == "gpu" && info.VendorID == intelVendorID
	if !intelGPU && !opts.AllowAnyDevice {
		refuse = append(refuse, fmt.Sprintf("not an Intel GPU (type %s, vendor id %#x); set BITD_XE2_ALLOW_ANY_DEVICE=1 to run the portable kernels on it", info.Type, info.VendorID))
	}
	if intelGPU {
		if info.ipMajor != 0 && info.ipMajor < 20 && !opts.AllowAnyDevice {
			refuse = append(refuse, fmt.Sprintf("not an Xe2 GPU (graphics IP %s; Xe2 is 20.x); set BITD_XE2_ALLOW_ANY_DEVICE=1 to try anyway", info.IPVersion))
		}
		if v, ok := parseDriver(info.Driver); !ok {
			info.Reasons = append(info.Reasons, fmt.Sprintf("driver version %q not understood; Xe2 needs compute-runtime %d.%d or newer", info.Driver, MinDriver[0], MinDriver[1]))
		} else if v[0] < MinDriver[0] || (v[0] == MinDriver[0] && v[1] < MinDriver[1]) {
			refuse = append(refuse, fmt.Sprintf("driver (compute-runtime) %s is older than %d.%d, the first with Xe2 support; update intel-opencl-icd", info.Driver, MinDriver[0], MinDriver[1]))
		}
	}
	if !info.Denormals {
		refuse = append(refuse, "float32 denormals are not supported (no CL_FP_DENORM): results could differ from the reference")
	}
	// Intel's compute-runtime reports CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT only on devices
	// with 64-bit math (opencl/source/cl_device/cl_device_caps.cpp, setupFp64Flags), and
	// CL_FP_DENORM always: without the flag, the kernels divide in integer arithmetic.
	if !info.CorrectDiv || opts.SoftDiv {
		info.softDiv = true
		if !info.CorrectDiv {
			info.Reasons = append(info.Reasons, "no CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT: dividing with the exact integer implementation")
		}
	}
	sg16 := false
	for _, s := range info.SubGroupSizes {
		sg16 = sg16 || s == 16
	}
	info.native = info.Extensions["cl_intel_subgroups"] && info.Extensions["cl_intel_required_subgroup_size"] && sg16
	if intelGPU && !info.native {
		why := "needs cl_intel_subgroups, cl_intel_required_subgroup_size and sub-group size 16"
		if !opts.AllowAnyDevice {
			refuse = append(refuse, why)
		} else {
			info.Reasons = append(info.Reasons, why+": running the portable emulation")
		}
	}
	if info.native {
		switch {
		case opts.NoDPAS:
			info.Reasons = append(info.Reasons, "DPAS disabled by option (BITD_XE2_NO_DPAS)")
		case !info.Extensions["cl_intel_subgroup_matrix_multiply_accumulate"]:
			info.Reasons = append(info.Reasons, "no cl_intel_subgroup_matrix_multiply_accumulate: converting int2 weights in registers")
		case !info.DPASFlag:
			info.Reasons = append(info.Reasons, "CL_DEVICE_FEATURE_FLAG_DPAS_INTEL not set: converting int2 weights in registers")
		default:
			info.dpas = true
		}
		if !info.Extensions["cl_intel_subgroup_2d_block_io"] {
			info.Reasons = append(info.Reasons, "no cl_intel_subgroup_2d_block_io (not required: the kernels use 1-D sub-group block reads)")
		}
	} else {
		// The emulation runs the DPAS data flow (two's complement fields, affine code book)
		// unless told not to, so CI checks that path.
		info.dpas = !opts.NoDPAS
	}
	info.Path = pathName(info.native, info.dpas)
	if len(refuse) > 0 {
		info.Usable = false
		info.Reasons = append(refuse, info.Reasons...)
		info.Path = ""
		return
	}
	info.Usable = true
}

func pathName(native, dpas bool) string {
	switch {
	case native && dpas:
		return "native+dpas"
	case native:
		return "native+convert"
	case dpas:
		return "emulated+dpas"
	}
	return "emulated+convert"
}

// parseDriver reads Intel compute-runtime versions such as "24.52.32224.5".
func parseDriver(s string) ([2]int, bool) {
	f := strings.FieldsFunc(s, func(r rune) bool { return r == '.' || r == ' ' })
	if len(f) < 2 {
		return [2]int{}, false
	}
	a, err1 := strconv.Atoi(f[0])
	b, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return [2]int{}, false
	}
	return [2]int{a, b}, true
}

// PeakInt8TOPS estimates the device's int8 DPAS peak in tera-operations per second for
// Xe2 (512 int8 operations per clock per vector engine; CL_DEVICE_MAX_COMPUTE_UNITS
// counts vector engines on Intel GPUs), or 0 when unknown.
func (d DeviceInfo) PeakInt8TOPS() float64 {
	if d.ipMajor < 20 || d.ComputeUnits == 0 || d.ClockMHz == 0 {
		return 0
	}
	return float64(d.ComputeUnits) * 512 * float64(d.ClockMHz) * 1e6 / 1e12
}
