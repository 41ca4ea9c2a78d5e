package kernels

// int1: binary weights, bit 0 -> +1, bit 1 -> -1, VNNI4-interleaved like int2 with 1-bit planes.
//
// K is padded to Kp = roundup(K, 32). The blob is [Mp/32 row blocks][Kp/8 units][32 B]; unit u
// of row block rb is at rb*4*Kp + 32*u and holds 32 rows x inputs 8u..8u+7:
//
//	byte p = 4*r8 + k4   (r8 = 0..7, k4 = 0..3)
//	bit j   (j = 0..3): row 8j+r8 at input 8u+k4
//	bit 4+j (j = 0..3): row 8j+r8 at input 8u+4+k4
//
// With lo = v & 15 and hi = (v >> 4) & 15, the four tables "bit j of the nibble -> ±1" turn lo
// into four VNNI4 vectors for inputs 8u..8u+3 (dword i of vector j = row 8j+i) and hi into
// four for inputs 8u+4..8u+7.

func int1Encode(l Layout, w []int8, blk []byte) {
	for r8 := 0; r8 < 8; r8++ {
		for j := 0; j < 4; j++ {
			row := w[(8*j+r8)*l.Kp:][:l.Kp]
			for k, v := range row {
				// bit 1 for -1: the sign bit of the int8
				blk[32*(k/8)+4*r8+k%4] |= byte(v) >> 7 << (4*(k%8/4) + j)
			}
		}
	}
}

func int1Decode(l Layout, blk []byte, w []int8) error {
	for u := 0; u < l.Kp/8; u++ {
		unit := blk[32*u:][:32]
		for p := 0; p < 32; p++ {
			r8, k4 := p/4, p%4
			for h := 0; h < 2; h++ {
				for j := 0; j < 4; j++ {
					v := int8(1)
					if unit[p]>>(4*h+j)&1 != 0 {
						v = -1
					}
					w[(8*j+r8)*l.Kp+8*u+4*h+k4] = v
				}
			}
		}
	}
	return nil
}
