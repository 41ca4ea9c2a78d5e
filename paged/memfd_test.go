package paged

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

func TestRegionSharedAndSealed(t *testing.T) {
	r, err := NewRegion("bitgo-test", 10000)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if len(r.Bytes()) != 12288 {
		t.Fatalf("size %d, want page-rounded 12288", len(r.Bytes()))
	}
	// A second mapping of the same memfd (as a peer would get) sees the writes.
	fd, err := unix.Dup(r.FD())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := MapRegion(fd, len(r.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	r.Bytes()[4000] = 42
	if peer.Bytes()[4000] != 42 {
		t.Fatal("peer mapping does not share memory")
	}
	if err := unix.Ftruncate(r.FD(), 4096); err == nil {
		t.Fatal("sealed region could be shrunk")
	}
	if err := unix.Ftruncate(r.FD(), 1<<20); err == nil {
		t.Fatal("sealed region could be grown")
	}
	if err := r.Close(); err != nil || r.Close() != nil {
		t.Fatalf("close twice: %v", err)
	}
}

func TestMapRegionRefusesBadDescriptors(t *testing.T) {
	r, err := NewRegion("bitgo-test", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	fd, _ := unix.Dup(r.FD())
	if _, err := MapRegion(fd, 8192); !errors.Is(err, ErrRegion) {
		t.Fatalf("size mismatch accepted: %v", err)
	}
	unsealed, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	unix.Ftruncate(unsealed, 4096)
	if _, err := MapRegion(unsealed, 4096); !errors.Is(err, ErrRegion) {
		t.Fatalf("unsealed memfd accepted: %v", err)
	}
	if _, err := NewRegion("x", 0); !errors.Is(err, ErrRegion) {
		t.Fatalf("zero size accepted: %v", err)
	}
}
