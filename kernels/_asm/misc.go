package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
)

// genMisc writes the measurement loops of package kernels: a read-bandwidth loop and an
// int8 VNNI peak loop.
func genMisc() {
	for _, z := range []bool{true, false} {
		name := "readBytesAVX2"
		if z {
			name = "readBytesAVX512"
		}
		TEXT(name, NOSPLIT, "func(p *byte, n int) uint64")
		Pragma("noescape")
		Doc(name+" reads n bytes at p (n a multiple of 256) and returns a checksum, so the loads",
			"are not optimized away; readBytesGeneric is its reference.")
		pp := Load(Param("p"), GP64())
		n := Load(Param("n"), GP64())
		p := newPool(z)
		acc := p.getn(4)
		for _, r := range acc {
			VPXOR(r.AsY(), r.AsY(), r.AsY())
		}
		SHRQ(U8(8), n)
		Label(name + "_loop")
		for i := 0; i < 4; i++ {
			if z {
				VPXORQ(at(pp, 64*i), acc[i], acc[i])
			} else {
				VPXOR(at(pp, 32*i), acc[i], acc[i])
				VPXOR(at(pp, 128+32*i), acc[i], acc[i])
			}
		}
		ADDQ(U32(256), pp)
		DECQ(n)
		JNZ(LabelRef(name + "_loop"))
		if z {
			VPXORQ(acc[1], acc[0], acc[0])
			VPXORQ(acc[3], acc[2], acc[2])
			VPXORQ(acc[2], acc[0], acc[0])
			VEXTRACTI64X4(U8(1), acc[0], acc[1].AsY())
			VPXOR(acc[1].AsY(), acc[0].AsY(), acc[0].AsY())
		} else {
			VPXOR(acc[1], acc[0], acc[0])
			VPXOR(acc[3], acc[2], acc[2])
			VPXOR(acc[2], acc[0], acc[0])
		}
		VEXTRACTI128(U8(1), acc[0].AsY(), acc[1].AsX())
		VPXOR(acc[1].AsX(), acc[0].AsX(), acc[0].AsX())
		r := GP64()
		VMOVQ(acc[0].AsX(), r)
		Store(r, ReturnIndex(0))
		VZEROUPPER()
		RET()
	}

	TEXT("vnniPeakAVX512", NOSPLIT, "func(n int) uint32")
	Doc("vnniPeakAVX512 runs n iterations of 24 independent zmm vpdpbusd (1536 int8 multiply-adds",
		"each, no memory traffic): the int8 VNNI peak of one core. vnniPeakGeneric is its reference.")
	n := Load(Param("n"), GP64())
	p := newPool(true)
	acc := p.getn(24)
	u, s := p.get(), p.get()
	bcastByte(u, 3)
	bcastByte(s, 0xff)
	for _, r := range acc {
		VPXORD(r, r, r)
	}
	Label("vnni_loop")
	for _, r := range acc {
		VPDPBUSD(s, u, r)
	}
	DECQ(n)
	JNZ(LabelRef("vnni_loop"))
	for i := 1; i < len(acc); i++ {
		VPADDD(acc[i], acc[0], acc[0])
	}
	VEXTRACTI64X4(U8(1), acc[0], acc[1].AsY())
	VPADDD(acc[1].AsY(), acc[0].AsY(), acc[0].AsY())
	VEXTRACTI128(U8(1), acc[0].AsY(), acc[1].AsX())
	VPADDD(acc[1].AsX(), acc[0].AsX(), acc[0].AsX())
	r := GP32()
	VMOVD(acc[0].AsX(), r)
	Store(r, ReturnIndex(0))
	VZEROUPPER()
	RET()
}
