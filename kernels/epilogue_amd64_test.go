//go:build !noasm

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestEpilogueRows: the several-row-block epilogues (zmm and ymm) write what
// epilogueGeneric writes, bit for bit, for 1 to 8 tokens, 0 (one) to 7 row blocks with
// their sums, scales and outputs apart as a caller lays them, with and without a bias, the
// last row block's mask partial or whole, A 1 and -2; they write no row outside the
// blocks' and the last one's mask, nor past the outputs.
func TestEpilogueRows(t *testing.T) {
	type path struct {
		name string
		fn   func(*byte)
	}
	var paths []path
	if cpu.avx512 {
		paths = append(paths, path{"avx512", epilogueRowsAVX512})
	}
	if cpu.avx2 {
		paths = append(paths, path{"avx2", epilogueRowsAVX2})
	}
	if len(paths) == 0 {
		t.Skip("no AVX2")
	}
	rng := rand.New(rand.NewPCG(17, 17))
	for _, p := range paths {
		for _, ntok := range []int{1, 2, 3, 8} {
			for _, nrb := range []int{0, 1, 2, 7} {
				for _, bias := range []bool{false, true} {
					for _, rows := range []int{32, 1, 17} {
						what := fmt.Sprintf("%s: %d tokens, NRB %d, bias %t, last block %d rows", p.name, ntok, nrb, bias, rows)
						blocks := max(1, nrb)
						m := (blocks-1)*RowBlock + rows // the outputs' rows
						wsRB := RowBlock + 8            // (scales a little apart, as layerPrep's may be)
						sums := make([]int32, blocks*ntok*RowBlock+8)
						for i := range sums {
							sums[i] = int32(rng.Uint32()) >> rng.IntN(20)
						}
						ws := make([]float32, blocks*wsRB)
						for i := range ws {
							ws[i] = float32(rng.NormFloat64())
						}
						bs := make([]float32, blocks*RowBlock)
						for i := range bs {
							bs[i] = float32(rng.NormFloat64())
						}
						corr, xs := make([]int32, ntok), make([]float32, ntok)
						for i := range corr {
							corr[i], xs[i] = int32(rng.IntN(1<<20))-1<<19, float32(rng.Float64()*100+0.5)
						}
						a := epiArgs{Sums: unsafe.Pointer(&sums[0]), NTok: ntok, NSeg: 1, A: 1 - 3*rng.IntN(2), Corr: unsafe.Pointer(&corr[0]),
							XS: unsafe.Pointer(&xs[0]), CorrStride: 4, WS: unsafe.Pointer(&ws[0]), OutStride: 4 * m,
							Mask: 1<<rows - 1, NRB: nrb, SumsRB: 4 * ntok * RowBlock, WSRB: 4 * wsRB}
						if bias {
							a.Bias = unsafe.Pointer(&bs[0])
						}
						outs := [2][]float32{}
						for i, fn := range []func(*byte){func(b *byte) { epilogueGeneric((*epiArgs)(unsafe.Pointer(b))) }, p.fn} {
							buf := make([]float32, ntok*m+RowBlock) // room past the end: written nowhere
							for j := range buf {
								buf[j] = float32(math.NaN())
							}
							e := a
							e.Out = unsafe.Pointer(&buf[0])
							fn(argp(&e))
							outs[i] = buf
						}
						for j := range outs[0] {
							g, w := math.Float32bits(outs[1][j]), math.Float32bits(outs[0][j])
							if g != w {
								t.Fatalf("%s: output %d (token %d, row %d): %#x, want %#x", what, j, j/m, j%m, g, w)
							}
							if j >= ntok*m && !math.IsNaN(float64(outs[1][j])) {
								t.Fatalf("%s: wrote %d past the outputs", what, j-ntok*m)
							}
						}
						for j := range ntok * m {
							if math.IsNaN(float64(outs[1][j])) {
								t.Fatalf("%s: output %d (token %d, row %d) not written", what, j, j/m, j%m)
							}
						}
					}
				}
			}
		}
	}
}

// BenchmarkEpilogueRows: the epilogue of 448 row blocks (14336 rows) of one token, cache
// resident, as the lookup-table GEMVs ran it before (a call of epilogueAVX512 per row block
// from Go, its fields set per row block) and in one call (epilogueRowsAVX512).
func BenchmarkEpilogueRows(b *testing.B) {
	if !cpu.avx512 {
		b.Skip("no AVX-512")
	}
	const nrb = 448
	m := nrb * RowBlock
	sums, ws, out := make([]int32, m), make([]float32, m), make([]float32, m)
	corr, xs := []int32{7}, []float32{3}
	for i := range ws {
		sums[i], ws[i] = int32(i), 0.5
	}
	base := epiArgs{NTok: 1, NSeg: 1, A: 1, Corr: unsafe.Pointer(&corr[0]), XS: unsafe.Pointer(&xs[0]), CorrStride: 4, OutStride: 4 * m}
	var a epiArgs
	b.Run("per-row-block", func(b *testing.B) {
		for b.Loop() {
			for rb := range nrb {
				a = base
				a.Sums, a.WS, a.Out = unsafe.Pointer(&sums[rb*RowBlock]), unsafe.Pointer(&ws[rb*RowBlock]), unsafe.Pointer(&out[rb*RowBlock])
				a.Mask = 1<<min(RowBlock, m-rb*RowBlock) - 1
				epilogueAVX512(argp(&a))
			}
		}
	})
	b.Run("rows", func(b *testing.B) {
		for b.Loop() {
			a = base
			a.Sums, a.WS, a.Out = unsafe.Pointer(&sums[0]), unsafe.Pointer(&ws[0]), unsafe.Pointer(&out[0])
			a.Mask, a.NRB, a.SumsRB, a.WSRB = 1<<RowBlock-1, nrb, 4*RowBlock, 4*RowBlock
			epilogueRowsAVX512(argp(&a))
		}
	})
}
