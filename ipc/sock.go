package ipc

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Socket frames (PROTOCOL.md, "Handshake"): a little-endian uint32 length, then that
// many bytes of msgpack. The daemon's handshake reply carries the region's memfd as
// SCM_RIGHTS ancillary data.

// writeFrame sends one frame, with fd attached when fd >= 0.
func writeFrame(c *net.UnixConn, msg []byte, fd int) error {
	b := make([]byte, 4, 4+len(msg))
	binary.LittleEndian.PutUint32(b, uint32(len(msg)))
	b = append(b, msg...)
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	n, oobn, err := c.WriteMsgUnix(b, oob, nil)
	if err != nil {
		return err
	}
	if oobn != len(oob) {
		return fmt.Errorf("%w: sent %d of %d bytes of ancillary data", ErrProtocol, oobn, len(oob))
	}
	if n < len(b) {
		if _, err := c.Write(b[n:]); err != nil {
			return err
		}
	}
	return nil
}

// readFrame reads one frame of at most max bytes and the descriptors that came with it.
// The caller owns (and must close) the descriptors, even when an error is returned.
func readFrame(c *net.UnixConn, max int) ([]byte, []int, error) {
	var fds []int
	oob := make([]byte, unix.CmsgSpace(4*4))
	var hdr [4]byte
	if err := readFull(c, hdr[:], oob, &fds); err != nil {
		return nil, fds, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n > uint32(max) {
		return nil, fds, fmt.Errorf("%w: frame of %d bytes is larger than the limit of %d", ErrProtocol, n, max)
	}
	body := make([]byte, n)
	if err := readFull(c, body, oob, &fds); err != nil {
		return nil, fds, err
	}
	return body, fds, nil
}

func readFull(c *net.UnixConn, b, oob []byte, fds *[]int) error {
	for len(b) > 0 {
		n, oobn, _, _, err := c.ReadMsgUnix(b, oob)
		if oobn > 0 {
			*fds = append(*fds, parseRights(oob[:oobn])...)
		}
		if n == 0 && err == nil {
			return fmt.Errorf("%w: the peer closed the socket mid-frame", ErrPeerGone)
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func parseRights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// peerCred returns the connecting process's credentials and supplementary groups.
func peerCred(c *net.UnixConn) (*unix.Ucred, []uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, nil, err
	}
	var cred *unix.Ucred
	var groups []uint32
	var serr error
	err = raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if serr != nil {
			serr = os.NewSyscallError("getsockopt(SO_PEERCRED)", serr)
			return
		}
		groups = peerGroups(int(fd))
	})
	if err == nil {
		err = serr
	}
	return cred, groups, err
}

// peerGroups reads SO_PEERGROUPS (Linux 4.13+); nil when unavailable.
func peerGroups(fd int) []uint32 {
	buf := make([]uint32, 256)
	n := uint32(len(buf) * 4)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
	if e != 0 {
		return nil
	}
	return buf[:n/4]
}

// peerState looks at the other end of c without blocking: alive while it is connected
// and has sent nothing, data when bytes wait on the socket, and alive=false when it
// closed the connection or died.
func peerState(c *net.UnixConn) (alive, data bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return false, false
	}
	alive = true
	cerr := raw.Control(func(fd uintptr) {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLRDHUP}}
		n, err := unix.Poll(pfd, 0)
		if err != nil || n == 0 {
			return // EINTR or nothing: alive; the next slice looks again
		}
		ev := pfd[0].Revents
		if ev&unix.POLLIN != 0 {
			var b [1]byte
			m, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			if err == nil && m > 0 {
				data = true
				return
			}
			if err == unix.EAGAIN || err == unix.EINTR {
				return
			}
			alive = false
			return
		}
		if ev&(unix.POLLHUP|unix.POLLRDHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
			alive = false
		}
	})
	if cerr != nil {
		return false, false
	}
	return alive, data
}
