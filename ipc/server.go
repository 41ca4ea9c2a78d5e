package ipc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"golang.org/x/sys/unix"

	"bitgo/paged"
)

// Defaults of ServerOptions.
const (
	DefaultRegionBytes = 64 << 20
	MinRegionBytes     = 1 << 20
	DefaultSlots       = 8
	DefaultMaxSessions = 256
)

// DefaultLimits are the per-client limits when ServerOptions.Limits leaves a field 0.
var DefaultLimits = Limits{
	MaxRegion:  1 << 30,
	MaxBytes:   16 << 30,
	MaxLayers:  4096,
	MaxUploads: 4,
	MaxTokens:  65536,
}

// Wait slices: how long a futex sleep lasts before the waiter checks its peer. The
// client's is short enough that a dead daemon is noticed well within a second. The
// daemon's is long (an idle session costs ~nothing): a goroutine blocked on the socket
// in the netpoller (session.watch) notices a client leaving at once and wakes the
// session; the slice's own check is the fallback.
const (
	serverSlice = time.Second
	clientSlice = 50 * time.Millisecond
)

// ServerOptions configure a Server. Zero fields take the defaults above.
type ServerOptions struct {
	// Name is reported to clients in the handshake ("bitd").
	Name string
	// Limits per client; zero fields take DefaultLimits.
	Limits Limits
	// DefaultRegion is the region size for a client that asks for 0.
	DefaultRegion int64
	// Slots is the ring length of every region (1..MaxSlots).
	Slots int
	// MaxSessions bounds concurrent sessions.
	MaxSessions int
	// AllowGIDs opens the daemon to peers whose primary or supplementary group is one of
	// these (besides the daemon's own uid and root). The socket is then made mode 0660
	// and given the first group.
	AllowGIDs []uint32
	// SocketMode is the socket file's mode: default 0600, or 0660 with AllowGIDs.
	SocketMode fs.FileMode
	// HandshakeTimeout bounds the handshake (default 5 s).
	HandshakeTimeout time.Duration
	// Logger for session events and refusals (default slog.Default()).
	Logger *slog.Logger
	// Observer receives per-call and per-session events (metrics); nil for none.
	Observer Observer
	// OnSessionThread, if set, runs on each session's OS thread before it serves
	// (benchmarks pin the thread to a core with it).
	OnSessionThread func(session uint32)
}

func (o ServerOptions) withDefaults() ServerOptions {
	if o.Name == "" {
		o.Name = "bitd"
	}
	l, d := &o.Limits, DefaultLimits
	if l.MaxRegion == 0 {
		l.MaxRegion = d.MaxRegion
	}
	if l.MaxBytes == 0 {
		l.MaxBytes = d.MaxBytes
	}
	if l.MaxLayers == 0 {
		l.MaxLayers = d.MaxLayers
	}
	if l.MaxUploads == 0 {
		l.MaxUploads = d.MaxUploads
	}
	if l.MaxTokens == 0 {
		l.MaxTokens = d.MaxTokens
	}
	if o.DefaultRegion == 0 {
		o.DefaultRegion = min(DefaultRegionBytes, l.MaxRegion)
	}
	if o.Slots == 0 {
		o.Slots = DefaultSlots
	}
	if o.MaxSessions == 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.SocketMode == 0 {
		o.SocketMode = 0o600
		if len(o.AllowGIDs) > 0 {
			o.SocketMode = 0o660
		}
	}
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Validate checks the options (after defaults).
func (o ServerOptions) Validate() error {
	o = o.withDefaults()
	var errs []error
	l := o.Limits
	if l.MaxRegion < MinRegionBytes {
		errs = append(errs, fmt.Errorf("limits.max_region %d: must be at least %d", l.MaxRegion, MinRegionBytes))
	}
	if l.MaxBytes < 0 || l.MaxLayers < 0 || l.MaxUploads < 0 || l.MaxTokens < 0 {
		errs = append(errs, fmt.Errorf("limits %+v: must not be negative", l))
	}
	if o.DefaultRegion < MinRegionBytes || o.DefaultRegion > l.MaxRegion {
		errs = append(errs, fmt.Errorf("default region %d: must be in [%d, max_region %d]", o.DefaultRegion, MinRegionBytes, l.MaxRegion))
	}
	if o.Slots < 1 || o.Slots > MaxSlots {
		errs = append(errs, fmt.Errorf("slots %d: must be in [1, %d]", o.Slots, MaxSlots))
	}
	if o.MaxSessions < 1 {
		errs = append(errs, fmt.Errorf("max sessions %d: must be at least 1", o.MaxSessions))
	}
	if o.SocketMode&^fs.ModePerm != 0 {
		errs = append(errs, fmt.Errorf("socket mode %v: only permission bits", o.SocketMode))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ipc server options: %w", err)
	}
	return nil
}

// Server accepts clients on a unix socket and serves each on its own OS thread.
type Server struct {
	h   Handler
	opt ServerOptions
	log *slog.Logger
	uid int
	pid int

	mu       sync.Mutex
	ln       *net.UnixListener
	sessions map[uint32]*session
	owned    map[LayerID]uint32         // private layers, by owning session
	pending  map[*net.UnixConn]struct{} // connections still in their handshake
	nextID   uint32

	draining atomic.Bool
	conns    sync.WaitGroup // handshakes and sessions
}

// NewServer returns a server that calls h.
func NewServer(h Handler, opt ServerOptions) (*Server, error) {
	if h == nil {
		return nil, errors.New("ipc: NewServer: nil Handler")
	}
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	opt = opt.withDefaults()
	return &Server{h: h, opt: opt, log: opt.Logger, uid: os.Geteuid(), pid: os.Getpid(),
		sessions: map[uint32]*session{}, owned: map[LayerID]uint32{}, pending: map[*net.UnixConn]struct{}{}}, nil
}

// Listen creates the socket at path: a stale socket file (nobody accepting) is
// replaced; a live one, or any other file, is an error. The file gets opt.SocketMode
// and is removed when the listener closes.
func (s *Server) Listen(path string) (*net.UnixListener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("ipc: socket path %s exists and is not a socket; remove it or choose another path", path)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != s.uid {
			return nil, fmt.Errorf("ipc: socket %s belongs to uid %d, not to this daemon's uid %d; remove it or choose another path", path, st.Uid, s.uid)
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("ipc: another daemon is serving on %s", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("ipc: removing the stale socket: %w", err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("ipc: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, s.opt.SocketMode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("ipc: %w", err)
	}
	if len(s.opt.AllowGIDs) > 0 {
		if err := os.Chown(path, -1, int(s.opt.AllowGIDs[0])); err != nil {
			ln.Close()
			return nil, fmt.Errorf("ipc: giving the socket to group %d: %w", s.opt.AllowGIDs[0], err)
		}
	}
	return ln, nil
}

// ListenAndServe is Listen then Serve.
func (s *Server) ListenAndServe(path string) error {
	ln, err := s.Listen(path)
	if err != nil {
		return err
	}
	return s.Serve(ln)
}

// Serve accepts clients until Shutdown or Close; it then returns nil. It takes
// ownership of ln.
func (s *Server) Serve(ln *net.UnixListener) error {
	s.mu.Lock()
	if s.draining.Load() {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.ln = ln
	s.mu.Unlock()
	backoff := 5 * time.Millisecond
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if s.draining.Load() {
				return nil
			}
			if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) || errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.ENOMEM) {
				s.log.Warn("ipc: accept failed; retrying", "err", err, "backoff", backoff)
				time.Sleep(backoff)
				backoff = min(2*backoff, time.Second)
				continue
			}
			return fmt.Errorf("ipc: accept: %w", err)
		}
		backoff = 5 * time.Millisecond
		s.mu.Lock()
		if s.draining.Load() {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.pending[c] = struct{}{}
		s.conns.Add(1)
		s.mu.Unlock()
		go s.handshake(c)
	}
}

// Sessions returns the number of live sessions.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Shutdown drains: it stops accepting, answers new calls with StatusShuttingDown, lets
// the calls in flight finish, then ends every session (freeing its layers) and returns.
// If ctx ends first, sessions are told to stop anyway and Shutdown returns ctx's error
// without waiting for handler calls that are still running.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining.Store(true)
	if s.ln != nil {
		s.ln.Close()
	}
	sess := make([]*session, 0, len(s.sessions))
	for _, x := range s.sessions {
		sess = append(sess, x)
	}
	for c := range s.pending {
		c.Close() // a handshake in progress fails at once
	}
	s.mu.Unlock()
	var ctxErr error
	for busy := true; busy; {
		busy = slices.ContainsFunc(sess, func(x *session) bool { return x.inCall.Load() })
		if !busy {
			break
		}
		select {
		case <-ctx.Done():
			ctxErr = ctx.Err()
			busy = false
		case <-time.After(time.Millisecond):
		}
	}
	for _, x := range sess {
		x.stopWith(fmt.Errorf("%w: the daemon was asked to stop", ErrShuttingDown))
	}
	done := make(chan struct{})
	go func() { s.conns.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		// A handler call that never returns keeps its session; the rest are closed.
		if ctxErr == nil {
			ctxErr = ctx.Err()
		}
		select {
		case <-done:
		case <-time.After(100 * time.Millisecond):
		}
	}
	return ctxErr
}

// Close ends every session now; it does not wait for handler calls still running
// (their sessions end when the call returns).
func (s *Server) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func (s *Server) allowed(c *unix.Ucred, groups []uint32) bool {
	if int(c.Uid) == s.uid || c.Uid == 0 {
		return true
	}
	for _, g := range s.opt.AllowGIDs {
		if c.Gid == g || slices.Contains(groups, g) {
			return true
		}
	}
	return false
}

func (s *Server) refuse(c *net.UnixConn, st Status, msg string) {
	b, _ := msgpack.Marshal(&HelloReply{Proto: ProtocolVersion, Status: st, Msg: cutMsg(msg), Server: s.opt.Name, ServerPID: s.pid})
	_ = writeFrame(c, b, -1)
}

func (s *Server) handshake(c *net.UnixConn) {
	defer s.conns.Done()
	ok := false
	defer func() {
		s.mu.Lock()
		delete(s.pending, c)
		s.mu.Unlock()
		if !ok {
			c.Close()
		}
	}()
	_ = c.SetDeadline(time.Now().Add(s.opt.HandshakeTimeout))
	cred, groups, err := peerCred(c)
	if err != nil {
		s.log.Warn("ipc: refused a connection: no peer credentials", "err", err)
		return
	}
	body, fds, err := readFrame(c, maxFrameSize)
	closeFDs(fds) // a client has no business sending descriptors
	if err != nil {
		s.log.Warn("ipc: handshake failed", "pid", cred.Pid, "uid", cred.Uid, "err", err)
		return
	}
	if !s.allowed(cred, groups) {
		msg := fmt.Sprintf("uid %d (pid %d) may not use this daemon (it runs as uid %d", cred.Uid, cred.Pid, s.uid)
		if len(s.opt.AllowGIDs) > 0 {
			msg += fmt.Sprintf(" and admits groups %v", s.opt.AllowGIDs)
		}
		msg += "); run the client as that user or start bitd with --allow-gid"
		s.log.Warn("ipc: refused peer", "pid", cred.Pid, "uid", cred.Uid, "gid", cred.Gid)
		s.refuse(c, StatusDenied, msg)
		return
	}
	hello, err := decodeHello(body)
	if err != nil {
		s.log.Warn("ipc: bad hello", "pid", cred.Pid, "err", err)
		s.refuse(c, StatusOf(asBadRequest(err)), err.Error())
		return
	}
	size := int64(hello.region)
	if size == 0 {
		size = s.opt.DefaultRegion
	}
	if size > s.opt.Limits.MaxRegion {
		s.refuse(c, StatusLimit, fmt.Sprintf("region of %d bytes asked; this daemon's limit is %d", size, s.opt.Limits.MaxRegion))
		return
	}
	page := int64(os.Getpagesize())
	size = max(MinRegionBytes, (size+page-1)/page*page)
	nslots := int(hello.slots)
	if nslots == 0 {
		nslots = s.opt.Slots
	}
	g, err := newGeometry(int(size), nslots)
	if err != nil {
		s.refuse(c, StatusOf(err), err.Error())
		return
	}

	s.mu.Lock()
	switch {
	case s.draining.Load():
		s.mu.Unlock()
		s.refuse(c, StatusShuttingDown, "the daemon is shutting down")
		return
	case len(s.sessions) >= s.opt.MaxSessions:
		s.mu.Unlock()
		s.refuse(c, StatusLimit, fmt.Sprintf("%d sessions are open, the daemon's limit", s.opt.MaxSessions))
		return
	}
	s.nextID++
	id := s.nextID
	s.mu.Unlock()

	reg, err := paged.NewRegion(fmt.Sprintf("bitd-session-%d", id), int(size))
	if err != nil {
		s.log.Error("ipc: cannot create a session region", "size", size, "err", err)
		s.refuse(c, StatusLimit, err.Error())
		return
	}
	x := newSession(s, id, hello, c, reg, g)
	s.mu.Lock()
	if s.draining.Load() {
		s.mu.Unlock()
		reg.Close()
		s.refuse(c, StatusShuttingDown, "the daemon is shutting down")
		return
	}
	s.sessions[id] = x
	delete(s.pending, c) // from now on the session closes c
	s.mu.Unlock()

	reply := x.helloReply()
	b, err := msgpack.Marshal(&reply)
	if err == nil {
		err = writeFrame(c, b, reg.FD())
	}
	if err == nil {
		err = c.SetDeadline(time.Time{})
	}
	if err != nil {
		s.log.Warn("ipc: handshake reply failed", "session", id, "err", err)
		x.cleanup(err, false)
		ok = true // cleanup closed c
		return
	}
	ok = true
	s.log.Info("ipc: session started", "session", id, "client", hello.name, "pid", cred.Pid, "uid", cred.Uid, "region", size, "slots", nslots)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if s.opt.OnSessionThread != nil {
		s.opt.OnSessionThread(id)
	}
	x.run()
}
