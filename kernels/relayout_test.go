package kernels

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"bitgo/quantcfg"
)

// blobBefore returns blob (this build's tl2 layout) as revision rev stored it
// (tl2Before).
func blobBefore(t *testing.T, rev string, l Layout, blob []byte) (Layout, []byte) {
	t.Helper()
	before, ok := tl2Before(rev, l)
	if !ok {
		t.Fatalf("%s: no tl2 layout", rev)
	}
	old := make([]byte, len(blob))
	var s []byte
	for rb := range l.RowBlocks() {
		s = l.RowBlockData(blob, rb, s)
		before.SetRowBlockData(old, rb, s)
	}
	return before, old
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
		{"kernels/2", quantcfg.TL2, "kernels/4"}, {"kernels/3", quantcfg.TL1, ""}, {"kernels/3", quantcfg.TL2, "kernels/4"}, {"kernels/4", quantcfg.TL2, "kernels/5"},
		{"kernels/5", quantcfg.TL2, "kernels/6"}, {"kernels/5", quantcfg.Int1, "kernels/9"}, {"kernels/6", quantcfg.TL2, "kernels/7"}, {"kernels/6", quantcfg.BF16, ""}, {"kernels/7", quantcfg.TL2, "kernels/8"}, {"kernels/7", quantcfg.I2S, ""},
		{"kernels/8", quantcfg.Int1, "kernels/9"}, {"kernels/8", quantcfg.TL2, ""}, {LayoutRevision, quantcfg.TL2, ""}, {LayoutRevision, quantcfg.Int1, ""},
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

// TestRelayout: a tl2 blob of kernels/2 to kernels/7 comes back as this build packs the
// same weights (chunk-major in chunks of up to 10 blocks, or panel-major in panels of 32
// row blocks or in two), itself where it was laid out so already; formats unchanged since a
// revision come back as they are; the rest is refused. M = 70 with K = 48*11 + 3 (one chunk
// in kernels/3, two in kernels/4), 48*21, 48*25, 48*298 + 32 (14336: 25 and 30 chunks) and
// 20 (the tail alone), chunk-major in every revision; 4000 x 2600, chunk-major up to
// kernels/5, and 4100 x 4100, panel-major in panels of 16 in kernels/5, are in panels of 32
// from kernels/6 on; 2500 x 2600, chunk-major up to kernels/6, is two panels from kernels/7
// on, and 2500 x 1200 (25 blocks), chunk-major up to kernels/7, is two panels now.
func TestRelayout(t *testing.T) {
	for _, c := range [][2]int{{70, 48*11 + 3}, {70, 48 * 21}, {70, 48 * 25}, {70, 48*298 + 32}, {70, 20}, {4000, 2600}, {4100, 4100}, {2500, 2600}, {2500, 1200}} {
		m, k := c[0], c[1]
		_, blob, l := packRandom(t, quantcfg.TL2, m, k, 9)
		nb := k / 48
		if l.Paneled() != (m > 70) || l.Paneled() && l.PanelRows() != map[bool]int{true: 32, false: 40}[m > 3808] {
			t.Fatalf("%dx%d: panel-major %v, panels of %d", m, k, l.Paneled(), l.PanelRows())
		}
		for _, c := range []struct {
			rev   string
			chunk int // 0: panel-major
			panel int // panel-major: its panels' row blocks
		}{{"kernels/2", 12, 0}, {"kernels/3", 12, 0}, {"kernels/4", 10, 0}, {"kernels/5", 10, 0}, {"kernels/6", 10, 0}, {"kernels/7", 10, 0}} {
			if c.rev == "kernels/5" && m == 4100 {
				c.chunk, c.panel = 0, 16
			}
			if c.rev == "kernels/6" && m > 3808 {
				c.chunk, c.panel = 0, 32
			}
			if c.rev == "kernels/7" && k >= 2544 && m > 70 {
				c.chunk, c.panel = 0, map[bool]int{true: 32, false: 40}[m > 3808]
			}
			before, old := blobBefore(t, c.rev, l, blob)
			if c.chunk == 0 {
				if !before.Paneled() || before.PanelRows() != c.panel {
					t.Fatalf("%dx%d in %s: panel-major %v in panels of %d, want %d", m, k, c.rev, before.Paneled(), before.PanelRows(), c.panel)
				}
			} else if got, want := before.Chunks(), max(1, (nb+c.chunk-1)/c.chunk); got != want || before.Paneled() {
				t.Fatalf("%dx%d in %s: chunks of %d: %d chunks, want %d (panel-major %v)", m, k, c.rev, c.chunk, got, want, before.Paneled())
			}
			same := !l.Paneled() && c.chunk == 10 || l.Paneled() && c.panel == l.PanelRows() // laid out as now
			if l.Paneled() && !same && bytes.Equal(old, blob) {
				t.Errorf("%dx%d: the %s blob equals this build's", m, k, c.rev)
			}
			got, err := Relayout(c.rev, quantcfg.TL2, m, k, old)
			if err != nil || !bytes.Equal(got, blob) {
				t.Fatalf("%dx%d from %s: %v (equal %v)", m, k, c.rev, err, bytes.Equal(got, blob))
			}
			if same != (&got[0] == &old[0]) {
				t.Errorf("%dx%d from %s: the blob itself %v, want %v", m, k, c.rev, &got[0] == &old[0], same)
			}
		}
		if got, err := Relayout(LayoutRevision, quantcfg.TL2, m, k, blob); err != nil || &got[0] != &blob[0] {
			t.Errorf("%dx%d from %s: %v (want the blob itself)", m, k, LayoutRevision, err)
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
		{"kernels/10", quantcfg.I2S, i2s, `"kernels/10" is not one this build knows`},
		{"kernels/3", quantcfg.TL2, tl2[1:], "blob has"},
		{"kernels/3", quantcfg.TL2, bytes.Repeat([]byte{0xff}, len(tl2)), "laid out for " + LayoutRevision},
		{"kernels/5", quantcfg.TL2, bytes.Repeat([]byte{0xff}, len(tl2)), "laid out for " + LayoutRevision},
		{"kernels/6", quantcfg.TL2, bytes.Repeat([]byte{0xff}, len(tl2)), "laid out for " + LayoutRevision},
		{"kernels/7", quantcfg.TL2, bytes.Repeat([]byte{0xff}, len(tl2)), "laid out for " + LayoutRevision},
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

// int1EncodeV8 is the int1 encoder of layouts kernels/1 to kernels/8 (int1DecodeV8's
// picture): a row block's stream, units of 32 bytes.
func int1EncodeV8(l Layout, w []int8, blk []byte) {
	for r8 := 0; r8 < 8; r8++ {
		for j := 0; j < 4; j++ {
			row := w[(8*j+r8)*l.Kp:][:l.Kp]
			for k, v := range row {
				blk[32*(k/8)+4*r8+k%4] |= byte(v) >> 7 << (4*(k%8/4) + j)
			}
		}
	}
}

// TestRelayoutInt1: an int1 blob of kernels/1 to kernels/8 (row block after row block, VNNI4)
// comes back as this build packs the same weights, in every shape's padding (one and
// several panels, a short last one, K not a multiple of 32); a short blob is refused.
func TestRelayoutInt1(t *testing.T) {
	for _, c := range [][2]int{{1, 1}, {40, 300}, {70, 64}, {1100, 96}, {2081, 45}} {
		m, k := c[0], c[1]
		w, blob, l := packRandom(t, quantcfg.Int1, m, k, 5)
		if g := int1PanelRows(l.RowBlocks()); l.PanelRows() != g || l.Panels() != (l.RowBlocks()+g-1)/g {
			t.Fatalf("%dx%d: %d panels of %d", m, k, l.Panels(), l.PanelRows())
		}
		old := make([]byte, len(blob))
		for rb := range l.RowBlocks() {
			int1EncodeV8(l, padRows(l, w.Q, rb*RowBlock, min(m, (rb+1)*RowBlock), nil), old[rb*l.RowBlockBytes:])
		}
		for _, rev := range []string{"kernels/1", "kernels/8"} {
			got, err := Relayout(rev, quantcfg.Int1, m, k, old)
			if err != nil || !bytes.Equal(got, blob) {
				t.Fatalf("%dx%d from %s: %v (equal %v)", m, k, rev, err, bytes.Equal(got, blob))
			}
		}
		if got, err := Relayout(LayoutRevision, quantcfg.Int1, m, k, blob); err != nil || &got[0] != &blob[0] {
			t.Errorf("%dx%d from %s: %v (want the blob itself)", m, k, LayoutRevision, err)
		}
		if _, err := Relayout("kernels/8", quantcfg.Int1, m, k, old[1:]); !errors.Is(err, ErrShape) {
			t.Errorf("%dx%d: short blob: %v", m, k, err)
		}
		for _, rev := range []string{"kernels/10", "bogus", ""} {
			if _, err := Relayout(rev, quantcfg.Int1, m, k, old); err == nil || !strings.Contains(err.Error(), "not one this build knows") {
				t.Errorf("%dx%d from %q: %v, want the revision refused", m, k, rev, err)
			}
		}
	}
}
