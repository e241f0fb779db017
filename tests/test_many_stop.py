"""How a signal stops the local map (``asynctrace.files._pool``): raised only where the map can
unwind (while it waits), held otherwise until the next check, never lost, and then what it
would have done: the caller's own handler runs (here, in this process), handlers are restored."""

from __future__ import annotations

import os
import signal

import pytest

from asynctrace.errors import OptionError
from asynctrace.files._pool import _signals_stop_the_map, _Stopped


def _two_signals_outside_the_wait(sig: int) -> None:
    with _signals_stop_the_map() as stop:
        os.kill(os.getpid(), sig)  # while starting a worker, say: held
        assert stop.signum == sig
        os.kill(os.getpid(), sig)  # a second one while stopping: ignored


def _one_in_the_wait(sig: int) -> None:
    with _signals_stop_the_map() as stop:
        try:
            with stop.waiting():
                os.kill(os.getpid(), sig)
                for _ in range(10**6):  # the handler runs at the next bytecode
                    pass
        except _Stopped:
            raise  # as the map's finally lets it out
        raise AssertionError("not raised in the wait")


def _ctrl_c_after_the_last_wait() -> None:
    with _signals_stop_the_map():
        os.kill(os.getpid(), signal.SIGINT)  # held: no check came, the map ended


def test_held_outside_the_wait_then_the_callers_handler_runs() -> None:
    seen: list[int] = []

    def mine(signum: int, frame: object) -> None:
        seen.append(signum)

    old = signal.signal(signal.SIGTERM, mine)
    try:
        with pytest.raises(OptionError, match="stopped by SIGTERM"):
            _two_signals_outside_the_wait(signal.SIGTERM)
        assert seen == [signal.SIGTERM]  # the caller's handler, once, after the cleanup
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, old)


def test_raised_in_the_wait() -> None:
    old = signal.signal(signal.SIGHUP, lambda s, f: None)
    try:
        with pytest.raises(OptionError, match="stopped by SIGHUP"):
            _one_in_the_wait(signal.SIGHUP)
    finally:
        signal.signal(signal.SIGHUP, old)


def test_ctrl_c_is_never_lost() -> None:
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        _ctrl_c_after_the_last_wait()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_signal_stays_ignored() -> None:
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with _signals_stop_the_map() as stop:
            os.kill(os.getpid(), signal.SIGHUP)
            assert stop.signum is None
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, old)
