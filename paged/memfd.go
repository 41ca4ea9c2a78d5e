package paged

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Region is a memfd-backed shared-memory mapping: created by the daemon for one client,
// sized once and sealed against growing and shrinking (so neither side can make the other
// fault by truncating it), and mapped read-write by both.
type Region struct {
	fd   int
	data []byte // exactly the slice Mmap returned, kept for Munmap
}

// NewRegion creates a sealed memfd of size bytes (rounded up to the page size) and maps it.
// The name shows in /proc/PID/fd and /proc/PID/maps as "memfd:NAME".
func NewRegion(name string, size int) (*Region, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w %q: size %d must be positive", ErrRegion, name, size)
	}
	page := os.Getpagesize()
	size = (size + page - 1) / page * page
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrRegion, name, os.NewSyscallError("memfd_create", err))
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%w %q: size %d: %w", ErrRegion, name, size, os.NewSyscallError("ftruncate", err))
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_GROW|unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%w %q: %w", ErrRegion, name, os.NewSyscallError("fcntl(F_ADD_SEALS)", err))
	}
	r, err := mapFD(fd, size)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%w %q: %w", ErrRegion, name, err)
	}
	return r, nil
}

// MapRegion maps a memfd received from a peer. It takes ownership of fd. It refuses a
// descriptor whose size differs from want or that is not sealed against shrinking (a
// peer that can shrink the file can make every access to the mapping fault).
func MapRegion(fd int, want int) (*Region, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: %w", ErrRegion, os.NewSyscallError("fstat", err))
	}
	if st.Size != int64(want) {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: descriptor has %d bytes, the peer announced %d", ErrRegion, st.Size, want)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: descriptor is not sealed against shrinking (seals %#x, %v)", ErrRegion, seals, err)
	}
	r, err := mapFD(fd, want)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: %w", ErrRegion, err)
	}
	return r, nil
}

func mapFD(fd, size int) (*Region, error) {
	data, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, os.NewSyscallError("mmap", err)
	}
	return &Region{fd: fd, data: data}, nil
}

// Bytes is the mapping. It is invalid after Close.
func (r *Region) Bytes() []byte { return r.data }

// FD is the memfd, for passing to a peer with unix.UnixRights.
func (r *Region) FD() int { return r.fd }

// Close unmaps the region and closes the descriptor; it is safe to call twice.
func (r *Region) Close() error {
	var errs []error
	if r.data != nil {
		if err := unix.Munmap(r.data); err != nil {
			errs = append(errs, os.NewSyscallError("munmap", err))
		}
		r.data = nil
	}
	if r.fd >= 0 {
		if err := unix.Close(r.fd); err != nil {
			errs = append(errs, os.NewSyscallError("close", err))
		}
		r.fd = -1
	}
	return errors.Join(errs...)
}
