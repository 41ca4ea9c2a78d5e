"""bitgo's exceptions."""

__all__ = ["DaemonError"]


class DaemonError(RuntimeError):
    """bitd died, refused the connection, broke the protocol, or did not answer in time.

    The message names what failed and, for a daemon bitgo started itself, ends with the tail of
    its stderr. Bad inputs (shapes, dtypes, non-finite values) are ValueError/TypeError instead.
    """
