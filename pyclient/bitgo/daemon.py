"""The embedded default: a private ``bitd serve`` that bitgo starts as a child process.

The child gets a parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGTERM)``), so it never
outlives the Python process (ollama's orphaned runners are the failure this avoids); it
runs in its own session (a Ctrl-C in the terminal reaches Python, which then stops it); it
listens on a socket in a private temporary directory; and the last lines of its stderr are
kept for error messages.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import List, Optional

from . import _sys
from .errors import DaemonError

__all__ = ["find_bitd", "EmbeddedDaemon", "default_socket_path"]

TAIL_LINES = 40
TAIL_LINE_BYTES = 1000


def default_socket_path() -> str:
    """bitd's default socket: ``$XDG_RUNTIME_DIR/bitd.sock``, else ``/tmp/bitd-$UID.sock``."""
    d = os.environ.get("XDG_RUNTIME_DIR")
    if d:
        return os.path.join(d, "bitd.sock")
    return f"/tmp/bitd-{os.getuid()}.sock"


def _candidates() -> List[tuple]:
    here = Path(__file__).resolve().parent
    out = []
    env = os.environ.get("BITD_BIN")
    if env:
        out.append(("BITD_BIN", env))
    on_path = shutil.which("bitd")
    if on_path:
        out.append(("PATH", on_path))
    out.append(("the package", str(here / "_bin" / "bitd")))
    out.append(("the repository build", str(here.parent.parent / "bin" / "bitd")))
    return out


def find_bitd() -> str:
    """The bitd binary: ``$BITD_BIN``, else ``bitd`` on PATH, else the package's
    ``_bin/bitd``, else the repository's build output ``bin/bitd``. DaemonError lists where
    it looked."""
    looked = []
    for where, path in _candidates():
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
        looked.append(f"{path} ({where})")
        if where == "BITD_BIN":
            raise DaemonError(f"BITD_BIN={path}: not an executable file")
    raise DaemonError("no bitd binary found; looked at " + ", ".join(looked) + ". Build it "
                      "with `make build` (or `go build -o bin/bitd ./cmd/bitd`) in the "
                      "repository, set BITD_BIN, or run `bitd serve` and set BITD_SOCKET")


class _Tail:
    """The last lines of a stream, read by a daemon thread (bounded memory)."""

    def __init__(self, stream, name: str):
        self._lines = collections.deque(maxlen=TAIL_LINES)
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(stream,), name=name,
                                        daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        try:
            for raw in iter(stream.readline, b""):
                line = raw[:TAIL_LINE_BYTES].decode("utf-8", "replace").rstrip("\n")
                with self._lock:
                    self._lines.append(line)
        except (OSError, ValueError):
            pass
        finally:
            try:
                stream.close()
            except OSError:
                pass

    def text(self, wait: float = 0.0) -> str:
        if wait:
            self._thread.join(wait)  # let a dying daemon's last words arrive
        with self._lock:
            return "\n".join(self._lines)


# PR_SET_PDEATHSIG fires when the *thread* that forked the child ends, not the process. A
# client made from a short-lived thread (a thread pool's worker) would see its daemon killed
# with that thread, so children are started from one long-lived launcher thread.
_launcher_lock = threading.Lock()
_launcher: Optional["_Launcher"] = None


class _Launcher:
    def __init__(self):
        self._cv = threading.Condition()
        self._job = None
        self._thread = threading.Thread(target=self._run, name="bitgo-bitd-launcher",
                                         daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._job is None:
                    self._cv.wait()
                fn, box, done = self._job
                self._job = None
            try:
                box.append(("ok", fn()))
            except BaseException as e:  # handed back to the caller
                box.append(("err", e))
            done.set()

    def run(self, fn):
        box: list = []
        done = threading.Event()
        with self._cv:
            while self._job is not None:
                self._cv.wait(0.01)
            self._job = (fn, box, done)
            self._cv.notify_all()
        done.wait()
        kind, val = box[0]
        if kind == "err":
            raise val
        return val


def _forget_launcher() -> None:
    global _launcher, _launcher_lock
    _launcher = None  # its thread does not exist in a forked child
    _launcher_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_launcher)


def _spawn(fn):
    global _launcher
    if threading.current_thread() is threading.main_thread():
        return fn()
    with _launcher_lock:
        if _launcher is None:
            _launcher = _Launcher()
    return _launcher.run(fn)


class EmbeddedDaemon:
    """A private ``bitd serve`` child on a private socket.

    ``threads``: the daemon's ``--threads`` (None: every core). ``extra_args`` are appended
    to the command line. Metrics are off (``--metrics-addr ""``), so private daemons never
    compete for the metrics port."""

    def __init__(self, binary: Optional[str] = None, threads: Optional[int] = None,
                 extra_args=(), start_timeout: float = 10.0):
        self.binary = binary or find_bitd()
        self._dir = tempfile.mkdtemp(prefix="bitgo-")
        self.socket_path = os.path.join(self._dir, "bitd.sock")
        args = [self.binary, "serve", "--socket", self.socket_path, "--metrics-addr", ""]
        if threads is not None:
            args += ["--threads", str(int(threads))]
        args += list(extra_args)
        self.args = args
        parent = os.getpid()

        def child_setup():
            _sys.set_pdeathsig(signal.SIGTERM, parent)

        def start():
            return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, close_fds=True,
                                    start_new_session=True, preexec_fn=child_setup)

        try:
            self.proc = _spawn(start)
        except OSError as e:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise DaemonError(f"starting {self.binary} serve: {e}") from e
        self.pid = self.proc.pid
        self._tail = _Tail(self.proc.stderr, f"bitgo-bitd-{self.pid}-stderr")
        self._stopped = False
        try:
            self._wait_ready(start_timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            code = self.proc.poll()
            if code is not None:
                raise DaemonError(f"bitd (pid {self.pid}) exited with {self._exit_text(code)} "
                                  f"before listening on {self.socket_path}" + self.tail_text())
            if os.path.exists(self.socket_path):
                return  # bound; the client retries a refused connect until it listens
            if time.monotonic() > deadline:
                raise DaemonError(f"bitd (pid {self.pid}) did not listen on {self.socket_path} "
                                  f"within {timeout:g} s" + self.tail_text())
            time.sleep(0.005)

    @staticmethod
    def _exit_text(code: int) -> str:
        if code < 0:
            try:
                return f"signal {signal.Signals(-code).name}"
            except ValueError:
                return f"signal {-code}"
        return f"status {code}"

    def alive(self, wait: float = 0.0) -> bool:
        """Whether the process runs. With ``wait``, give a process that is exiting (its
        sockets already closed) that long to become reapable, so its exit status is known."""
        if wait and self.proc.poll() is None:
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                pass
        return self.proc.poll() is None

    def exit_text(self) -> str:
        """'' while running, else how it ended ("signal SIGKILL", "status 1")."""
        code = self.proc.poll()
        return "" if code is None else self._exit_text(code)

    def tail(self, wait: float = 0.0) -> str:
        return self._tail.text(wait)

    def tail_text(self, wait: float = 0.2) -> str:
        """The stderr tail formatted for an error message ('' when empty)."""
        t = self.tail(wait if not self.alive() else 0.0)
        return f"\n--- last lines of bitd's stderr ---\n{t}" if t else " (bitd's stderr was empty)"

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM (bitd drains and exits), then SIGKILL after timeout; remove the socket
        directory. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        try:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    os.kill(self.proc.pid, signal.SIGCONT)  # a stopped daemon must see it
                except OSError:
                    pass
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout)
        except OSError:
            pass
        shutil.rmtree(self._dir, ignore_errors=True)

    def __repr__(self) -> str:
        state = "running" if self.alive() else self.exit_text()
        return f"EmbeddedDaemon(pid={self.pid}, socket={self.socket_path!r}, {state})"
