package kernels

// int8: int8 weights in VNNI4 blocks.
//
// K is padded to Kp = roundup(K, 32). The blob is [Mp/32 row blocks][Kp/4 units][32 rows][4 B];
// unit u of row block rb is at rb*32*Kp + 128*u:
//
//	bytes 4r .. 4r+3: row 32*rb+r, inputs 4u .. 4u+3
//
// so dword r of the unit is row r's VNNI4 group: two 64-byte loads give 32 rows' dwords.

func int8Encode(l Layout, w []int8, blk []byte) {
	for u := 0; u < l.Kp/4; u++ {
		for r := 0; r < RowBlock; r++ {
			for k4 := 0; k4 < 4; k4++ {
				blk[128*u+4*r+k4] = byte(w[r*l.Kp+4*u+k4])
			}
		}
	}
}

func int8Decode(l Layout, blk []byte, w []int8) error {
	for u := 0; u < l.Kp/4; u++ {
		for r := 0; r < RowBlock; r++ {
			for k4 := 0; k4 < 4; k4++ {
				w[r*l.Kp+4*u+k4] = int8(blk[128*u+4*r+k4])
			}
		}
	}
	return nil
}
