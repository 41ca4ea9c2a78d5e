package kernels

import "encoding/binary"

// tabInt1Y: the tables of the AVX2 int1 panel kernels (int1PanelT1AVX2, int1PanelT2AVX2),
// for one token, int1TabYBlock = 272 bytes a block of 32 inputs, block b's at 272*b:
//
//	bytes [32q, 32q+16), q = 0..7:    A_q[c], c = 0..15 (u8, 0..31)
//	bytes [32q+16, 32q+32):           B_q[c]            (u8, 0..16)
//	bytes [256, 272):                 8 little-endian int16 words, each P = sum_q p_q - 4096
//
// where, with T_q[c] the quad's table of int1.go (|T_q[c]| <= 512) and p_q = T_q[0] & 1 (every
// entry of a quad's table has the parity of the quad's sum), V = (T_q[c] >> 1) + 256 (in
// 0..512; >> is floor), A_q[c] = V & 31 and B_q[c] = V >> 5, so that
//
//	T_q[c] = 2*A_q[c] + 64*B_q[c] + p_q - 512
//
// and a row's sum over the block is 2*sum_q A_q[c_q] + 64*sum_q B_q[c_q] + P. The kernels look
// the parts up with vpshufb (16-byte tables, the same in both lanes of a ymm) and add them as
// bytes: eight A (at most 8*31 = 248) and eight B (at most 8*16 = 128) stay within a byte.
// T_q with its 1025 values does not split into two parts whose eight-term sums both fit a
// byte (32 x 32 values would be one short); halved, its 513 values do, and the parities,
// the same for every row, go into P.
const int1TabYBlock = 272

// buildInt1TabYGeneric writes the tabInt1Y tables of x (len(x) a multiple of 32) to dst
// (int1TabYBlock bytes a block). int1BuildTabYAVX2(x, blocks, dst) is its AVX2 version:
// per call and token at one thread 1.1 us at K = 2560 and 4.3 us at K = 14336 (1-3% of a
// one-token call from DRAM), where this one takes 61 and 342 us (TestInt1YTime, kernels/int1y_time_amd64_test.go as of
// commit ad73fd7, removed with the kernels/8 kernels it timed against).
func buildInt1TabYGeneric(x []int8, dst []byte) {
	for b := range len(x) / 32 {
		blk := dst[int1TabYBlock*b:][:int1TabYBlock]
		par := 0
		for q := range 8 {
			xq := x[32*b+4*q:][:4]
			for c := range 16 {
				v := int(int1QuadSum(c, xq))>>1 + 256
				blk[32*q+c] = byte(v & 31)
				blk[32*q+16+c] = byte(v >> 5)
			}
			par += int(int1QuadSum(0, xq)) & 1
		}
		for i := range 8 {
			binary.LittleEndian.PutUint16(blk[256+2*i:], uint16(int16(par-4096)))
		}
	}
}
