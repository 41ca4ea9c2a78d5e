package kernels

import "encoding/binary"

// readBytesGeneric is the reference of readBytesAVX512/AVX2: the xor of the 32-bit...
// words folded as the assembly folds them (lane by lane), returned as the low 64 bits.
func readBytesGeneric(p []byte) uint64 {
	var acc [4][8]uint64 // four 512-bit accumulators (AVX2 folds the same lanes)
	for off := 0; off < len(p); off += 256 {
		for i := 0; i < 4; i++ {
			for l := 0; l < 8; l++ {
				acc[i][l] ^= binary.LittleEndian.Uint64(p[off+64*i+8*l:])
			}
		}
	}
	var x uint64
	for i := 0; i < 4; i++ {
		for l := 0; l < 8; l += 2 {
			x ^= acc[i][l]
		}
	}
	return x
}
