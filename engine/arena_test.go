package engine

import (
	"errors"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"testing"
	"unsafe"

	"bitgo/kernels"
	"bitgo/paged"
	"bitgo/quantcfg"
)

// TestOwnedWeightsInArena: blobs the engine copies or packs, small ones too, live in its
// arena (huge pages, read-only), compute what the reference does, and go back to the
// kernel when the layer is freed or its registration fails.
func TestOwnedWeightsInArena(t *testing.T) {
	e, err := New(Config{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rng := rand.New(rand.NewPCG(4, 2))
	blocks := func() int { return e.arena.Stats().Blocks }

	big := randLayer(rng, "packed-here", quantcfg.Int8, 2048, 1536, true) // 3 MiB
	blob, err := kernels.PackNew(big.Format, big.Out, big.In, *big.Weights)
	if err != nil {
		t.Fatal(err)
	}
	copied := big
	copied.Name, copied.Weights, copied.Packed = "copied", nil, append([]byte(nil), blob...)
	small := randLayer(rng, "small", quantcfg.I2S, 64, 128, false)
	var ids []ID
	for _, s := range []Spec{big, copied, small} {
		id, err := e.Register(s)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if got := blocks(); got != 3 {
		t.Fatalf("%d arena blocks after registering two 3 MiB layers and a small one, want 3", got)
	}
	for i := range copied.Packed { // the engine's copy must not alias the caller's blob
		copied.Packed[i] = 0
	}
	x := make([]float32, 3*big.In)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	want := reference(t, big, x, 3)
	for _, id := range ids {
		data := e.layers[id].k.Data
		if e.layers[id].block == nil {
			t.Errorf("layer %d: a %d-byte blob not in the arena", id, len(data))
		}
		if p := uintptr(unsafe.Pointer(&data[0])); p%uintptr(os.Getpagesize()) != 0 {
			t.Errorf("layer %d: weights at %#x, not on a page boundary", id, p)
		}
		if !faults(func() { data[len(data)/2] ^= 1 }) {
			t.Errorf("layer %d: writing to the registered weights did not fault: they are not read-only", id)
		}
	}
	// Written, the two 3 MiB blobs lie in huge pages where the kernel gives advised memory
	// one at the fault (direct compaction).
	if thp, err := paged.ReadTHP(); err == nil && thp.Advised() && (thp.Defrag == "always" || thp.Defrag == "madvise" || thp.Defrag == "defer+madvise") {
		if got := e.HugePageBytes(); got < 4<<20 {
			t.Errorf("%d bytes of the engine's weights in huge pages, want at least 4 MiB (THP %+v)", got, thp)
		}
	}
	for _, id := range ids[:2] {
		got := make([]float32, 3*big.Out)
		if err := e.ForwardF32(id, x, 3, got); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("layer %d: out[%d] = %v, want %v", id, i, got[i], want[i])
			}
		}
	}

	// Failed registrations give their block back: a duplicate name, and codes that do not
	// decode (i2s code 3) in an untrusted copy.
	if _, err := e.Register(big); !errors.Is(err, ErrExists) {
		t.Fatalf("registering %q again: %v, want ErrExists", big.Name, err)
	}
	bad := Spec{LayerSpec: quantcfg.LayerSpec{Name: "bad-codes", Format: quantcfg.I2S, Out: 4096, In: 4096}.WithDefaults()}
	ly, err := kernels.NewLayout(bad.Format, bad.Out, bad.In)
	if err != nil {
		t.Fatal(err)
	}
	bad.Packed = make([]byte, ly.Bytes())
	for i := range bad.Packed {
		bad.Packed[i] = 0xff
	}
	bad.Scales = make([]float32, bad.NumScales())
	if _, err := e.Register(bad); err == nil {
		t.Fatal("a blob of invalid i2s codes registered")
	}
	if got := blocks(); got != 3 {
		t.Fatalf("%d arena blocks after two failed registrations, want 3", got)
	}
	for _, id := range ids {
		if err := e.Free(id); err != nil {
			t.Fatal(err)
		}
	}
	if st := e.arena.Stats(); st.Blocks != 0 || st.Mapped != 0 || st.Reserved != 0 {
		t.Fatalf("after freeing every layer the arena holds %+v", st)
	}
}

// faults reports whether f faulted (a write to read-only memory).
func faults(f func()) (faulted bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() { faulted = recover() != nil }()
	f()
	return false
}
