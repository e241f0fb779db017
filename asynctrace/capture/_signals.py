"""Deferring Python-level signal handlers around a section that must not be cut in two.

A Python signal handler runs in the main thread between two bytecodes, wherever that thread
is, and whatever it raises comes out there. torch's DataLoader installs one for ``SIGCHLD``
that raises ``RuntimeError("DataLoader worker … exited unexpectedly")``: arriving while a
session finishes its records file, it aborted the writer and left a ``.tmp`` with only the
header. :func:`deferred_signals` swaps every Python-level handler (but those in ``keep``) for
one that only notes the signal, and on leaving the section puts the handlers back and runs
each noted one once, in arrival order: the handler still runs, and raises, after the section.

Handlers set from C (``SIG_DFL``, ``SIG_IGN``, a C library's own) are not Python callables and
are left alone; outside the main thread nothing is deferred, since no Python handler can run
there. Nested sections work: the inner one notes the signal for the outer one.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Collection
from types import FrameType
from typing import Any

__all__ = ["deferred_signals"]


class deferred_signals:
    """Context manager: Python signal handlers (but ``keep``'s) run after the section.

    What a deferred handler raises comes out of the ``with`` once the section is done; where
    the section itself raised, that exception wins, unless the handler's is an interrupt
    (``KeyboardInterrupt``, ``SystemExit``) and the section's an ordinary error.
    """

    def __init__(self, *, keep: Collection[int] = ()) -> None:
        self._keep = frozenset(int(s) for s in keep)
        self._saved: dict[int, Any] = {}
        #: signals that arrived during the section, in order, each once
        self.pending: list[int] = []

    def _note(self, signum: int, frame: FrameType | None) -> None:
        if signum not in self.pending:
            self.pending.append(signum)

    def __enter__(self) -> deferred_signals:
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in signal.valid_signals():
            if sig in self._keep:
                continue
            try:
                handler = signal.getsignal(sig)
            except (OSError, ValueError):
                continue
            if not callable(handler):
                continue
            try:
                signal.signal(sig, self._note)
            except (OSError, ValueError, RuntimeError):
                continue
            self._saved[sig] = handler
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        saved, self._saved = self._saved, {}
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        raised: BaseException | None = None
        for sig in self.pending:
            handler = saved.get(sig)
            if handler is None:
                continue
            try:
                handler(sig, sys._getframe())
            except BaseException as e:
                if raised is None:
                    raised = e
        self.pending = []
        if raised is None:
            return
        if exc is None or (isinstance(exc, Exception) and not isinstance(raised, Exception)):
            raise raised
        # the section's own exception goes on; the handler's is its context
        if exc.__context__ is None:
            exc.__context__ = raised
