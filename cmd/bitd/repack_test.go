package main

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bitgo/kernels"
	"bitgo/paged"
	"bitgo/quantcfg"
)

// repackLayer is a layer and its blob in this build's layout.
type repackLayer struct {
	spec quantcfg.LayerSpec
	blob []byte
}

func newPacked(t *testing.T, r *rand.Rand, f quantcfg.Format, name string, m, k int) repackLayer {
	t.Helper()
	spec := quantcfg.LayerSpec{Name: name, Format: f, Out: m, In: k}.WithDefaults()
	l, err := kernels.NewLayout(f, m, k)
	if err != nil {
		t.Fatal(err)
	}
	blob := make([]byte, l.Bytes())
	if err := kernels.Pack(f, m, k, kernels.RandomWeights(r, f, m, k, 1), blob); err != nil {
		t.Fatal(err)
	}
	return repackLayer{spec, blob}
}

// chunkedBy12 is a tl2 blob as layouts kernels/2 and kernels/3 stored it: chunk-major with
// chunks of up to 12 blocks (tl2.go's picture with 12 for TL2Chunk).
func chunkedBy12(t *testing.T, p repackLayer) []byte {
	t.Helper()
	l, _ := kernels.NewLayout(quantcfg.TL2, p.spec.Out, p.spec.In)
	old := make([]byte, len(p.blob))
	var s []byte
	for rb := range l.RowBlocks() {
		s = l.RowBlockData(p.blob, rb, s)
		putChunked(l, old, rb, s, 12)
	}
	return old
}

// putChunked writes row block rb's stream s into the chunk-major tl2 blob old of layout l's
// shape, in chunks of up to most blocks, written out here as tl2.go pictures it.
func putChunked(l kernels.Layout, old []byte, rb int, s []byte, most int) {
	nb, mrb := l.K3/kernels.TL2Block, l.RowBlocks()
	nc := max(1, (nb+most-1)/most)
	for c := range nc {
		b0, b1 := c*nb/nc, (c+1)*nb/nc
		size := 320 * (b1 - b0)
		if c == nc-1 {
			size += 8 * l.Kp1
		}
		copy(old[mrb*320*b0+rb*size:][:size], s[320*b0:])
	}
}

// repackOpen runs bitd repack in -o out, wants its report to say say, and opens out.
func repackOpen(t *testing.T, in, out, say string) *paged.Pack {
	t.Helper()
	code, stdout, stderr := runCmd(t, "repack", in, "-o", out)
	if code != 0 || !strings.Contains(stdout, say) {
		t.Fatalf("repack: code %d\n%s%s", code, stdout, stderr)
	}
	p, err := paged.OpenPack(out, paged.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func writeTestPack(t *testing.T, path, layout string, layers []repackLayer, tensor []byte) {
	t.Helper()
	w, err := paged.CreatePack(path, paged.PackOptions{Model: "m", Layout: layout, CreatedBy: "test", NoSync: true, Metadata: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		scales := make([]float32, l.spec.NumScales())
		for i := range scales {
			scales[i] = 0.5
		}
		if err := w.AddLayer(paged.PackLayer{Spec: l.spec, Scales: scales}, l.blob); err != nil {
			t.Fatal(err)
		}
	}
	if tensor != nil {
		if err := w.AddTensor(paged.TensorInfo{Name: "norm", DType: paged.F32, Shape: []int64{int64(len(tensor) / 4)}}, tensor); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.AddExternal(paged.TensorInfo{Name: "embed", DType: paged.BF16, Shape: []int64{8, 4}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRepack: a kernels/3 pack file comes out in this build's layout, its tl2 blobs
// re-chunked into exactly what packing the weights now gives and everything else copied;
// a tl2 layer of kernels/1 is refused naming it; a current file is left alone.
func TestRepack(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	dir := t.TempDir()
	tl2 := newPacked(t, r, quantcfg.TL2, "blk.0.q", 70, 48*11+3) // one chunk in kernels/3, two now
	i2s := newPacked(t, r, quantcfg.I2S, "blk.0.o", 40, 300)
	old := tl2
	old.blob = chunkedBy12(t, tl2)
	if bytes.Equal(old.blob, tl2.blob) {
		t.Fatal("the kernels/3 blob is the kernels/4 blob: the test shows nothing")
	}
	norm := bytes.Repeat([]byte{0, 0, 0x80, 0x3f}, 16)
	in, out := filepath.Join(dir, "old.bitgo"), filepath.Join(dir, "new.bitgo")
	writeTestPack(t, in, "kernels/3", []repackLayer{old, i2s}, norm)

	p := repackOpen(t, in, out, "2 layers (1 laid out anew from kernels/3)")
	if p.Layout != kernels.LayoutRevision || p.Model != "m" || p.Metadata["k"] != "v" || p.Metadata["repacked_from_layout"] != "kernels/3" {
		t.Errorf("header: layout %q model %q metadata %v", p.Layout, p.Model, p.Metadata)
	}
	for _, want := range []repackLayer{tl2, i2s} {
		got, err := p.LayerBlob(want.spec.Name)
		if err != nil || !bytes.Equal(got, want.blob) {
			t.Errorf("layer %s: %v (blob as packed now: %v)", want.spec.Name, err, err == nil && bytes.Equal(got, want.blob))
		}
		if l, _ := p.Layer(want.spec.Name); l.Spec != want.spec || len(l.Scales) != want.spec.NumScales() || l.Scales[0] != 0.5 {
			t.Errorf("layer %s: %+v", want.spec.Name, l)
		}
	}
	if _, data, err := p.TensorData("norm"); err != nil || !bytes.Equal(data, norm) {
		t.Errorf("tensor: %v", err)
	}
	if len(p.External) != 1 || p.External[0].Name != "embed" {
		t.Errorf("external: %v", p.External)
	}

	// In place: the file is replaced by rename once the new one is complete.
	inplace := filepath.Join(dir, "inplace.bitgo")
	writeTestPack(t, inplace, "kernels/3", []repackLayer{old, i2s}, norm)
	if code, _, stderr := runCmd(t, "repack", inplace, "-o", inplace); code != 0 {
		t.Fatalf("in place: code %d: %s", code, stderr)
	}
	if q, err := paged.OpenPack(inplace, paged.OpenOptions{}); err != nil || q.Layout != kernels.LayoutRevision {
		t.Errorf("in place: %v", err)
	} else {
		if got, _ := q.LayerBlob(tl2.spec.Name); !bytes.Equal(got, tl2.blob) {
			t.Errorf("in place: the tl2 blob is not this layout's")
		}
		q.Close()
	}

	// Up to date: nothing written.
	again := filepath.Join(dir, "again.bitgo")
	if code, stdout, _ := runCmd(t, "repack", out, "-o", again); code != 0 || !strings.Contains(stdout, "nothing to do") {
		t.Errorf("current file: code %d: %s", code, stdout)
	}
	if _, err := os.Stat(again); !os.IsNotExist(err) {
		t.Errorf("current file: %s written (%v)", again, err)
	}

	// kernels/1's tl2 blocks were another encoding: refused, the layer named; no file left.
	k1 := filepath.Join(dir, "k1.bitgo")
	writeTestPack(t, k1, "kernels/1", []repackLayer{i2s, old}, nil)
	bad := filepath.Join(dir, "bad.bitgo")
	if code, _, stderr := runCmd(t, "repack", k1, "-o", bad); code != 1 || !strings.Contains(stderr, "layer blk.0.q: tl2 blobs changed layout in kernels/2") {
		t.Errorf("kernels/1 tl2: code %d: %s", code, stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*bad.bitgo*")); len(left) != 0 {
		t.Errorf("a refused repack left %v", left)
	}
	if code, _, stderr := runCmd(t, "repack", k1); code != 2 || !strings.Contains(stderr, "-o NEW.bitgo") {
		t.Errorf("no -o: code %d: %s", code, stderr)
	}
}

// asPaneled is a tl2 blob as the layout revisions kernels/5 and kernels/6 stored it,
// written out here from the row blocks' streams: panel-major in panels of panel row blocks
// (a panel's row blocks' block 0 side by side, then block 1, ..., then their tails) where it
// has at least minBlocks blocks and minRowBlocks row blocks, chunk-major in chunks of up to
// 10 blocks otherwise.
func asPaneled(t *testing.T, p repackLayer, minBlocks, minRowBlocks, panel int) []byte {
	t.Helper()
	l, _ := kernels.NewLayout(quantcfg.TL2, p.spec.Out, p.spec.In)
	nb, mrb, s := l.K3/kernels.TL2Block, l.RowBlocks(), l.RowBlockBytes
	old := make([]byte, len(p.blob))
	var st []byte
	for rb := range mrb {
		st = l.RowBlockData(p.blob, rb, st)
		if nb < minBlocks || mrb < minRowBlocks {
			putChunked(l, old, rb, st, 10)
			continue
		}
		p0 := rb / panel * panel
		g, i := min(panel, mrb-p0), rb-p0
		for b := range nb {
			copy(old[p0*s+320*(b*g+i):][:320], st[320*b:])
		}
		copy(old[p0*s+320*nb*g+8*l.Kp1*i:][:8*l.Kp1], st[320*nb:])
	}
	return old
}

// TestRepackPaneled: a pack file's tl2 blobs of kernels/5 (panels of 16 row blocks from 85
// blocks and 128 row blocks) and kernels/6 (panels of 32 from 53 and 120) come out as
// packing the weights now gives: 4100 x 4100 from panels of 16 to panels of 32 (kernels/6:
// as it was), 3880 x 2600 from chunk-major to panels of 32 (kernels/6: as it was), 2500 x
// 2600 from chunk-major to two panels of 40, 70 x 531 chunk-major in all (the blob as it
// was).
// TestRepackInt1: an int1 layer of a kernels/8 pack comes back encoded as kernels.Relayout
// encodes it (held to the old layout's picture in package kernels), not as it was; the i2s
// layer beside it as it was.
func TestRepackInt1(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	dir := t.TempDir()
	old := newPacked(t, r, quantcfg.Int1, "blk.0.q", 1100, 300) // (two panels now)
	// any bit pattern is an int1 blob, in either layout
	for i := range old.blob {
		old.blob[i] = byte(r.Uint32())
	}
	want, err := kernels.Relayout("kernels/8", quantcfg.Int1, 1100, 300, old.blob)
	if err != nil || bytes.Equal(want, old.blob) {
		t.Fatalf("relayout: %v (unchanged: %v)", err, err == nil)
	}
	i2s := newPacked(t, r, quantcfg.I2S, "blk.0.o", 40, 300)
	in, out := filepath.Join(dir, "old.bitgo"), filepath.Join(dir, "new.bitgo")
	writeTestPack(t, in, "kernels/8", []repackLayer{old, i2s}, nil)
	p := repackOpen(t, in, out, "2 layers (1 laid out anew from kernels/8)")
	for name, blob := range map[string][]byte{old.spec.Name: want, i2s.spec.Name: i2s.blob} {
		if got, err := p.LayerBlob(name); err != nil || !bytes.Equal(got, blob) {
			t.Errorf("layer %s: %v (as expected: %v)", name, err, err == nil && bytes.Equal(got, blob))
		}
	}
}

func TestRepackPaneled(t *testing.T) {
	for _, c := range []struct {
		rev                            string
		minBlocks, minRowBlocks, panel int
		moved                          []bool // by shape: whether the blob changed
		note                           string
	}{
		{"kernels/5", 85, 128, 16, []bool{true, true, true, false}, "4 layers (3 laid out anew from kernels/5)"},
		{"kernels/6", 53, 120, 32, []bool{false, false, true, false}, "4 layers (1 laid out anew from kernels/6)"},
	} {
		r := rand.New(rand.NewPCG(7, 8))
		dir := t.TempDir()
		var now, old []repackLayer
		for i, sh := range [][2]int{{4100, 4100}, {3880, 2600}, {2500, 2600}, {70, 48*11 + 3}} {
			p := newPacked(t, r, quantcfg.TL2, "blk."+string(rune('0'+i))+".q", sh[0], sh[1])
			o := p
			o.blob = asPaneled(t, p, c.minBlocks, c.minRowBlocks, c.panel)
			if moved := !bytes.Equal(o.blob, p.blob); moved != c.moved[i] {
				t.Fatalf("%dx%d: the %s blob differs from this layout's: %v", sh[0], sh[1], c.rev, moved)
			}
			now, old = append(now, p), append(old, o)
		}
		in, out := filepath.Join(dir, "old.bitgo"), filepath.Join(dir, "new.bitgo")
		writeTestPack(t, in, c.rev, old, nil)
		p := repackOpen(t, in, out, c.note)
		for _, want := range now {
			if got, err := p.LayerBlob(want.spec.Name); err != nil || !bytes.Equal(got, want.blob) {
				t.Errorf("%s: layer %s (%dx%d): %v (blob as packed now: %v)", c.rev, want.spec.Name, want.spec.Out, want.spec.In, err, err == nil && bytes.Equal(got, want.blob))
			}
		}
	}
}
