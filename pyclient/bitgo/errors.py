"""bitgo's exceptions."""

from __future__ import annotations

__all__ = ["DaemonError", "RequestError", "STATUS_NAMES"]

STATUS_NAMES = {
    0: "ok", 1: "bad_request", 2: "unknown_op", 3: "version", 4: "out_of_range",
    5: "not_found", 6: "denied", 7: "limit", 8: "invalid", 9: "shape", 10: "non_finite",
    11: "upload", 12: "shutting_down", 13: "unsupported", 14: "internal",
}
"""bitd's status codes (ipc/PROTOCOL.md section 7)."""


class DaemonError(RuntimeError):
    """bitd died, refused the connection, broke the protocol, or did not answer in time.

    The message names what failed and, for a daemon bitgo started itself, ends with the tail of
    its stderr. A client that raised it once is closed: every later call raises it again
    (layers registered with that daemon are gone with its session). Bad inputs (shapes,
    dtypes, non-finite values) are ValueError/TypeError instead.

    ``status`` is bitd's status code when the daemon answered with one (12 shutting_down,
    14 internal), else None.
    """

    def __init__(self, msg: str, status=None):
        super().__init__(msg)
        self.status = status


class RequestError(ValueError):
    """bitd refused one request (a bad shape, a non-finite activation, a limit, a format it
    does not serve...). The session stays usable. ``status`` is bitd's code,
    ``status_name`` its name and ``op`` the operation."""

    def __init__(self, op: str, status: int, msg: str):
        name = STATUS_NAMES.get(status, f"status {status}")
        super().__init__(f"bitd {op}: {msg} ({name})")
        self.op = op
        self.status = status
        self.status_name = name
        self.msg = msg
