"""An on-demand window whose profiler cannot start never breaks the job: a warning, and the
steps go on being recorded, every one of them."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

import asynctrace
from asynctrace.capture import profiler
from asynctrace.records import read_records

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGUSR2"), reason="POSIX signals")


def test_a_window_whose_profiler_fails_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: object, *args: object, **kwargs: object) -> None:
        raise RuntimeError("profiler refused")

    monkeypatch.setattr(profiler.DeepProfiler, "start", refuse)
    before = signal.getsignal(signal.SIGUSR2)

    def job() -> asynctrace.Session:
        with asynctrace.trace(
            "job", dir=tmp_path, detect_syncs="off", print_summary=False
        ) as session:
            for i in range(40):
                session.step()
                if i == 3:
                    os.kill(os.getpid(), signal.SIGUSR2)
        return session

    with pytest.warns(asynctrace.AsyncTraceWarning, match="could not start"):
        session = job()
    assert signal.getsignal(signal.SIGUSR2) is before
    steps = read_records(session.records_path).steps  # type: ignore[arg-type]
    assert [s.step for s in steps] == list(range(40))
    assert not list(tmp_path.rglob("*.pt.trace.json*"))


def test_a_session_puts_back_the_sigusr2_handler_it_found(tmp_path: Path) -> None:
    # the session's end defers signal handlers while it writes; its own USR2 handler still
    # leaves with it
    before = signal.getsignal(signal.SIGUSR2)
    with asynctrace.trace("job", dir=tmp_path, detect_syncs="off", print_summary=False) as s:
        assert signal.getsignal(signal.SIGUSR2) is not before
        s.step()
    assert signal.getsignal(signal.SIGUSR2) is before
