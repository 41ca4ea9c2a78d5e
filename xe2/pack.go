package xe2

import (
	"encoding/binary"
	"fmt"

	"bitgo/quantcfg"
)

// The VNNI16 layout, the order in which int8 x int2 DPAS reads its int2 operand on a
// 16-lane sub-group: one column per lane, K = 32 per instruction, 16 two-bit fields per
// 32-bit word along K.
//
//	blob  = [ceil(M/16) row blocks][ceil(K/32) steps][2 halves][16 lanes] uint32, little-endian
//	word (blk, s, h, lane), bits 2i..2i+1 = field of row blk*16+lane, input s*32 + h*16 + i
//	field = the weight's code c as the two's complement 2-bit value c - 2 (c ^ 2):
//	        codes 0,1,2,3 -> fields 2,3,0,1 (values -2,-1,0,1)
//
// A sub-group reads one step of one row block as a single 128-byte block read
// (intel_sub_group_block_read2: lane l gets words l and 16+l), and a row block is one
// contiguous stream of 128*ceil(K/32) bytes, so consecutive steps are sequential.
// Padding (rows >= M, inputs >= K) holds field 0; the kernels give padded inputs zero
// activations and never store padded rows, so padding never reaches a result.
//
// Levels: a code c means codebook[c]. The conversion kernels decode a field f through the
// table lut[f] = codebook[f ^ 2]. DPAS multiplies the field values t = c - 2 directly,
// which is right when the code book is affine, codebook[c] = A*(c-2) + B (the default
// {-2,-1,0,1} is A=1, B=0; {-3,-1,1,3} is A=2, B=1): the kernel then computes
// A*sum(t*x) + B*sum(x) per segment, exactly, in int32.

// VNNI16Bytes is the size of an M x K int2 blob in the VNNI16 layout.
func VNNI16Bytes(m, k int) int { return ceilDiv(m, 16) * ceilDiv(k, 32) * 128 }

// PackVNNI16 writes logical int2 weights (row-major [m][k] codes 0..3, the form package
// kernels' Weights.Q uses for int2) into dst in the VNNI16 layout. dst must have exactly
// VNNI16Bytes(m, k) bytes; it is fully overwritten.
func PackVNNI16(m, k int, codes []int8, dst []byte) error {
	if m < 1 || k < 1 {
		return fmt.Errorf("%w: int2 weights %dx%d: both dimensions must be positive", ErrShape, m, k)
	}
	if len(codes) != m*k {
		return fmt.Errorf("%w: int2 weights: %d codes, want M=%d x K=%d = %d", ErrShape, len(codes), m, k, m*k)
	}
	if len(dst) != VNNI16Bytes(m, k) {
		return fmt.Errorf("%w: int2 %dx%d packs into %d bytes, destination has %d", ErrShape, m, k, VNNI16Bytes(m, k), len(dst))
	}
	for i, c := range codes {
		if c < 0 || c > 3 {
			return fmt.Errorf("%w: int2 weight at row %d, input %d is %d: int2 weights are code indices 0..3", ErrInvalid, i/k, i%k, c)
		}
	}
	ks := ceilDiv(k, 32)
	for blk := 0; blk < ceilDiv(m, 16); blk++ {
		for s := 0; s < ks; s++ {
			for h := 0; h < 2; h++ {
				for lane := 0; lane < 16; lane++ {
					row := blk*16 + lane
					var w uint32
					if row < m {
						base := row*k + s*32 + h*16
						for i := 0; i < 16 && s*32+h*16+i < k; i++ {
							w |= uint32(codes[base+i]^2) << (2 * i)
						}
					}
					off := (((blk*ks+s)*2+h)*16 + lane) * 4
					binary.LittleEndian.PutUint32(dst[off:], w)
				}
			}
		}
	}
	return nil
}

// UnpackVNNI16 is the inverse of PackVNNI16: the logical codes of an M x K blob.
func UnpackVNNI16(m, k int, blob []byte) ([]int8, error) {
	if m < 1 || k < 1 || len(blob) != VNNI16Bytes(m, k) {
		return nil, fmt.Errorf("%w: int2 %dx%d blob has %d bytes, want %d", ErrShape, m, k, len(blob), VNNI16Bytes(m, k))
	}
	ks := ceilDiv(k, 32)
	codes := make([]int8, m*k)
	for row := 0; row < m; row++ {
		blk, lane := row/16, row%16
		for kk := 0; kk < k; kk++ {
			s, h, i := kk/32, (kk/16)%2, kk%16
			w := binary.LittleEndian.Uint32(blob[(((blk*ks+s)*2+h)*16+lane)*4:])
			codes[row*k+kk] = int8((w>>(2*i))&3) ^ 2
		}
	}
	return codes, nil
}

// TernaryCodes maps ternary weights (-1, 0, 1; formats i2s, tl1, tl2) to int2 codes
// under the default code book {-2, -1, 0, 1}: code = w + 2. The results of a ternary
// layer served as int2 this way are identical, since the arithmetic is the same.
func TernaryCodes(w []int8) ([]int8, error) {
	out := make([]int8, len(w))
	for i, v := range w {
		if v < -1 || v > 1 {
			return nil, fmt.Errorf("%w: ternary weight %d is %d: ternary weights are -1, 0 or 1", ErrInvalid, i, v)
		}
		out[i] = v + 2
	}
	return out, nil
}

// codebookAffine reports whether cb[c] = a*(c-2) + b for all codes, and a, b.
func codebookAffine(cb quantcfg.Codebook) (a, b int, ok bool) {
	b = int(cb[2])
	a = int(cb[3]) - b
	for c := 0; c < 4; c++ {
		if int(cb[c]) != a*(c-2)+b {
			return 0, 0, false
		}
	}
	return a, b, true
}

// codebookLUT packs lut[f] = cb[f ^ 2] into the bytes of a uint32 (f = 0 in the low byte).
func codebookLUT(cb quantcfg.Codebook) uint32 {
	var v uint32
	for f := 0; f < 4; f++ {
		v |= uint32(uint8(cb[f^2])) << (8 * f)
	}
	return v
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
