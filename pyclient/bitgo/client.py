"""``bitgo.Client``: a connection to bitd (ipc/PROTOCOL.md, version 1).

    c = bitgo.Client()                       # BITD_SOCKET, the default socket, or a private bitd
    layer = c.register("i2s", 2560, 2560, weights, scales)   # logical ternary weights, int8
    y = c.forward(layer["id"], x)            # x: [..., 2560] float32 / bfloat16 / float16

Where it connects: the ``socket`` argument, else ``$BITD_SOCKET``, else bitd's default socket
(``$XDG_RUNTIME_DIR/bitd.sock``, else ``/tmp/bitd-$UID.sock``) if a daemon answers there,
else (the **embedded default**) a private ``bitd serve`` that the client starts as its child
(see :mod:`bitgo.daemon`) and stops when it is closed or the process exits.

Calls: the request goes into a slot of the shared region, the client publishes it and waits
for the answer by spinning with ``sched_yield`` for an adaptive budget, then sleeping on a
futex in slices (2 ms, then 50 ms); after every slice it checks that the daemon is alive (the
socket, the region's state word, the child process) and its own call timeout. A dead daemon
raises :class:`bitgo.DaemonError` (with the tail of the daemon's stderr when bitgo started it)
within one slice; nothing waits forever.

Thread safety: a Client serializes its calls with a lock (one call in flight; bitd serves a
session in order on one thread anyway). Layers belong to the Client that registered them; for
calls in parallel, open several Clients and register the layers with each.

Dtypes: float32 and bfloat16 travel as they are. float16 is not on the wire: the client widens
it to float32 (exact), bitd computes the float32 result, and the client rounds it to float16
(nearest even) -- the same result as ``bitgo.reference`` for float16 inputs.

A Client is tied to the process that made it: after ``fork`` the child's copies refuse every
call (make a new Client in the child).
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import fcntl
import mmap
import os
import select
import socket
import struct
import threading
import time
import weakref
from collections import deque
from typing import Any, Dict, Optional, Tuple

import msgpack
import torch

from . import _sys, reference
from .daemon import EmbeddedDaemon, default_socket_path
from .errors import STATUS_NAMES, DaemonError, RequestError

__all__ = ["Client", "default_client", "close_default_client"]

PROTOCOL = 1
MAGIC = 0x4350494F47544942
HEADER_SIZE = 256
SLOT_SIZE = 4096
SLOT_REQ_OFF = 64
SLOT_REQ_CAP = 1984
SLOT_RESP_OFF = 2048
SLOT_RESP_CAP = 2048
MAX_FRAME = 65536

# u32 word indexes of the region header's atomic words (byte offset / 4).
_REQ_SEQ = 64 // 4
_CLIENT_SLEEPING = 72 // 4
_RESP_SEQ = 128 // 4
_SERVER_SLEEPING = 136 // 4
_STATE = 144 // 4
_STATE_CLOSED = 2

OP_HELLO, OP_PING, OP_BEGIN, OP_UPLOAD, OP_COMMIT, OP_ABORT = 1, 2, 3, 4, 5, 6
OP_LOOKUP, OP_FORWARD, OP_FREE, OP_STATS = 7, 8, 9, 10
_OP_NAMES = {1: "hello", 2: "ping", 3: "begin", 4: "upload", 5: "commit", 6: "abort",
             7: "lookup", 8: "forward", 9: "free", 10: "stats"}

_DT_CODES = {torch.float32: 1, torch.bfloat16: 2}
_FWD = struct.Struct(">BBBQBIBBQBQBQBQ")  # the fixed-shape forward request, 53 bytes
_FWD_LEN = 53
_U32LE = struct.Struct("<I")
_U64BE = struct.Struct(">Q")
_HDR = struct.Struct("<QIIQIIQQQII")
_FWD_OK = b"\x93\x00\xa0\xcf"  # [0, "", uint64 handler_ns]

_SPIN_FLOOR_NS = 50_000
_SPIN_CEIL_NS = 1_000_000
_FIRST_SLICE_NS = 2_000_000
_SLICE_NS = 50_000_000
_VIEW_CACHE = 512

_sched_yield = os.sched_yield
_now = time.perf_counter_ns


def _ewma(e: int, d: Optional[int]) -> int:
    """The moving average of waits a spin budget follows (one long wait moves it by at most
    a ceiling); d None (a wait that included waking bitd) leaves it."""
    return e if d is None else e + (min(d, 4 * _SPIN_CEIL_NS) - e) // 4


class _NobodyThere(Exception):
    """Nothing listens at the default socket (the embedded default takes over)."""


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


class Client:
    """A session with bitd: the socket, the shared region, the layers registered through it.

    Arguments:
      socket: the daemon's socket path (default: ``$BITD_SOCKET``, then the default socket,
        then a private daemon; see the module docstring).
      embedded: True always starts a private daemon; False never does (DaemonError when no
        daemon answers); None (default) starts one only when no socket was named and none
        answers at the default path.
      name: the client's name in the daemon's logs.
      region_bytes / slots: the shared region and ring wanted (0: the daemon's defaults,
        64 MiB and 8).
      call_timeout: seconds one call may take before the client gives up and closes
        (None: no limit besides the daemon being alive). Default 300.
      connect_timeout: seconds for connecting and the handshake.
      threads: ``--threads`` of a private daemon (default ``$BITGO_BITD_THREADS``; else
        ``$BITD_THREADS`` as bitd reads it; else every core this process may use but one,
        at least one). A private daemon shares the machine with this process, whose own
        thread is busy between linear calls (norms, attention): leaving it a core keeps
        bitd's threads from time-sharing a core with it, which on a small machine costs
        more per call (the scheduler makes a core's tasks take turns) than one fewer
        compute thread costs in a bandwidth-bound GEMV.
    """

    def __init__(self, socket: Optional[str] = None, *, embedded: Optional[bool] = None,
                 name: Optional[str] = None, region_bytes: int = 0, slots: int = 0,
                 call_timeout: Optional[float] = 300.0, connect_timeout: float = 5.0,
                 threads: Optional[int] = None) -> None:
        self._lock = threading.Lock()
        self._err: Optional[BaseException] = None
        self._closed = False
        self._mm = None
        self._sock = None
        self._daemon: Optional[EmbeddedDaemon] = None
        self._pid = os.getpid()
        self._call_timeout_ns = None if call_timeout is None else int(call_timeout * 1e9)
        self._pending_free: deque = deque()
        self._inflight: Optional[int] = None
        self._layers: Dict[int, dict] = {}
        self._views: Dict[tuple, list] = {}
        self._ewma = _SPIN_FLOOR_NS
        # forward requests answered; bitd's compute time for them; the time they took in
        # this client (copying in and out, the round trip, bitd's compute)
        self.forward_calls = 0
        self.handler_ns = 0
        self.client_ns = 0
        self.name = name or f"bitgo-py-{os.getpid()}"
        if region_bytes < 0 or not 0 <= slots <= 64:
            raise ValueError(f"region_bytes {region_bytes}, slots {slots}: want region_bytes "
                             f">= 0 and slots in [0, 64]")
        try:
            _sys.check_platform()
        except OSError as e:
            raise DaemonError(f"bitgo.Client: {e}; use bitgo.set_backend('reference')") from None
        path, how = self._resolve(socket, embedded, threads)
        # with no socket named, nothing listening at the default path means: embedded
        self._fallback = how == "default socket" and embedded is None
        self.socket_path, self.how = path, how
        try:
            try:
                self._handshake(path, region_bytes, slots, connect_timeout)
            except _NobodyThere:
                self.socket_path, self.how = self._start_daemon(threads), "embedded"
                self._handshake(self.socket_path, region_bytes, slots, connect_timeout)
        except BaseException:
            self._teardown()
            raise
        _clients.add(self)

    # -- connecting -----------------------------------------------------------------------

    def _resolve(self, sock: Optional[str], embedded: Optional[bool],
                 threads: Optional[int]) -> Tuple[str, str]:
        """Where to connect, and how it was chosen."""
        if embedded:
            return self._start_daemon(threads), "embedded"
        if sock is None:
            env = os.environ.get("BITD_SOCKET")
            if env:
                return env, "BITD_SOCKET"
        else:
            return os.fspath(sock), "argument"
        return default_socket_path(), "default socket"

    def _start_daemon(self, threads: Optional[int]) -> str:
        if threads is None:
            env = os.environ.get("BITGO_BITD_THREADS", "").strip()
            if env:
                try:
                    threads = int(env)
                except ValueError:
                    raise ValueError(f"BITGO_BITD_THREADS={env!r}: want an integer") from None
            elif not os.environ.get("BITD_THREADS", "").strip():
                threads = max(1, len(os.sched_getaffinity(0)) - 1)
        self._daemon = EmbeddedDaemon(threads=threads)
        return self._daemon.socket_path

    def _handshake(self, path: str, region: int, slots: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._sock = s
            s.settimeout(timeout)
            try:
                s.connect(path)
                break
            except OSError as e:
                s.close()
                # a private daemon may have bound its socket and not listen yet
                if (self._daemon is not None and e.errno == errno.ECONNREFUSED
                        and self._daemon.alive() and time.monotonic() < deadline):
                    time.sleep(0.002)
                    continue
                if (self._fallback and self._daemon is None
                        and e.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTSOCK)):
                    raise _NobodyThere() from None
                raise DaemonError(f"connecting to bitd at {path}: {e.strerror or e} (is "
                                  f"`bitd serve` running there?)" + self._tail()) from None
        hello = {"proto": PROTOCOL, "name": self.name[:512], "region": int(region),
                 "slots": int(slots), "pid": os.getpid()}
        try:
            _send_frame(s, msgpack.packb(hello, use_bin_type=True))
            body, fds = _recv_frame(s)
        except (OSError, EOFError, ValueError) as e:
            raise DaemonError(f"handshake with bitd at {path}: {e}" + self._tail()) from None
        fd = None
        try:
            rep = _unpack_map(body, "handshake reply")
            st = rep.get("status")
            if st != 0:
                raise DaemonError(f"bitd at {path} refused the connection: {rep.get('msg')!r} "
                                  f"({STATUS_NAMES.get(st, st)})", status=st)
            if len(fds) != 1:
                raise DaemonError(f"bitd at {path}: the handshake reply carried {len(fds)} "
                                  f"descriptors, want 1 (protocol error)")
            fd = fds.pop()
            self._map(fd, rep, path)
        finally:
            for f in fds + ([fd] if fd is not None else []):
                os.close(f)
        self.info = rep
        s.settimeout(None)
        self._poll = select.poll()
        self._poll.register(s.fileno(), select.POLLIN | select.POLLRDHUP)

    def _map(self, fd: int, rep: dict, path: str) -> None:
        def bad(what):
            return DaemonError(f"bitd at {path}: {what} (protocol error)")

        for key in ("region", "nslots", "slot_size", "data_off", "data_size", "server_pid"):
            if not isinstance(rep.get(key), int) or isinstance(rep.get(key), bool):
                raise bad(f"handshake reply field {key!r} = {rep.get(key)!r}")
        size, nslots = rep["region"], rep["nslots"]
        if not (0 < size <= 1 << 40) or not 1 <= nslots <= 64 or rep["slot_size"] != SLOT_SIZE:
            raise bad(f"region {size} bytes, {nslots} slots of {rep['slot_size']}")
        st = os.fstat(fd)
        if st.st_size != size:
            raise bad(f"region descriptor has {st.st_size} bytes, the reply says {size}")
        try:
            seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        except OSError as e:
            raise bad(f"region descriptor is not a sealed memfd ({e})") from None
        if not seals & fcntl.F_SEAL_SHRINK:
            raise bad("region descriptor is not sealed against shrinking")
        mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self._mm = mm
        (magic, ver, hsize, rsize, hn, hslot, slots_off, data_off, data_size, _pid,
         _session) = _HDR.unpack_from(mm, 0)
        if magic != MAGIC or ver != PROTOCOL:
            raise bad(f"region magic {magic:#x} version {ver}")
        want = (HEADER_SIZE, size, nslots, SLOT_SIZE, HEADER_SIZE, rep["data_off"],
                rep["data_size"])
        got = (hsize, rsize, hn, hslot, slots_off, data_off, data_size)
        if got != want:
            raise bad(f"region header {got} disagrees with the handshake {want}")
        if (data_off < HEADER_SIZE + nslots * SLOT_SIZE or data_size < 1
                or data_off + data_size > size):
            raise bad(f"data area [{data_off}, +{data_size}) does not fit the region")
        w = memoryview(mm).cast("I")
        self._w = w
        if w[_REQ_SEQ] or w[_RESP_SEQ]:
            raise bad("a fresh region has non-zero sequence words")
        self._words_c = [ctypes.c_uint32.from_buffer(mm, off) for off in (64, 72, 128)]
        addr_req, addr_cs, addr_resp = (ctypes.addressof(c) for c in self._words_c)
        self._addr_req, self._addr_resp = addr_req, addr_resp
        self._pub = _sys.Exchanger(w, _REQ_SEQ, addr_req)
        self._sleep_flag = _sys.Exchanger(w, _CLIENT_SLEEPING, addr_cs)
        self._nslots = nslots
        self._slot_offs = [HEADER_SIZE + i * SLOT_SIZE for i in range(nslots)]
        self._data_off = data_off
        self._data_size = data_size
        self._data = torch.frombuffer(mm, dtype=torch.uint8, count=data_size, offset=data_off)
        self._seq = 0
        self.server_pid = rep["server_pid"]
        limits = rep.get("limits") if isinstance(rep.get("limits"), dict) else {}
        self.max_tokens = int(limits.get("max_tokens") or 65536)

    # -- properties -----------------------------------------------------------------------

    @property
    def data_size(self) -> int:
        """Bytes of the data area: the most one call can move (input plus output)."""
        return self._data_size

    @property
    def daemon(self) -> Optional[EmbeddedDaemon]:
        """The private daemon this client started, or None."""
        return self._daemon

    @property
    def closed(self) -> bool:
        return self._closed or self._err is not None

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return (f"bitgo.Client({self.socket_path!r}, {self.how}, daemon pid "
                f"{getattr(self, 'server_pid', '?')}, {state})")

    # -- closing and failures -------------------------------------------------------------

    def close(self) -> None:
        """End the session (bitd frees its layers) and stop a private daemon. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._err is None:
                self._err = DaemonError("bitgo.Client: the client was closed")
            self._teardown()
        _clients.discard(self)

    def _teardown(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        self._views.clear()
        self._data = None
        self._words_c = None
        self._pub = self._sleep_flag = None
        w = getattr(self, "_w", None)
        if w is not None:
            w.release()
            self._w = None
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:
                pass  # a view is still alive somewhere; the mapping goes with it
            self._mm = None
        if self._daemon is not None:
            self._daemon.stop()

    def _tail(self) -> str:
        return self._daemon.tail_text() if self._daemon is not None else ""

    def _fail(self, msg: str, status=None, gone: bool = False) -> DaemonError:
        """Close the session after a transport failure; the error is sticky. ``gone``: the
        daemon closed the connection (give our child a moment to be reaped, for its exit
        status)."""
        d = self._daemon
        if d is not None and not d.alive(wait=0.5 if gone else 0.0):
            msg += f" (bitd exited with {d.exit_text()})"
        err = DaemonError(msg + self._tail(), status=status)
        self._err = err
        self._teardown()
        return err

    def _dead(self) -> Optional[str]:
        """Why the daemon is gone, or None while it looks alive."""
        try:
            ev = self._poll.poll(0)
        except OSError:
            ev = []
        for _fd, revents in ev:
            if revents & select.POLLIN:
                try:
                    b = self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
                except (BlockingIOError, InterruptedError):
                    b = None
                except OSError as e:
                    return f"the connection failed ({e})"
                if b:
                    return self._goodbye()
                if b == b"":
                    return "bitd closed the connection or died"
            if revents & (select.POLLHUP | select.POLLRDHUP | select.POLLERR | select.POLLNVAL):
                return "bitd closed the connection or died"
        if self._w[_STATE] == _STATE_CLOSED:
            return "bitd closed the session"
        if self._daemon is not None and not self._daemon.alive():
            return "bitd died"
        return None

    def _goodbye(self) -> str:
        try:
            self._sock.settimeout(0.1)
            body, fds = _recv_frame(self._sock)
            for f in fds:
                os.close(f)
            rep = _unpack_map(body, "last frame")
            st = rep.get("status")
            return (f"bitd closed the session: {rep.get('msg')!r} "
                    f"({STATUS_NAMES.get(st, st)})")
        except (OSError, EOFError, ValueError, DaemonError) as e:
            return f"bitd sent an unexpected message and closed the session ({e})"

    def _usable(self) -> None:
        if self._err is not None:
            raise self._err
        if os.getpid() != self._pid:
            raise DaemonError("bitgo.Client: this client belongs to process "
                              f"{self._pid}; make a new Client in this (forked) process")

    # -- the ring -------------------------------------------------------------------------

    def _publish(self, v: int) -> bool:
        """Store the request sequence; wake bitd's session thread if it sleeps (and say so:
        the answer then comes a wake-up later than usual)."""
        self._pub.store(v)
        if self._w[_SERVER_SLEEPING]:
            _sys.futex_wake(self._addr_req)
            return True
        return False

    def _wait(self, seq: int, what: str, expect: int, t0: int) -> int:
        """Return when resp_seq != seq, the nanoseconds since t0 (when the request was
        published); DaemonError (the session closed) when the daemon is gone or the call
        timed out. ``expect`` is what calls like this one have recently taken: the client
        spins (yielding its core) for up to twice that, and then sleeps on the futex."""
        w = self._w
        budget = (_SPIN_FLOOR_NS if expect > _SPIN_CEIL_NS
                  else min(2 * expect + _SPIN_FLOOR_NS, _SPIN_CEIL_NS))
        while w[_RESP_SEQ] == seq:
            if _now() - t0 > budget:
                break
            _sched_yield()
        else:
            return _now() - t0
        slice_ns = _FIRST_SLICE_NS
        flag = self._sleep_flag
        while True:
            flag.store(1)  # then re-check: a full barrier between the two (PROTOCOL.md 4)
            if w[_RESP_SEQ] != seq:
                w[_CLIENT_SLEEPING] = 0
                break
            _sys.futex_wait(self._addr_resp, seq, slice_ns)
            slice_ns = _SLICE_NS
            w[_CLIENT_SLEEPING] = 0
            if w[_RESP_SEQ] != seq:
                break
            why = self._dead()
            if why is not None:
                raise self._fail(f"bitd (pid {self.server_pid}) during {what}: {why}",
                                 gone=True)
            if self._call_timeout_ns is not None and _now() - t0 > self._call_timeout_ns:
                raise self._fail(f"bitd (pid {self.server_pid}) did not answer {what} within "
                                 f"{self._call_timeout_ns / 1e9:g} s; the session is closed")
        return _now() - t0

    def _settle(self) -> None:
        """Before touching the ring or the data area (caller holds the lock): refuse a failed
        client, and if an earlier call was interrupted (KeyboardInterrupt, another exception
        while it waited) wait for its answer first, so that answers and calls stay paired."""
        if self._err is not None:
            raise self._err
        seq = self._inflight
        if seq is not None:
            if self._w[_RESP_SEQ] == seq:
                self._wait(seq, "an interrupted call", _SPIN_CEIL_NS, _now())
            # an interrupt during the futex sleep left the sleeping flag set: clear it, or
            # bitd would wake us after every answer
            self._w[_CLIENT_SLEEPING] = 0
            self._inflight = None
            got = self._w[_RESP_SEQ]
            if got != (seq + 1) & 0xFFFFFFFF:
                raise self._fail(f"bitd: response sequence {got} after request {seq + 1} "
                                 f"(protocol error)")
            self._seq = got

    def _round_trip(self, seq: int, what: str) -> int:
        """Publish request seq (already in its slot), wait, check the sequence; return the
        slot offset."""
        t0 = _now()
        woke = self._publish((seq + 1) & 0xFFFFFFFF)
        self._ewma = _ewma(self._ewma, self._finish(seq, what, self._ewma, t0, woke))
        return self._slot_offs[seq % self._nslots]

    def _finish(self, seq: int, what: str, expect: int, t0: int,
                woke: bool) -> Optional[int]:
        """The second half of a round trip, after request seq was published at t0 (waking
        bitd if ``woke``): wait for its answer, check the sequence, and return the
        nanoseconds since t0, or None when bitd had to be woken (its wake-up comes on top of
        the usual wait, so the client spins the longest it does, and the wait says nothing
        about calls like this one). An exception other than DaemonError while waiting (a
        KeyboardInterrupt) leaves the call in flight: the next call waits for its answer."""
        if woke:
            expect = _SPIN_CEIL_NS
        if self._w[_RESP_SEQ] == seq:
            try:
                d = self._wait(seq, what, expect, t0)
            except DaemonError:
                raise
            except BaseException:
                self._inflight = seq
                raise
        else:
            d = _now() - t0
        got = self._w[_RESP_SEQ]
        if got != (seq + 1) & 0xFFFFFFFF:
            raise self._fail(f"bitd: response sequence {got} after request {seq + 1} "
                             f"(protocol error)")
        self._seq = got
        return None if woke else d

    def _call(self, req: bytes, op: int) -> Any:
        """One control request (caller holds the lock): the result, or RequestError."""
        self._usable()
        self._settle()
        if len(req) > SLOT_REQ_CAP:
            raise ValueError(f"bitd {_OP_NAMES[op]}: request of {len(req)} bytes exceeds a "
                             f"slot's {SLOT_REQ_CAP} (a name or list too long?)")
        seq = self._seq
        so = self._slot_offs[seq % self._nslots]
        mm = self._mm
        mm[so + SLOT_REQ_OFF: so + SLOT_REQ_OFF + len(req)] = req
        self._w[so >> 2] = len(req)
        self._round_trip(seq, _OP_NAMES[op])
        return self._response(so, op)

    def _response(self, so: int, op: int) -> Any:
        n = self._w[(so + 8) >> 2]
        if n > SLOT_RESP_CAP:
            raise self._fail(f"bitd: response length {n} exceeds a slot's {SLOT_RESP_CAP} "
                             f"(protocol error)")
        raw = self._mm[so + SLOT_RESP_OFF: so + SLOT_RESP_OFF + n]
        try:
            resp = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        except Exception as e:  # msgpack raises several types
            raise self._fail(f"bitd: undecodable {_OP_NAMES[op]} response ({e})") from None
        if (not isinstance(resp, list) or len(resp) != 3 or not isinstance(resp[0], int)
                or not isinstance(resp[1], str)):
            raise self._fail(f"bitd: {_OP_NAMES[op]} response {resp!r:.200} is not "
                             f"[status, msg, result] (protocol error)")
        st, msg, result = resp
        if st != 0:
            if st in (12, 14):
                raise DaemonError(f"bitd {_OP_NAMES[op]}: {msg} ({STATUS_NAMES[st]})",
                                  status=st)
            raise RequestError(_OP_NAMES[op], st, msg)
        return result

    def _control(self, op: int, args: Optional[dict] = None) -> Any:
        req = msgpack.packb([op] if args is None else [op, args], use_bin_type=True)
        with self._lock:
            self._flush_frees()
            return self._call(req, op)

    def _flush_frees(self) -> None:
        while self._pending_free and self._err is None:
            lid = self._pending_free.popleft()
            try:
                self._call(msgpack.packb([OP_FREE, {"id": lid}]), OP_FREE)
            except RequestError:
                pass
            self._layers.pop(lid, None)

    # -- control operations ---------------------------------------------------------------

    def ping(self) -> None:
        """One round trip."""
        self._control(OP_PING)

    def hello(self) -> dict:
        """The handshake reply again (session id, region geometry, limits)."""
        return self._control(OP_HELLO)

    def stats(self) -> dict:
        """This session's and the daemon's figures (PROTOCOL.md 6.4)."""
        return self._control(OP_STATS)

    def lookup(self, name: str) -> dict:
        """A layer the daemon loaded from a pack file (``bitd serve --pack``)."""
        info = self._control(OP_LOOKUP, {"name": name})
        self._layers[int(info["id"])] = info
        return info

    def free(self, layer_id: int) -> None:
        """Free a layer this client registered."""
        self._control(OP_FREE, {"id": int(layer_id)})
        self._layers.pop(int(layer_id), None)

    def free_later(self, layer_id: int) -> None:
        """Free a layer at the next control call (safe from finalizers and any thread)."""
        self._pending_free.append(int(layer_id))

    def layer(self, layer_id: int) -> dict:
        """The layer map bitd returned for a layer of this session."""
        return self._layers[int(layer_id)]

    def register(self, format: str, out_features: int, in_features: int,
                 weights: torch.Tensor, scales: Optional[torch.Tensor] = None,
                 bias: Optional[torch.Tensor] = None, *, packed: bool = False,
                 act: Optional[str] = None, scale: Optional[str] = None, codebook=None,
                 name: str = "") -> dict:
        """Upload a layer in chunks through the data area and return bitd's layer map
        (``id``, ``format``, ``act``, ``scale``, ``out``, ``in``, ``bias``, ``bytes``).

        ``weights``: with ``packed``, the uint8 blob of the format's layout
        (:func:`bitgo.reference.pack`); else logical weights [out, in]: int8 for the integer
        formats, float32 for ``f32``, bfloat16 for ``bf16``. ``scales``: float32, as many as
        the scale granularity needs; ``bias``: ``out_features`` float32 values or None.
        """
        wt = _flat(weights, "weights")
        if packed:
            if wt.dtype != torch.uint8:
                raise TypeError(f"register: packed weights must be uint8, got {wt.dtype}")
        elif format == "f32":
            wt = wt.to(torch.float32)
        elif format == "bf16":
            wt = wt.to(torch.bfloat16)
        elif wt.dtype != torch.int8:
            if wt.is_floating_point() or wt.dtype == torch.bool:
                raise TypeError(f"register: logical {format} weights must be an integer tensor "
                                f"(int8 values), got {wt.dtype}")
            wt = wt.to(torch.int8)
        sc = None if scales is None else _flat(scales, "scales").to(torch.float32)
        bi = None if bias is None else _flat(bias, "bias").to(torch.float32)
        nbytes = wt.numel() * wt.element_size()
        args: Dict[str, Any] = {"format": str(format), "out": int(out_features),
                                "in": int(in_features), "bias": bi is not None,
                                "packed": bool(packed), "weights_bytes": nbytes}
        if name:
            args["name"] = name
        if packed:
            args["layout"] = reference.LAYOUT
        if act is not None:
            args["act"] = str(act)
        if scale is not None:
            args["scale"] = str(scale)
        if codebook is not None:
            args["codebook"] = [int(c) for c in codebook]
        begin = self._control(OP_BEGIN, args)
        try:
            upload = int(begin["upload"])
            want_s, want_b = int(begin["scales"]), int(begin["bias"])
        except (TypeError, KeyError, ValueError):
            raise self._fail(f"bitd: begin result {begin!r:.200} (protocol error)") from None
        try:
            ns = 0 if sc is None else sc.numel()
            if ns != want_s:
                raise ValueError(f"register {name or format}: {ns} scales given, the layer "
                                 f"({format} {out_features}x{in_features}, scale "
                                 f"{scale or 'default'}) has {want_s}")
            if (0 if bi is None else bi.numel()) != want_b:
                raise ValueError(f"register {name or format}: bias has "
                                 f"{0 if bi is None else bi.numel()} values, want {want_b}")
            for part, t in (("weights", wt), ("scales", sc), ("bias", bi)):
                if t is not None and t.numel():
                    self._upload(upload, part, t)
            info = self._control(OP_COMMIT, {"upload": upload})
        except BaseException:
            if self._err is None:
                try:
                    self._control(OP_ABORT, {"upload": upload})
                except (RequestError, DaemonError):
                    pass
            raise
        self._layers[int(info["id"])] = info
        return info

    def _upload(self, upload: int, part: str, t: torch.Tensor) -> None:
        esize = t.element_size()
        per = max(self._data_size // esize // 64 * 64, 1)  # elements per chunk
        total = t.numel()
        for start in range(0, total, per):
            cnt = min(per, total - start)
            req = msgpack.packb([OP_UPLOAD, {"upload": upload, "part": part,
                                             "at": start * esize, "off": 0,
                                             "len": cnt * esize}])
            with self._lock:
                self._usable()
                self._settle()
                dst = torch.frombuffer(self._mm, dtype=t.dtype, count=cnt,
                                       offset=self._data_off)
                dst.copy_(t[start: start + cnt])
                del dst
                self._call(req, OP_UPLOAD)

    # -- forward --------------------------------------------------------------------------

    def forward(self, layer_id: int, x: torch.Tensor, *, timed: bool = False):
        """y = x W^T (+ b) for a registered layer. ``x`` is [..., in] float32, bfloat16 or
        float16, contiguous, on the CPU; y is [..., out] in x's dtype (a new tensor). With
        ``timed``, returns (y, handler_ns): the nanoseconds bitd spent computing (summed
        over the calls when the tokens had to be split)."""
        info = self._layers.get(layer_id)
        if info is None:
            raise ValueError(f"bitgo.Client.forward: layer {layer_id} is not registered with "
                             f"this client")
        k, m = info["in"], info["out"]
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"forward: x must be a torch.Tensor, got {type(x).__name__}")
        reference.check_input(x, k, "forward", "x", "the layer's in_features")
        y, ns = self._forward(layer_id, x, m)
        return (y, ns) if timed else y

    def _forward(self, lid: int, x: torch.Tensor, m: int) -> Tuple[torch.Tensor, int]:
        """The hot path: x already checked (contiguous CPU float32/bfloat16/float16 with the
        layer's in_features)."""
        if self._pending_free:
            with self._lock:
                self._flush_frees()
        dt = x.dtype
        if dt is torch.float16:
            y, ns = self._forward(lid, x.to(torch.float32), m)
            return y.to(torch.float16), ns
        key = (x.shape, dt, m)
        with self._lock:
            self._settle()
            ent = self._views.get(key)
            if ent is None:
                ent = self._make_views(lid, x, m)
            if ent is not None:
                return self._forward_one(lid, x, ent)
        return self._forward_split(lid, x, m)

    def _forward_view(self, lid: int, x: torch.Tensor, ent: list) -> torch.Tensor:
        """The fastest path, for a caller that checked x and found its views with
        ``self._views.get((x.shape, x.dtype, out_features))``."""
        if self._pending_free:
            with self._lock:
                self._flush_frees()
        with self._lock:
            if self._err is not None or self._inflight is not None:
                self._settle()
            return self._forward_one(lid, x, ent)[0]

    def _forward_one(self, lid: int, x: torch.Tensor, ent: list) -> Tuple[torch.Tensor, int]:
        """One forward request through cached views (caller holds the lock, settled)."""
        t_in = _now()
        xv, ov, n, code, xlen, ooff, olen, _, oshape, dt = ent
        if x.requires_grad:  # else copy_ would make the cached view part of autograd graphs
            x = x.detach()
        xv.copy_(x)
        seq = self._seq
        so = self._slot_offs[seq % self._nslots]
        mm = self._mm
        _FWD.pack_into(mm, so + SLOT_REQ_OFF, 0x98, 8, 0xCF, lid, 0xCE, n, code, 0xCF, 0,
                       0xCF, xlen, 0xCF, ooff, 0xCF, olen)
        self._w[so >> 2] = _FWD_LEN
        t0 = _now()
        woke = self._publish((seq + 1) & 0xFFFFFFFF)
        try:
            y = torch.empty(oshape, dtype=dt)  # while bitd computes
        except BaseException:
            self._inflight = seq
            raise
        ent[7] = _ewma(ent[7], self._finish(seq, "forward", ent[7], t0, woke))
        if self._w[(so + 8) >> 2] == 12 and mm[so + 2048: so + 2052] == _FWD_OK:
            ns = _U64BE.unpack_from(mm, so + 2052)[0]
            self.forward_calls += 1
            self.handler_ns += ns
        else:
            self._response(so, OP_FORWARD)  # raises the daemon's error
            raise self._fail("bitd: forward succeeded with an unexpected result "
                             "(protocol error)")
        y.copy_(ov)
        self.client_ns += _now() - t_in
        return y, ns

    def _make_views(self, lid: int, x: torch.Tensor, m: int) -> Optional[tuple]:
        """Cached views of the data area for this input shape: x at offset 0, the output
        64-byte aligned after it. None when the call does not fit one request. The caller
        holds the lock."""
        esize = x.element_size()
        n = x.numel() // x.shape[-1] if x.shape[-1] else 0
        xlen = x.numel() * esize
        ooff = _align(xlen, 64)
        olen = n * m * esize
        if n < 1 or n > self.max_tokens or ooff + olen > self._data_size:
            return None
        if len(self._views) >= _VIEW_CACHE:
            self._views.clear()
        xv = torch.frombuffer(self._mm, dtype=x.dtype, count=x.numel(),
                              offset=self._data_off).view(x.shape)
        ov = torch.frombuffer(self._mm, dtype=x.dtype, count=n * m,
                              offset=self._data_off + ooff).view(*x.shape[:-1], m)
        # item 7: what calls of this shape recently waited for bitd (its spin budget)
        ent = [xv, ov, n, _DT_CODES[x.dtype], xlen, ooff, olen, _SPIN_FLOOR_NS,
               tuple(ov.shape), x.dtype]
        self._views[(x.shape, x.dtype, m)] = ent
        return ent

    def _forward_split(self, lid: int, x: torch.Tensor, m: int) -> Tuple[torch.Tensor, int]:
        """A call too large for one request: split along tokens (per-token and per-group
        activation scales make tokens independent, so the result is the same)."""
        k = x.shape[-1]
        lead = tuple(x.shape[:-1])
        n = x.numel() // k if k else 0
        if n == 0:
            return x.new_empty(lead + (m,)), 0
        esize = x.element_size()
        per = min(self.max_tokens, (self._data_size - 64) // ((k + m) * esize))
        info = self._layers.get(lid, {})
        if per < 1:
            raise ValueError(f"forward: one token of layer {info.get('name') or lid} needs "
                             f"{(k + m) * esize} bytes, more than the data area's "
                             f"{self._data_size}; make the Client with a larger region_bytes")
        if info.get("act") == "per-tensor":
            raise ValueError(f"forward: {n} tokens of {k} inputs do not fit one call (data area "
                             f"{self._data_size} bytes, at most {per} tokens) and per-tensor "
                             f"activation scales cannot be split; make the Client with a "
                             f"larger region_bytes")
        x2 = x.view(n, k)
        outs, total = [], 0
        for s in range(0, n, per):
            y, ns = self._forward(lid, x2[s: s + per], m)
            outs.append(y)
            total += ns
        return torch.cat(outs).view(lead + (m,)), total


# ---------------------------------------------------------------------------------------------
# Socket frames


def _send_frame(s: socket.socket, body: bytes) -> None:
    if len(body) > MAX_FRAME:
        raise ValueError(f"frame of {len(body)} bytes exceeds {MAX_FRAME}")
    s.sendall(_U32LE.pack(len(body)) + body)


def _recv_exact(s: socket.socket, n: int, fds: list) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        msg, got, flags, _ = socket.recv_fds(s, n - len(buf), 4, socket.MSG_CMSG_CLOEXEC)
        fds.extend(got)
        if flags & socket.MSG_CTRUNC:
            raise ValueError("ancillary data truncated")
        if not msg:
            raise EOFError("bitd closed the connection mid-frame")
        buf += msg
    return bytes(buf)


def _recv_frame(s: socket.socket) -> Tuple[bytes, list]:
    fds: list = []
    try:
        n = _U32LE.unpack(_recv_exact(s, 4, fds))[0]
        if n > MAX_FRAME:
            raise ValueError(f"frame of {n} bytes exceeds {MAX_FRAME}")
        return _recv_exact(s, n, fds), fds
    except BaseException:
        for f in fds:
            os.close(f)
        raise


def _unpack_map(body: bytes, what: str) -> dict:
    try:
        rep = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as e:
        raise DaemonError(f"bitd: undecodable {what} ({e})") from None
    if not isinstance(rep, dict):
        raise DaemonError(f"bitd: {what} is not a map (protocol error)")
    return rep


def _flat(t: Any, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"register: {what} must be a torch.Tensor, got {type(t).__name__}")
    return t.detach().cpu().contiguous().reshape(-1)


# ---------------------------------------------------------------------------------------------
# The process-wide default client, fork and exit handling

_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()
_default: Optional[Client] = None
_default_lock = threading.Lock()


def default_client() -> Client:
    """The process's shared Client (made on first use, as ``Client()`` would; a new one after
    the previous one was closed or failed)."""
    global _default
    c = _default
    if c is not None and not c.closed:
        return c
    with _default_lock:
        if _default is None or _default.closed:
            _default = Client()
        return _default


def close_default_client() -> None:
    """Close the default client (and its private daemon, if it started one)."""
    global _default
    with _default_lock:
        c, _default = _default, None
    if c is not None:
        c.close()


def _after_fork_in_child() -> None:
    global _default
    _default = None
    for c in list(_clients):
        c._err = DaemonError(f"bitgo.Client: this client belongs to process {c._pid}; make a "
                             f"new Client in this (forked) process")
        c._daemon = None  # the parent's child, not ours to stop
        c._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _close_all() -> None:
    for c in list(_clients):
        try:
            c.close()
        except Exception:
            pass
