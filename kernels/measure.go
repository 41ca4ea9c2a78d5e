package kernels

import "unsafe"

// Measurement loops for `bitd bench`: the roofline every kernel is compared with.

// ReadBytes reads buf once with the widest vector loads this CPU has (buf's length must be
// a multiple of 256; a shorter tail is ignored) and returns a checksum of it. It is the
// first of ReadLoops.
func ReadBytes(buf []byte) uint64 {
	n := len(buf) &^ 255
	if n == 0 {
		return 0
	}
	return readBytes(unsafe.Pointer(&buf[0]), n, buf[:n])
}

// A ReadLoop is one way of reading memory. A roofline is the best rate of any of
// ReadLoops: which loop reads fastest differs by machine (see readStreamsAVX512), and a
// single loop can read slower than the GEMVs do.
type ReadLoop struct {
	Name    string
	streams func(p *byte, n int) uint64 // (the four-stream loop: n a multiple of 1024)
}

// Read reads buf's bytes as ReadBytes does (the same bytes, the same checksum).
func (r ReadLoop) Read(buf []byte) uint64 {
	n := len(buf) &^ 255
	if r.streams == nil || n < 1024 {
		return ReadBytes(buf)
	}
	m := n &^ 1023
	return r.streams(&buf[0], m) ^ ReadBytes(buf[m:n])
}

// ReadLoops are this CPU's read loops: "prefetch", ReadBytes's one stream with the
// GEMVs' two-level prefetch, and where there is assembly "streams", four streams (the
// buffer's quarters) and no software prefetch.
func ReadLoops() []ReadLoop {
	ls := []ReadLoop{{Name: "prefetch"}}
	if f := readStreams(); f != nil {
		ls = append(ls, ReadLoop{Name: "streams", streams: f})
	}
	return ls
}

// Int8PeakOps runs the int8 peak loop of Int8PeakPath for iters iterations and returns the
// int8 operations it performed (multiply and add counted separately; 0 where no path runs or
// iters < 1).
func Int8PeakOps(iters int) float64 {
	if iters < 1 {
		return 0
	}
	return int8Peak(iters)
}

// Int8PeakPath is the path whose int8 peak Int8PeakOps measures, the widest multiply path
// this CPU has: 24 independent zmm vpdpbusd (AVX-512 VNNI), or 8 independent ymm vpmaddubsw
// each summed by a vpaddw (AVX2; also on AVX-VNNI CPUs, where it understates the peak of the
// VEX vpdpbusd kernels); false without either.
func Int8PeakPath() (ISA, bool) { return int8PeakPath() }
