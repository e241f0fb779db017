"""The exceptions and warnings asynctrace raises.

Everything derives from :class:`AsyncTraceError`, so ``except asynctrace.AsyncTraceError``
catches every failure that is ours. Messages say what went wrong and what to do.
"""

from __future__ import annotations

__all__ = [
    "AsyncTraceError",
    "AsyncTraceWarning",
    "CaptureError",
    "OptionError",
    "TraceFormatError",
    "UnexpectedSyncError",
]


class AsyncTraceError(Exception):
    """Base class of every exception raised by asynctrace."""


class TraceFormatError(AsyncTraceError):
    """A trace or records file cannot be read: wrong format, truncated, corrupt or too large.

    The message names the file and the reason.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class CaptureError(AsyncTraceError):
    """A capture session was used wrongly (for example ``step()`` outside a session)."""


class OptionError(CaptureError, ValueError, TypeError):
    """An option or argument has a wrong value or an unknown name (``trace(detect_syncs="x")``,
    ``expect_syncs(max=-1)``, a callback given an option it cannot use).

    Also a :class:`ValueError` and a :class:`TypeError`, which is what such a mistake raised
    before it had its own class, so existing ``except`` clauses keep working.
    """


class UnexpectedSyncError(AsyncTraceError):
    """More host-device synchronizations happened than :func:`asynctrace.expect_syncs` allowed."""


class AsyncTraceWarning(UserWarning):
    """Something asynctrace could not do, reported without stopping the user's program."""
