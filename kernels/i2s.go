package kernels

import "fmt"

// i2s: ternary weights as 2-bit codes c = w+1 in {0,1,2} (3 is invalid), in bitnet.cpp's
// I2_S order, tiled four rows at a time so that a kernel working on 4 rows reads one
// sequential stream.
//
// K is padded to Kp = roundup(K, 128). The blob is [Mp/4 quads][Kp/128 blocks][4 rows][32 B]:
// row quad q, K block b, row r of the quad (row 4q+r) is the 32-byte piece at
// ((q*(Kp/128) + b)*4 + r)*32. Byte j of that piece holds four codes:
//
//	bit  7 6 | 5 4 | 3 2 | 1 0
//	     k+0 | k+32| k+64| k+96     with k = 128*b + j, j = 0..31
//
// so (v>>6)&3, (v>>4)&3, (v>>2)&3, v&3 over the 32 bytes give the codes of 4 runs of 32
// consecutive inputs. A row block (32 rows = 8 quads) is 8*Kp contiguous bytes.

func i2sEncode(l Layout, w []int8, blk []byte) {
	nb := l.Kp / 128
	for r := 0; r < RowBlock; r++ {
		row := w[r*l.Kp : (r+1)*l.Kp]
		for b := 0; b < nb; b++ {
			piece := blk[((r/4*nb+b)*4+r%4)*32:][:32:32]
			s0, s1 := row[128*b:][:32:32], row[128*b+32:][:32:32]
			s2, s3 := row[128*b+64:][:32:32], row[128*b+96:][:32:32]
			for j := range piece {
				piece[j] = byte(s0[j]+1)<<6 | byte(s1[j]+1)<<4 | byte(s2[j]+1)<<2 | byte(s3[j]+1)
			}
		}
	}
}

func i2sDecode(l Layout, blk []byte, w []int8) error {
	nb := l.Kp / 128
	for r := 0; r < RowBlock; r++ {
		row := w[r*l.Kp : (r+1)*l.Kp]
		for b := 0; b < nb; b++ {
			piece := blk[((r/4*nb+b)*4+r%4)*32:][:32]
			for j := 0; j < 32; j++ {
				for s := 0; s < 4; s++ {
					c := piece[j] >> (6 - 2*s) & 3
					if c == 3 {
						return fmt.Errorf("%w: i2s code 3 at row %d, input %d (codes are w+1 in {0,1,2})", ErrWeights, r, 128*b+32*s+j)
					}
					row[128*b+32*s+j] = int8(c) - 1
				}
			}
		}
	}
	return nil
}
