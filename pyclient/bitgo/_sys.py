"""Linux system calls the client needs that Python's standard library lacks, through ctypes:
futex wait/wake on a word of a shared mapping, an atomic exchange (a full memory barrier),
and prctl(PR_SET_PDEATHSIG) for the daemon bitgo starts itself.

Only x86_64 and aarch64 Linux are supported (the futex syscall number differs per
architecture); bitd itself is Linux-only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

__all__ = ["futex_wait", "futex_wake", "Exchanger", "set_pdeathsig", "SYS_FUTEX"]

_SYSCALLS = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}
SYS_FUTEX = _SYSCALLS.get(platform.machine().lower())


def check_platform() -> None:
    """OSError unless this is Linux on x86_64 or aarch64 (what the client supports)."""
    if SYS_FUTEX is None or not os.uname().sysname == "Linux":
        raise OSError(f"the bitd client runs on Linux x86_64 and aarch64, not "
                      f"{os.uname().sysname} {platform.machine()}")

# The words live in memory shared between processes: the non-private operations (no
# FUTEX_PRIVATE_FLAG), as PROTOCOL.md section 4 requires.
FUTEX_WAIT = 0
FUTEX_WAKE = 1

PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(None, use_errno=True)  # CDLL releases the GIL around every call
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_prctl = _libc.prctl
_prctl.restype = ctypes.c_int
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                   ctypes.c_ulong]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_timespecs: dict = {}


def _timespec(ns: int) -> _Timespec:
    ts = _timespecs.get(ns)
    if ts is None:
        ts = _Timespec(ns // 1_000_000_000, ns % 1_000_000_000)
        _timespecs[ns] = ts
    return ts


def futex_wait(addr: int, expected: int, timeout_ns: int) -> None:
    """Sleep while the u32 at addr equals expected, at most timeout_ns. Every early return
    (the value differs, a wake-up, EINTR, EAGAIN, the timeout) is fine: callers re-check.
    The GIL is released while it sleeps."""
    _syscall(ctypes.c_long(SYS_FUTEX), ctypes.c_void_p(addr), ctypes.c_int(FUTEX_WAIT),
             ctypes.c_uint32(expected), ctypes.byref(_timespec(timeout_ns)), None,
             ctypes.c_int(0))


def futex_wake(addr: int) -> None:
    """Wake one waiter on the u32 at addr."""
    _syscall(ctypes.c_long(SYS_FUTEX), ctypes.c_void_p(addr), ctypes.c_int(FUTEX_WAKE),
             ctypes.c_int(1), None, None, ctypes.c_int(0))


def _load_exchange():
    """libatomic's __atomic_exchange_4 (a locked xchg on x86: a full barrier), or None."""
    for name in ("libatomic.so.1", ctypes.util.find_library("atomic")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            fn = lib.__atomic_exchange_4
        except (OSError, AttributeError):
            continue
        fn.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int]
        fn.restype = ctypes.c_uint32
        return fn
    return None


_xchg = _load_exchange()
_SEQ_CST = 5


class Exchanger:
    """Store a u32 word with a full memory barrier after it (sequentially consistent), as
    PROTOCOL.md section 4 asks of a publisher and of a waiter announcing its sleep.

    Python's own stores are plain stores; x86 may let a later load pass them, so the peer
    could miss a wake-up. With libatomic (present wherever gcc's runtime is) the store is an
    atomic exchange; without it, a plain store, and a lost race costs the peer's first futex
    slice (2 ms), as the protocol allows for clients without a barrier."""

    __slots__ = ("_words", "_index", "_addr", "barrier")

    def __init__(self, words: memoryview, index: int, addr: int):
        self._words = words
        self._index = index
        self._addr = addr
        self.barrier = _xchg is not None

    def store(self, value: int) -> None:
        if _xchg is not None:
            _xchg(self._addr, value, _SEQ_CST)
        else:
            self._words[self._index] = value


def has_barrier() -> bool:
    return _xchg is not None


def set_pdeathsig(sig: int, parent_pid: int) -> None:
    """In a freshly forked child: deliver sig when the parent (thread) dies; exit at once if
    the parent already died between fork and here. Meant for subprocess's preexec_fn."""
    _prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(70)
