"""Deep windows on demand: ``asynctrace capture DIR|PID --steps N`` and ``kill -USR2 PID``.

A session that writes under ``DIR`` keeps a small **control file**,
``DIR/.asynctrace-control/session.<host>.<pid>.json``: who it is, the step it is at, its step
rate, and the state of the window asked of it. It rewrites the file, and looks for a
**request** (``DIR/.asynctrace-control/request.json``: an id, a start step, a number of
steps, optionally the pids it is for), at most every :data:`POLL_NS` of host time, at a step
boundary (every so many steps, about POLL_NS of them): between two polls a step costs one
integer comparison, shared with the sampled lint. ``SIGUSR2`` (where the
program left it at its default, which would kill the process) makes the next boundary poll
and open a window of :data:`DEFAULT_STEPS` steps at the next step.

The requester (``_commands/capture.py``) picks a start step every session has yet to reach:
the largest of each one's current step plus what it runs in :data:`LEAD_S` seconds, so every
rank of a job opens its window on the same step numbers and the per-rank traces line up. A
session that sees a request whose start it has passed says so in its control file
(``missed``) and opens nothing. One window at a time.

The window is deep mode's :class:`~asynctrace.capture.profiler.DeepProfiler` (one warm-up
step before it, then ``steps`` recorded), writing where deep mode writes, through the
session's own ``trace_written`` (so the annotated copy is written too); the sync lint is held
off during it. A profiler that fails is a warning and the job goes on. A pid file in the
user's temporary folder (``asynctrace-<uid>/<pid>``) names the control folder, for ``capture
PID``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Final

from asynctrace.capture.signals import FlagHandler
from asynctrace.errors import AsyncTraceWarning

if TYPE_CHECKING:
    from asynctrace.capture._clock import StepClock
    from asynctrace.capture.profiler import DeepProfiler

__all__ = [
    "CONTROL_DIR",
    "DEFAULT_STEPS",
    "LEAD_S",
    "POLL_NS",
    "REQUEST_NAME",
    "Trigger",
    "pid_file",
    "read_json",
    "write_json",
]

CONTROL_DIR: Final = ".asynctrace-control"
REQUEST_NAME: Final = "request.json"
#: how often a session looks for a request and says where it is (host time)
POLL_NS: Final = 500_000_000
#: a window's steps when none are given (``kill -USR2``)
DEFAULT_STEPS: Final = 5
#: how far ahead of the furthest session a requested window starts, in its own step time
LEAD_S: Final = 2.0
#: ``StepClock.poll_step`` where no window waits
NEVER: Final = 1 << 62
#: the most steps between two polls (a session of 10^6 steps a second still looks 5 a second)
_MAX_INTERVAL: Final = 200_000


def pid_file(pid: int) -> Path:
    """Where the session of process ``pid`` says which control folder is its."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"asynctrace-{uid}" / str(int(pid))


def write_json(path: Path, obj: Any) -> None:
    """``obj`` as JSON at ``path``, atomically (a reader never sees half a file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    """The JSON object at ``path``; None where it is missing or not (yet) valid."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class Trigger:
    """One session's control file, request polling, SIGUSR2 handler and on-demand window."""

    def __init__(
        self,
        *,
        dir: Path,
        name: str,
        rank: int | None,
        clock: StepClock,
        make_profiler: Callable[[int, int], DeepProfiler | None],
        hold_lint: Callable[[bool], None],
        on_window: Callable[[dict[str, Any]], None],
    ) -> None:
        self.control = Path(dir) / CONTROL_DIR
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.name = name
        self.rank = rank
        self.clock = clock
        self._make_profiler = make_profiler
        self._hold_lint = hold_lint
        self._on_window = on_window
        self.path = self.control / f"session.{_safe(self.host)}.{self.pid}.json"
        self._request_mtime = 0
        self._seen_id: str | None = None
        #: the window asked of this session: id, start, stop, state, traces
        self.window: dict[str, Any] | None = None
        self._profiler: DeepProfiler | None = None
        self._usr2 = False
        self._prev_usr2: Any = None
        # a flag-only handler: left in place by a deferred section (the session's end), so
        # stop() can take it out there
        self._usr2_handler = FlagHandler(self._on_usr2)
        self._usr2_installed = False
        self._rate_step = 0
        self._rate_ns = 0
        self._interval = 1
        # when the control folder was last read and written (host ns): at most every POLL_NS
        self._io_ns = 0
        self.rate = 0.0
        self.started = False

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Publish the control file (OSError where the folder cannot be written)."""
        self.control.mkdir(parents=True, exist_ok=True)
        self._rate_ns = self._io_ns = self.clock.now()
        try:
            self._publish(0)
        except OSError:
            with contextlib.suppress(OSError):
                self.control.rmdir()
            raise
        pf = pid_file(self.pid)
        with contextlib.suppress(OSError):
            pf.parent.mkdir(mode=0o700, exist_ok=True)
            pf.write_text(str(self.control.resolve()))
        self.started = True
        self._install_usr2()
        self._rate_step = self.clock.index
        self.clock.poll = self.poll
        # the first poll after one step: from then on, about every POLL_NS of steps
        self.clock.poll_step = self.clock.index + 1
        self.clock.reschedule()

    def stop(self) -> None:
        """Undo everything :meth:`start` did; a window still open is cut short (written)."""
        self.clock.poll = None
        self.clock.poll_step = NEVER
        self.clock.reschedule()
        self._restore_usr2()
        self._close_window(cut=True)
        if self.started:
            self.started = False
            with contextlib.suppress(OSError):
                self._publish(self.clock.index, ended=True)

    def remove_files(self) -> None:
        """Once the session's outputs are finished: the folder holds only what live sessions
        need, so an ended one leaves nothing (after the sinks, which a full disk must not
        see helped by the space this frees)."""
        if not self.started:
            with contextlib.suppress(OSError):
                self.path.unlink()
            with contextlib.suppress(OSError):
                if not any(self.control.glob("session.*.json")):
                    (self.control / REQUEST_NAME).unlink(missing_ok=True)
                    self.control.rmdir()
            with contextlib.suppress(OSError):
                pf = pid_file(self.pid)
                if pf.read_text() == str(self.control.resolve()):
                    pf.unlink()

    def forget_in_child(self) -> None:
        self.started = False
        self._profiler = None
        self.clock.poll = None

    # ------------------------------------------------------------------ SIGUSR2
    def _install_usr2(self) -> None:
        sig = getattr(signal, "SIGUSR2", None)
        if sig is None or threading.current_thread() is not threading.main_thread():
            return
        try:
            prev = signal.getsignal(sig)
            if prev is not signal.SIG_DFL:
                # the program's own (or ignored): left as it is
                return
            signal.signal(sig, self._usr2_handler)
        except (OSError, ValueError, RuntimeError):
            return
        self._prev_usr2 = prev
        self._usr2_installed = True

    def _restore_usr2(self) -> None:
        if not self._usr2_installed:
            return
        self._usr2_installed = False
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            if signal.getsignal(signal.SIGUSR2) is self._usr2_handler:
                signal.signal(signal.SIGUSR2, self._prev_usr2)

    def _on_usr2(self, signum: int, frame: FrameType | None) -> None:
        # a flag and a poll at the next boundary: nothing else in a signal handler
        self._usr2 = True
        self.clock.poll_step = 0
        self.clock.event_at = 0

    # ------------------------------------------------------------------ the boundary's part
    def poll(self, index: int, now: int) -> None:
        """At the start of step ``index`` (the clock's call, at most every POLL_NS, or at a
        window's next step). Never raises."""
        try:
            self._poll(index, now)
        except OSError:
            # the folder went away or filled up: the records sink says so; tried again later
            self.clock.poll_step = index + 1 + self._interval
        except Exception as e:
            warnings.warn(
                f"asynctrace: on-demand capture failed ({type(e).__name__}: {e}); the session "
                "goes on without it",
                AsyncTraceWarning,
                stacklevel=2,
            )
            self.clock.poll_step = index + 1

    def _poll(self, index: int, now: int) -> None:
        clock = self.clock
        w = self.window
        if w is not None and w["state"] in ("scheduled", "open"):
            self._advance_window(index)
        # the step rate since the last poll, and the steps until the next (~POLL_NS)
        steps, elapsed = index - self._rate_step, now - self._rate_ns
        interval = self._interval
        if steps > 0 and elapsed > 0:
            self.rate = steps * 1e9 / elapsed
            interval = max(1, min(steps * POLL_NS // elapsed, _MAX_INTERVAL))
            self._interval = interval
            self._rate_step, self._rate_ns = index, now
        elif steps > 0:
            # a clock that did not move over these steps (a coarse one, a scripted one): look
            # twice as far ahead each time rather than every step
            interval = self._interval = min(interval * 2, _MAX_INTERVAL)
        waiting = w is not None and w["state"] in ("scheduled", "open")
        if not waiting and not self._usr2 and now - self._io_ns < POLL_NS:
            # a step-rate check only (the first steps of a session, whose rate is not yet
            # known): no file read or written until POLL_NS since the last
            clock.poll_step = index + interval
            return
        self._io_ns = now
        if self._usr2:
            self._usr2 = False
            self._ask(f"usr2-{time.time_ns()}", index + 1, DEFAULT_STEPS)
        self._read_request(index)
        self._publish(index)
        w = self.window
        if w is not None and w["state"] == "scheduled":
            self._advance_window(index)
        nxt = index + interval
        # the next step the window acts at: opened one step early (its warm-up), closed at
        # its stop; polled exactly there
        w = self.window
        if w is not None and w["state"] == "scheduled":
            nxt = min(nxt, max(index + 1, int(w["start"]) - 1))
        elif w is not None and w["state"] == "open":
            nxt = min(nxt, max(index + 1, int(w["stop"])))
        clock.poll_step = nxt

    def _read_request(self, index: int) -> None:
        req_path = self.control / REQUEST_NAME
        try:
            mtime = os.stat(req_path).st_mtime_ns
        except OSError:
            return
        if mtime == self._request_mtime:
            return
        self._request_mtime = mtime
        req = read_json(req_path)
        if not isinstance(req, dict) or req.get("id") in (None, self._seen_id):
            return
        pids = req.get("pids")
        if pids is not None and self.pid not in pids:
            return
        try:
            start, steps = int(req["start_step"]), int(req["steps"])
        except (KeyError, TypeError, ValueError):
            return
        self._ask(str(req["id"]), start, steps)

    def _ask(self, rid: str, start: int, steps: int) -> None:
        self._seen_id = rid
        w = self.window
        if w is not None and w["state"] in ("scheduled", "open"):
            warnings.warn(
                f"asynctrace: a deep window is already open on steps {w['start']}-"
                f"{w['stop'] - 1}; request {rid} ignored (one window at a time)",
                AsyncTraceWarning,
                stacklevel=4,
            )
            return
        steps = max(1, steps)
        start = max(start, 1)
        # opened at the boundary of the step before it (its warm-up): that one must be ahead
        state = "scheduled" if start - 1 >= self.clock.index else "missed"
        self.window = {
            "id": rid,
            "start": start,
            "stop": start + steps,
            "state": state,
            "traces": [],
        }

    def _advance_window(self, index: int) -> None:
        """At the start of step ``index``: open the window one step early (its warm-up), or
        close it once its last step is done."""
        w = self.window
        assert w is not None
        if w["state"] == "scheduled" and index >= int(w["start"]) - 1:
            if index > int(w["start"]) - 1:
                w["state"] = "missed"
                return
            prof = self._make_profiler(int(w["start"]), int(w["stop"]) - int(w["start"]))
            if prof is None:
                w["state"] = "failed"
                return
            self._profiler = prof
            self._hold_lint(True)
            w["state"] = "open"
            with contextlib.suppress(OSError):
                self._publish(index)
        elif w["state"] == "open" and index >= int(w["stop"]):
            self._close_window(cut=False)

    def _close_window(self, *, cut: bool) -> None:
        prof, self._profiler = self._profiler, None
        w = self.window
        if prof is None or w is None:
            return
        try:
            if self.clock.profiler is prof:
                self.clock.profiler = None
            prof.stop()
        except Exception as e:
            warnings.warn(
                f"asynctrace: the on-demand profiler failed to stop ({e}); the job goes on",
                AsyncTraceWarning,
                stacklevel=3,
            )
        finally:
            self._hold_lint(False)
        w["traces"] = [str(p) for p in prof.traces]
        w["state"] = "done" if prof.traces else "failed"
        if cut:
            w["cut_at"] = self.clock.index
        self._on_window(dict(w))
        with contextlib.suppress(OSError):
            self._publish(self.clock.index)

    def _publish(self, index: int, *, ended: bool = False) -> None:
        write_json(
            self.path,
            {
                "ended": ended,
                "pid": self.pid,
                "host": self.host,
                "rank": self.rank,
                "name": self.name,
                "step": index,
                "rate": self.rate,
                "updated_unix": time.time(),
                "window": self.window,
            },
        )


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text) or "host"
