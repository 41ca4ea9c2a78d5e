package kernels

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"bitgo/quantcfg"
)

// chunkedBefore returns blob (this build's tl2 layout) as kernels/3 stored it: chunks of up
// to 12 blocks.
func chunkedBefore(t *testing.T, l Layout, blob []byte) []byte {
	t.Helper()
	before := l
	before.tl2Chunk = tl2ChunkBefore
	old := make([]byte, len(blob))
	var s []byte
	for rb := range l.RowBlocks() {
		s = l.RowBlockData(blob, rb, s)
		before.SetRowBlockData(old, rb, s)
	}
	return old
}

// TestLayoutRevision: LayoutRevision is the newest revision of the history, and the history
// answers as its comments say.
func TestLayoutRevision(t *testing.T) {
	if last := layoutHistory[len(layoutHistory)-1].rev; LayoutRevision != last {
		t.Fatalf("LayoutRevision %s, the history's last %s", LayoutRevision, last)
	}
	for _, c := range []struct {
		rev  string
		f    quantcfg.Format
		want string // "": read as it is
	}{
		{"kernels/1", quantcfg.I2S, ""}, {"kernels/1", quantcfg.TL2, "kernels/2"}, {"kernels/1", quantcfg.TL1, "kernels/3"},
		{"kernels/2", quantcfg.TL2, "kernels/4"}, {"kernels/3", quantcfg.TL1, ""}, {"kernels/3", quantcfg.TL2, "kernels/4"},
		{LayoutRevision, quantcfg.TL2, ""},
	} {
		err := ReadsLayout(c.rev, c.f)
		if (c.want == "") != (err == nil) || c.want != "" && !strings.Contains(err.Error(), "changed layout in "+c.want) {
			t.Errorf("%s %s: %v, want a change in %q", c.rev, c.f, err, c.want)
		}
	}
	if KnownLayout("kernels/0") || !KnownLayout("kernels/1") || ReadsLayout("kernels/0", quantcfg.I2S) == nil {
		t.Error("kernels/0 is known")
	}
}

// TestRelayout: a kernels/3 (or kernels/2) tl2 blob comes back as this build packs the same
// weights; formats unchanged since a revision come back as they are; the rest is refused.
// K = 48*11 + 3 is one chunk in kernels/3 and two now, 48*298 + 32 (14336) 25 and 30,
// 48*25 three either way.
func TestRelayout(t *testing.T) {
	for _, k := range []int{48*11 + 3, 48 * 21, 48 * 25, 48*298 + 32, 20} {
		const m = 70
		_, blob, l := packRandom(t, quantcfg.TL2, m, k, 9)
		// the kernels/3 layout has chunks of up to 12 blocks, this one of up to 10
		nb := k / 48
		before := l
		before.tl2Chunk = tl2ChunkBefore
		if got, want := before.Chunks(), max(1, (nb+11)/12); got != want {
			t.Fatalf("K %d: kernels/3 layout of %d chunks, want %d", k, got, want)
		}
		if got, want := l.Chunks(), max(1, (nb+9)/10); got != want {
			t.Fatalf("K %d: %d chunks, want %d", k, got, want)
		}
		old := chunkedBefore(t, l, blob)
		if same := (nb+11)/12 == (nb+9)/10; bytes.Equal(old, blob) != same {
			t.Errorf("K %d: kernels/3 and kernels/4 blobs equal: %v, want %v", k, !same, same)
		}
		for _, rev := range []string{"kernels/3", "kernels/2"} {
			got, err := Relayout(rev, quantcfg.TL2, m, k, old)
			if err != nil || !bytes.Equal(got, blob) {
				t.Fatalf("K %d from %s: %v (equal %v)", k, rev, err, bytes.Equal(got, blob))
			}
		}
		if got, err := Relayout(LayoutRevision, quantcfg.TL2, m, k, blob); err != nil || &got[0] != &blob[0] {
			t.Errorf("K %d from %s: %v (want the blob itself)", k, LayoutRevision, err)
		}
	}
	_, i2s, _ := packRandom(t, quantcfg.I2S, 40, 300, 3)
	if got, err := Relayout("kernels/1", quantcfg.I2S, 40, 300, i2s); err != nil || !bytes.Equal(got, i2s) {
		t.Errorf("i2s from kernels/1: %v", err)
	}
	_, tl2, _ := packRandom(t, quantcfg.TL2, 40, 300, 3)
	for _, c := range []struct {
		rev  string
		f    quantcfg.Format
		blob []byte
		want string
	}{
		{"kernels/1", quantcfg.TL2, tl2, "tl2 blobs changed layout in kernels/2, after kernels/1"},
		{"kernels/2", quantcfg.TL1, tl2, "tl1 blobs changed layout in kernels/3, after kernels/2"},
		{"kernels/9", quantcfg.I2S, i2s, `"kernels/9" is not one this build knows`},
		{"kernels/3", quantcfg.TL2, tl2[1:], "blob has"},
		{"kernels/3", quantcfg.TL2, bytes.Repeat([]byte{0xff}, len(tl2)), "re-chunked"},
	} {
		_, err := Relayout(c.rev, c.f, 40, 300, c.blob)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: %v, want an error with %q", c.rev, c.f, err, c.want)
		}
	}
	if _, err := Relayout("kernels/3", quantcfg.TL2, 40, 300, tl2[1:]); !errors.Is(err, ErrShape) {
		t.Errorf("short blob: %v", err)
	}
}
