"""deferred_signals: Python-level signal handlers run after the section, once, in order."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from asynctrace.capture.signals import deferred_signals

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="POSIX signals")


@pytest.fixture
def handlers() -> Iterator[list[int]]:
    seen: list[int] = []

    def note(signum: int, frame: Any) -> None:
        seen.append(signum)

    saved = {s: signal.signal(s, note) for s in (signal.SIGUSR1, signal.SIGUSR2)}
    yield seen
    for s, h in saved.items():
        signal.signal(s, h)


def _raise(sig: int) -> None:
    os.kill(os.getpid(), sig)


def test_handlers_run_after_the_section_once_each_in_order(handlers: list[int]) -> None:
    with deferred_signals():
        _raise(signal.SIGUSR2)
        _raise(signal.SIGUSR1)
        _raise(signal.SIGUSR2)
        assert handlers == []
    assert handlers == [signal.SIGUSR2, signal.SIGUSR1]
    _raise(signal.SIGUSR1)  # the handler is back in place
    assert handlers[-1] == signal.SIGUSR1


def test_kept_signals_are_not_deferred(handlers: list[int]) -> None:
    with deferred_signals(keep=(signal.SIGUSR1,)):
        _raise(signal.SIGUSR1)
        assert handlers == [signal.SIGUSR1]


def test_a_deferred_handler_raises_after_the_section() -> None:
    def boom(signum: int, frame: Any) -> None:
        raise RuntimeError("worker died")

    saved = signal.signal(signal.SIGUSR1, boom)
    try:
        done = []
        with pytest.raises(RuntimeError, match="worker died"), deferred_signals():  # noqa: PT012
            _raise(signal.SIGUSR1)
            done.append("section")
        assert done == ["section"]
        # the section's own error wins over the handler's ordinary one, which becomes context
        with pytest.raises(ValueError, match="mine") as info, deferred_signals():  # noqa: PT012
            _raise(signal.SIGUSR1)
            raise ValueError("mine")
        assert isinstance(info.value.__context__, RuntimeError)
    finally:
        signal.signal(signal.SIGUSR1, saved)


def test_an_interrupt_from_a_deferred_handler_beats_an_ordinary_error() -> None:
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    saved = signal.signal(signal.SIGUSR1, interrupt)
    try:
        with pytest.raises(KeyboardInterrupt), deferred_signals():  # noqa: PT012
            _raise(signal.SIGUSR1)
            raise ValueError("mine")
    finally:
        signal.signal(signal.SIGUSR1, saved)


def test_nested_sections_defer_to_the_outer_end(handlers: list[int]) -> None:
    with deferred_signals():
        with deferred_signals():
            _raise(signal.SIGUSR1)
        assert handlers == []
    assert handlers == [signal.SIGUSR1]


def test_outside_the_main_thread_nothing_is_changed(handlers: list[int]) -> None:
    seen: list[object] = []

    def other() -> None:
        with deferred_signals():
            seen.append(signal.getsignal(signal.SIGUSR1))

    t = threading.Thread(target=other)
    t.start()
    t.join(10)
    (handler,) = seen
    assert getattr(handler, "__name__", "") == "note"
