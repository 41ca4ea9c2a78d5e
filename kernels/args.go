package kernels

import "unsafe"

// Argument blocks of the assembly operations. Each operation takes one pointer to its
// block (passed as *byte: the avo generator knows only builtin types); the generator in
// _asm/ reads the fields at the offsets these structs have (every field is 8 bytes, in
// order; TestArgOffsets checks). Pointers are unsafe.Pointer so the garbage collector
// sees them while the block is in use; the assembly reads them and may count integer
// fields down or up, but never stores a pointer into a block: such a store has no write
// barrier, and a pointer advanced past its object is one the collector cannot account for.
//
// The generic (pure Go) version of every operation, in *_generic.go, defines what the
// operation computes; the tests hold every assembly version to it.

// gemvArgs: integer GEMV over one row block for T tokens (T is part of the function):
// raw per-segment sums Sums[j][t][r] (int32, row order) of the format's unsigned weight
// values u(r,k) times the prepared activations, over segment j's steps. See each
// format's gemv*Generic for u, the activation layout and the step.
type gemvArgs struct {
	W         unsafe.Pointer // row block stream
	X         unsafe.Pointer // token 0's prepared activations
	XStride   int            // bytes between tokens in X
	Sums      unsafe.Pointer // int32 [NSeg][T][32]
	SegSteps  int            // steps in each segment but the last
	NSeg      int            // segments (>= 1)
	LastSteps int            // steps in the last segment
	Tab       unsafe.Pointer // int2: the decode tables (one for every token)
	Aux       int            // i2s: bytes per row quad (Kp/128*128); int2: units per int16 chunk (int16Chunk)
	// i2s kernels of fmtOps.parts only (zmm, T = 3, 4): the weight prefetch runs PF bytes
	// ahead of the stream position in row quads 0-6 and PF7 in quad 7, and Acc != 0 adds
	// into Sums instead of storing (a call over one part of K: gemvParts). A second
	// prefetch, into L2 only (prefetcht1), runs Far bytes ahead in quads 0-5 and Far6 in
	// quads 6 and 7.
	PF, PF7, Acc int
	Far, Far6    int
	// The kernels of fmtOps.fused (int2, int1 and int8, on every path), when Epi is not
	// nil, run the epilogue of the epiArgs at Epi on each segment as soon as its sums are
	// stored, and Sums holds one segment. They read its Corr, XS, CorrStride, WS, WSSeg, Bias,
	// Out, OutStride and Mask; A is the format's, the tokens and segments their own. EY is
	// [T][32] float32 (64-byte aligned) of -0 at the call, the kernel's running sums; EJ counts
	// the segments done (0 at the call).
	Epi unsafe.Pointer // *epiArgs
	EJ  int
	EY  unsafe.Pointer
	// The two-stream kernel (gemvI2STwoT1AVX2: fmtOps.l1.two1, runTwo) runs a second
	// row block at once, its stream W2Off bytes after W and its sums Sums2Off bytes after
	// Sums.
	W2Off, Sums2Off int
}

// panelArgs: the tl2 GEMV of T tokens (part of the function) over NRB row blocks of one
// panel of a panel-major blob (tl2PanelT<T>AVX512): Sums[i][t][r] += the exact sum over
// Blocks tl2 blocks of w[r][k]*x[t][k] for row block i of the call, from the tables at Tab
// (token t's at Tab + t*TabStride; block b's 16 tabTL2Z tables 1024*b further), or with
// one token on zmm (tl2PanelT1AVX512) from the activations at Tab (the first block's 48
// int8, block b's 48*b further), which it builds its tables from.
type panelArgs struct {
	W         unsafe.Pointer // the first row block's first block
	NRB       int            // row blocks (their blocks 320 bytes apart)
	BStride   int            // bytes between a row block's consecutive blocks
	Blocks    int            // tl2 blocks (0: none)
	Tab       unsafe.Pointer // token 0's tables (or activations) of the first block
	TabStride int            // bytes between tokens' tables
	Sums      unsafe.Pointer // int32 [NRB][T][32], added to
	Acc       unsafe.Pointer // int16 [NRB][T][32], scratch: the sums of up to 5 blocks
}

// int1Args: the int1 GEMV of T tokens (part of the function) over NRB row blocks of one
// panel of an int1 blob (int1.go): Sums[i][t][r] (int32 at Sums + i*SStride + 128*t + 4*r)
// += the exact sum over Blocks blocks of w[r][k]*x[t][k] (w = +-1, x int8) for row block i of
// the call. A kernel reads, by kind, the activations at X (token t's at X + t*XStride, the
// first block's 32 inputs as u8 x+128: int1Bias, block b's 32*b further) or tables at Tab
// (token t's at Tab + t*TabStride, as that kernel's builder writes them for the first block
// on). Acc is scratch for the kernel's int16 sums, [NRB][T][32].
type int1Args struct {
	W         unsafe.Pointer // the first row block's first block
	NRB       int            // row blocks (their blocks int1BlockBytes apart)
	BStride   int            // bytes between a row block's consecutive blocks
	Blocks    int            // blocks of 32 inputs (0: none)
	X         unsafe.Pointer // token 0's biased activations of the first block
	XStride   int            // bytes between tokens' activations
	Tab       unsafe.Pointer // token 0's tables of the first block
	TabStride int            // bytes between tokens' tables
	Sums      unsafe.Pointer // int32, added to
	SStride   int            // bytes between row blocks' sums (at least 128*T)
	Acc       unsafe.Pointer // int16 [NRB][T][32], scratch
}

// lutArgs: the tl1/tl2 lookup-table GEMV over one K chunk of NRB row blocks for T tokens
// (T is part of the function): Sums[rb][t][r] += the exact sum over the chunk's inputs of
// w[r][k]*x[t][k] (int32, row order), from the tables of the chunk. The driver sweeps the
// chunks of K in order over the same row blocks, so each chunk's tables stay in L1 while
// every row block uses them.
type lutArgs struct {
	W         unsafe.Pointer // the chunk in the first row block
	RBBytes   int            // bytes between row blocks
	NRB       int            // row blocks (>= 1)
	Sums      unsafe.Pointer // int32 [NRB][T][32], added to
	Tab       unsafe.Pointer // token 0's tables for the chunk
	TabStride int            // bytes between tokens' tables
	Blocks    int            // tl2 blocks in the chunk (0 for tl1)
	Units     int            // tl1 units in the chunk (tl2: its tl1 tail units, after the blocks)
	// The zmm tl2 kernel for one token also builds BN tabTL2Z triple tables from the
	// activations at BX into BTab (the next chunk's, into the other half of a double buffer),
	// BPer of them after each row block and the rest after the last, so that the build runs
	// while the chunk's weights stream in instead of pausing the stream between chunks. It
	// reads only the triples' own 3*BN bytes from BX. BN = 0: nothing to build.
	BX   unsafe.Pointer
	BTab unsafe.Pointer
	BN   int
	BPer int
	// zmm kernels: the kernel prefetches PF bytes ahead of the row block it reads (the
	// pieces are contiguous), and once fewer than Turn bytes of the range are left (Turn >=
	// PF), Turn bytes ahead as if Next continued the range: Next is where the caller's
	// stream goes on (its next chunk's first piece); nil: straight on, PF ahead. Hints
	// only. (The AVX2 kernels prefetch the next piece.)
	Next unsafe.Pointer
	PF   int
	// BDone: tables built so far (the kernel's progress, in place of advancing BX and
	// BTab; callers set 0).
	BDone int
	Turn  int // (with PF, above)
}

// unpackArgs: decode one row block into the GEMM layout B[q][r][i] = u(r, 4q+i), bytes,
// q over Kp/4 quads (VNNI order: a row's 4 consecutive inputs in one dword).
type unpackArgs struct {
	W   unsafe.Pointer // row block stream
	B   unsafe.Pointer // [Kp/4][32][4] bytes
	N   int            // units (int2, int8, tl1), blocks (i2s quads' K blocks), tl2 blocks, int1 blocks (Kp/32)
	Tab unsafe.Pointer // int2: decode table (16 bytes: code -> u)
	N2  int            // i2s: bytes per quad; tl2: tl1 tail units
	// tl2 and int1: the bytes from one block to the next (0: side by side, 320 or 128; a
	// panel-major blob's row block: Layout.BlockAt's stride, W its block 0), and tl2's tl1
	// tail (nil: right after the last block).
	Stride int
	Tail   unsafe.Pointer
}

// gemmArgs: the prefill micro-kernel, T tokens (part of the function) x 32 rows:
// Sums[j][t][r] = sum over segment j's quads q and i < 4 of B[q][r][i] * X[q][t][i],
// where X is the tile's activations transposed to [Kp/4][T] dwords (transposeTiles).
type gemmArgs struct {
	B       unsafe.Pointer // unpacked row block at quad 0
	X       unsafe.Pointer // the tile's xT at quad 0 (transposeTiles)
	XQ      int            // bytes between quads in xT (4*T: the tile's tokens, transposeTiles)
	Sums    unsafe.Pointer // int32 [NSeg][T][32]
	SegQ    int            // quads per segment but the last
	NSeg    int            // segments
	LastQ   int            // quads in the last segment
	SumsSeg int            // bytes between segments in Sums (T*128)
	ChunkQ  int            // tileT2AVX2x16: quads per int16 chunk (int16Chunk)
}

// epiArgs: the integer epilogue for NRB row blocks (0 is one) and NTok tokens: for each row
// block i, token t and row r, acc_j = A*Sums[j][t][r] + Corr[t][j] (int32, wrapping), p_j =
// (float32(acc_j)*WS[j][r]) / XS[t][j], y = p_0 + p_1 + ... left to right, y += Bias[r] when
// Bias != nil, and Out[t][r] = y, every row of all but the last row block, the rows set in
// Mask of the last; Sums, WS, Bias and Out then move on by SumsRB, WSRB, 128 and 128 bytes.
// Only epilogueRows* (one segment) and epilogueGeneric take NRB; epilogueAVX512/AVX2 and the
// fused GEMV kernels read one row block's fields, up to Mask.
type epiArgs struct {
	Sums       unsafe.Pointer // int32 [NSeg][NTok][32]
	NTok       int
	NSeg       int
	A          int            // 1 or -2
	Corr       unsafe.Pointer // int32, token t segment j at t*CorrStride + 4j
	XS         unsafe.Pointer // float32, same layout as Corr
	CorrStride int            // bytes between tokens in Corr and XS
	WS         unsafe.Pointer // float32 [NSeg][32] at WSSeg bytes apart
	WSSeg      int
	Bias       unsafe.Pointer // float32 [32] or nil
	Out        unsafe.Pointer // float32, token 0 row 0 of the block
	OutStride  int            // bytes between tokens in Out
	Mask       int            // rows of the (last) block to store (bit r = row r)
	NRB        int            // row blocks (0: one)
	SumsRB     int            // bytes between row blocks' Sums
	WSRB       int            // bytes between row blocks' WS
}

// floatArgs: bf16/f32 GEMV (and GEMM tile) over one row block for T tokens: for each token t
// and row r, acc = +0, acc = acc + float32(w[r][k]*x[t][k]) for k = 0..K-1 (no FMA),
// acc += Bias[r] when Bias != nil, Out[t][r] = acc for the rows in Mask. The activations
// are transposed: x[t][k] is the float32 at X + k*XStride + 4t.
type floatArgs struct {
	W         unsafe.Pointer // row block: [K][32] bf16 or float32
	X         unsafe.Pointer // the tile's inputs, [K][T] (transposeTiles)
	XStride   int            // bytes between inputs (4*T)
	K         int
	Bias      unsafe.Pointer // float32 [32] or nil
	Out       unsafe.Pointer
	OutStride int
	Mask      int
}

func argp[T any](a *T) *byte { return (*byte)(unsafe.Pointer(a)) }
