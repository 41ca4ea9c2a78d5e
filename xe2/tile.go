package xe2

import (
	"fmt"
	"strconv"
	"strings"
)

// Tile is one kernel configuration: the -D options a program is built with plus the
// split-K factor chosen at launch.
type Tile struct {
	// Prefill selects xe2_prefill (any n, grid over token tiles) instead of xe2_decode
	// (n <= TN, one token tile).
	Prefill bool `json:"prefill"`
	// TN is the number of tokens per DPAS (its M): 1, 2, 4 or 8.
	TN int `json:"tn"`
	// SGN is the number of token tiles a sub-group computes (prefill; 1 for decode).
	SGN int `json:"sgn"`
	// SGM is the number of 16-row blocks a sub-group computes: 1, 2 or 4.
	SGM int `json:"sgm"`
	// WGS is the number of sub-groups per work-group (1..16).
	WGS int `json:"wgs"`
	// Split is the split-K factor (>= 1); the launch clamps it to the K steps or segments.
	Split int `json:"split"`
	// Fused quantizes activations inside the GEMM kernel (sub-group abs-max); otherwise a
	// separate pass writes int8 activations and scales first.
	Fused bool `json:"fused"`
}

// String is a compact name such as "decode/tn4/sgm2/wgs4/split8/fused".
func (t Tile) String() string {
	kind, act := "decode", "separate"
	if t.Prefill {
		kind = "prefill"
	}
	if t.Fused {
		act = "fused"
	}
	return fmt.Sprintf("%s/tn%d/sgn%d/sgm%d/wgs%d/split%d/%s", kind, t.TN, t.SGN, t.SGM, t.WGS, t.Split, act)
}

// ParseTile reads String's form.
func ParseTile(s string) (Tile, error) {
	var t Tile
	f := strings.Split(s, "/")
	if len(f) != 7 {
		return t, fmt.Errorf("%w: tile %q: want kind/tnN/sgnN/sgmN/wgsN/splitN/fused|separate", ErrInvalid, s)
	}
	switch f[0] {
	case "decode":
	case "prefill":
		t.Prefill = true
	default:
		return t, fmt.Errorf("%w: tile %q: kind %q is not decode or prefill", ErrInvalid, s, f[0])
	}
	for i, p := range []struct {
		prefix string
		dst    *int
	}{{"tn", &t.TN}, {"sgn", &t.SGN}, {"sgm", &t.SGM}, {"wgs", &t.WGS}, {"split", &t.Split}} {
		v, ok := strings.CutPrefix(f[i+1], p.prefix)
		n, err := strconv.Atoi(v)
		if !ok || err != nil {
			return t, fmt.Errorf("%w: tile %q: field %q is not %sN", ErrInvalid, s, f[i+1], p.prefix)
		}
		*p.dst = n
	}
	switch f[6] {
	case "fused":
		t.Fused = true
	case "separate":
	default:
		return t, fmt.Errorf("%w: tile %q: %q is not fused or separate", ErrInvalid, s, f[6])
	}
	return t, t.Validate()
}

// maxAcc bounds the accumulators a lane keeps (TN*SGN*SGM ints and as many floats).
const maxAcc = 64

// Validate checks the tile on its own (Fits checks it against a device).
func (t Tile) Validate() error {
	bad := func(f string, a ...any) error {
		return fmt.Errorf("%w: tile %s: %s", ErrInvalid, t, fmt.Sprintf(f, a...))
	}
	switch t.TN {
	case 1, 2, 4, 8:
	default:
		return bad("tn %d: DPAS takes 1, 2, 4 or 8 rows", t.TN)
	}
	if t.SGN < 1 || t.SGN > 8 || (!t.Prefill && t.SGN != 1) {
		return bad("sgn %d: 1 for decode, 1..8 for prefill", t.SGN)
	}
	if t.SGM != 1 && t.SGM != 2 && t.SGM != 4 {
		return bad("sgm %d: 1, 2 or 4 row blocks", t.SGM)
	}
	if t.WGS < 1 || t.WGS > 16 {
		return bad("wgs %d: 1..16 sub-groups", t.WGS)
	}
	if t.Split < 1 || t.Split > 64 {
		return bad("split %d: 1..64", t.Split)
	}
	if t.TN*t.SGN*t.SGM > maxAcc {
		return bad("tn*sgn*sgm = %d accumulators per lane, more than %d", t.TN*t.SGN*t.SGM, maxAcc)
	}
	return nil
}

// Fits checks the tile against the device's work-group and local memory limits, before
// anything is compiled.
func (t Tile) Fits(info DeviceInfo) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if wg := 16 * t.WGS; info.MaxWorkGroup > 0 && wg > info.MaxWorkGroup {
		return fmt.Errorf("%w: tile %s: work-group of %d exceeds the device's %d", ErrInvalid, t, wg, info.MaxWorkGroup)
	}
	if lm := t.localBytes(info.native); info.LocalMem > 0 && uint64(lm) > info.LocalMem {
		return fmt.Errorf("%w: tile %s: %d bytes of local memory exceed the device's %d", ErrInvalid, t, lm, info.LocalMem)
	}
	return nil
}

// localBytes is the local memory the GEMM kernel declares (xe2.h's XE2_SCRATCH).
func (t Tile) localBytes(native bool) int {
	if native {
		return 4 * t.WGS
	}
	return 4 * 8 * 16 * t.WGS
}

// defines are the tile's build options.
func (t Tile) defines(dpas bool) string {
	return fmt.Sprintf("-D XE2_DPAS=%d -D XE2_TN=%d -D XE2_SGN=%d -D XE2_SGM=%d -D XE2_WGS=%d -D XE2_FUSED=%d",
		b2i(dpas), t.TN, t.SGN, t.SGM, t.WGS, b2i(t.Fused))
}

// tokenTile is the decode TN for n tokens: the smallest of 1, 2, 4, 8 holding n.
func tokenTile(n int) int {
	for _, tn := range []int{1, 2, 4, 8} {
		if n <= tn {
			return tn
		}
	}
	return 8
}
