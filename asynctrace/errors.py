"""The exceptions and warnings asynctrace raises.

Everything derives from :class:`AsyncTraceError`, so ``except asynctrace.AsyncTraceError``
catches every failure that is ours. Messages say what went wrong and what to do.
"""

from __future__ import annotations

__all__ = [
    "AsyncTraceError",
    "AsyncTraceWarning",
    "CaptureError",
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


class UnexpectedSyncError(AsyncTraceError):
    """More host-device synchronizations happened than :func:`asynctrace.expect_syncs` allowed."""


class AsyncTraceWarning(UserWarning):
    """Something asynctrace could not do, reported without stopping the user's program."""
