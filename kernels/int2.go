package kernels

// int2: 2-bit codes c in 0..3, meaning the int8 level codebook[c], VNNI4-interleaved
// [M/32][K/4][M8][k4][m4] (Georganas et al. III-B/C).
//
// K is padded to Kp = roundup(K, 32). The blob is [Mp/32 row blocks][Kp/4 units][32 B]; unit u
// of row block rb is at rb*8*Kp + 32*u and holds 32 rows x inputs 4u..4u+3:
//
//	byte p = 4*r8 + k4   (r8 = 0..7, k4 = 0..3)
//	bits 1..0: row r8      bits 3..2: row 8+r8      bits 5..4: row 16+r8      bits 7..6: row 24+r8
//	(all at input 4u+k4)
//
// Unpacking is one shift, two ands and four in-lane byte shuffles: with lo = v & 15 and
// hi = (v >> 4) & 15, table lookups of lo and hi by "low code" and "high code" tables give four
// vectors V0..V3 in which dword i of Vj holds the levels of row 8j+i at inputs 4u..4u+3: the
// VNNI4 order vpdpbusd consumes with a broadcast dword of activations.

func int2Encode(l Layout, w []int8, blk []byte) {
	for r8 := 0; r8 < 8; r8++ {
		w0, w1 := w[r8*l.Kp:][:l.Kp], w[(8+r8)*l.Kp:][:l.Kp]
		w2, w3 := w[(16+r8)*l.Kp:][:l.Kp], w[(24+r8)*l.Kp:][:l.Kp]
		for k := 0; k < l.Kp; k++ {
			blk[32*(k/4)+4*r8+k%4] = byte(w0[k]) | byte(w1[k])<<2 | byte(w2[k])<<4 | byte(w3[k])<<6
		}
	}
}

func int2Decode(l Layout, blk []byte, w []int8) error {
	for u := 0; u < l.Kp/4; u++ {
		unit := blk[32*u:][:32]
		for p := 0; p < 32; p++ {
			r8, k := p/4, 4*u+p%4
			for j := 0; j < 4; j++ {
				w[(8*j+r8)*l.Kp+k] = int8(unit[p] >> (2 * j) & 3)
			}
		}
	}
	return nil
}
