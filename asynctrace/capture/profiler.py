"""Deep mode: ``torch.profiler`` windows over chosen steps of a capture session.

``asynctrace.trace(profile=Profile(wait=1, warmup=1, active=3))`` (or ``profile=True`` for
those defaults) profiles steps chosen with torch's own ``torch.profiler.schedule``; the session
drives a :class:`DeepProfiler` from ``step()``.

Cost outside the windows is the light mode's: no ``torch.profiler.profile`` object exists
between windows (torch's scheduled profiler still opens a ``record_function("ProfilerStep#N")``
every step, microseconds each, even while waiting). A profiler is created when the schedule
first says WARMUP or RECORD and dropped when it says NONE again, so between windows a step
costs one schedule call.

Each finished window is written as ``<dir>/<run>/{worker}.{time_ns}.pt.trace.json.gz``, the
layout the TensorBoard profiler plugin reads; ``worker`` is ``{host}_{pid}`` plus ``_rank{N}``
under torch.distributed, so files from every host, process and rank stay apart, and within a
process ``time_ns`` is moved on past any name already taken, so no file is ever overwritten.
Each file is written under a temporary name, checked (it decompresses, holds one complete JSON
object) and only then renamed into place, so a file without ``.tmp`` is always complete: an
empty or unreadable output (Kineto could not write its JSON, and torch gzipped the empty file)
is deleted with a warning. ``run`` and the host name in ``worker`` are sanitized like a records
file name (no path separators, no ``..``, no leading dot).

Everything of the ``on_trace_ready`` path (export, check, annotated copy, ``on_trace``) runs
inside the user's ``step()``: whatever fails there (``OSError``, ``MemoryError``, an error of the
annotator) is an :class:`~asynctrace.errors.AsyncTraceWarning` and training continues; with
``strict=True`` it is a :class:`~asynctrace.errors.CaptureError` out of that ``step()``.
``KeyboardInterrupt`` and ``SystemExit`` always propagate. The step ranges are
``ProfilerStep#N`` with N the session's step number.

An ``on_trace`` callback (the session's, which hands the path to its sinks: the annotator writes
the annotated copy) is called with each written path.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import socket
import threading
import time
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from asynctrace.capture.distributed import rank_and_world
from asynctrace.errors import AsyncTraceWarning, CaptureError
from asynctrace.records.names import PROFILER_TRACE_SUFFIX, annotated_path, sanitize_name

__all__ = [
    "DeepProfiler",
    "Profile",
    "check_trace",
    "make_profiler",
    "worker_name",
]


@dataclass(frozen=True, kw_only=True)
class Profile:
    """Which steps to profile and what to record (torch.profiler.schedule's arguments)."""

    wait: int = 1
    warmup: int = 1
    active: int = 3
    #: windows to record; 0 repeats until the session ends
    repeat: int = 1
    skip_first: int = 0
    with_stack: bool = False
    record_shapes: bool = False
    profile_memory: bool = False
    #: TensorBoard run name (the folder under ``dir``); default: the session's name
    run: str | None = None
    #: also write ``{worker}.{time_ns}.annotated.json.gz`` (the trace plus the asynctrace
    #: overlay) beside each trace; its name keeps it out of the TensorBoard plugin's file list
    annotate: bool = True

    def __post_init__(self) -> None:
        if self.wait < 0 or self.warmup < 0 or self.active <= 0 or self.repeat < 0:
            raise CaptureError(
                f"profile schedule wait={self.wait} warmup={self.warmup} active={self.active} "
                f"repeat={self.repeat}: need wait, warmup, repeat >= 0 and active > 0"
            )
        if self.skip_first < 0:
            raise CaptureError(f"profile skip_first={self.skip_first}: need >= 0")


def worker_name(*, host: str | None = None, pid: int | None = None, rank: int | None = None) -> str:
    """``{host}_{pid}[_rank{N}]``: unique per host, process and rank.

    The TensorBoard plugin splits a worker into node and process at the last ``_<digits>``
    before the timestamp, so the pid stays right after the host.
    """
    host = host if host is not None else socket.gethostname()
    pid = pid if pid is not None else os.getpid()
    # the host name goes into a path: "../../esc" (sethostname accepts it) must stay one name
    name = f"{sanitize_name(host, default='host')}_{int(pid)}"
    return f"{name}_rank{rank}" if rank is not None else name


class DeepProfiler:
    """Runs ``torch.profiler`` over the steps a :class:`Profile` schedule chooses.

    Drive it with :meth:`start` before the first step, :meth:`step` at each step boundary and
    :meth:`stop` at the end (in a ``finally``). ``traces`` lists the files written.
    """

    def __init__(
        self,
        options: Profile,
        *,
        dir: str | os.PathLike[str],
        run: str,
        worker: str | None = None,
        on_trace: Callable[[Path], None] | None = None,
        strict: bool = False,
    ) -> None:
        import torch.profiler

        self.options = options
        #: a window that cannot be written or annotated raises CaptureError out of step()
        self.strict = strict
        self.run_dir = Path(dir) / sanitize_name(options.run or run)
        self.worker = worker or worker_name(rank=rank_and_world()[0])
        self.on_trace = on_trace
        self.traces: list[Path] = []
        self._torch_profiler = torch.profiler
        self._none = torch.profiler.ProfilerAction.NONE
        self._schedule: Callable[[int], Any] = torch.profiler.schedule(
            wait=options.wait,
            warmup=options.warmup,
            active=options.active,
            repeat=options.repeat,
            skip_first=options.skip_first,
        )
        self._step = 0
        self._prof: Any = None
        self._started = False
        # torch's profiler state is per thread: stopping a window from another thread than
        # the one that started it segfaults the process (torch 2.x), so one thread drives it
        self._thread = 0

    @property
    def active(self) -> bool:
        """Whether a torch profiler is running now (warming up or recording)."""
        return self._prof is not None

    def start(self, first_step: int = 0) -> None:
        """Raises :class:`OSError` where the run folder cannot be created (before any step).
        ``first_step``: the session's step now (a window opened on demand mid-run), which the
        schedule and ``ProfilerStep#N`` count from."""
        if self._started:
            raise CaptureError("DeepProfiler.start() called twice")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._started = True
        self._thread = threading.get_ident()
        self._step = first_step
        self._maybe_open()

    def check_thread(self) -> None:
        """Raise :class:`CaptureError` unless called in the thread that started profiling."""
        if self._thread and threading.get_ident() != self._thread:
            raise CaptureError(
                "deep mode (profile=) is driven by the thread that started the session: step "
                "and end it there (torch.profiler cannot be stopped from another thread)"
            )

    def step(self) -> None:
        """The session finished step ``n`` and starts ``n + 1``; only in the thread that
        called :meth:`start` (:class:`CaptureError` elsewhere, before anything changes)."""
        self.check_thread()
        self._step += 1
        prof = self._prof
        if prof is None:
            self._maybe_open()
            return
        try:
            prof.step()
        finally:
            # also when the window's writing raised (strict, an interrupt): a profiler whose
            # window is over is dropped, never stepped or written again
            if prof.current_action == self._none:
                # The window ended (its trace is written by now); drop the profiler so the
                # steps until the next window cost nothing.
                self._prof = None
                prof.stop()

    def stop(self) -> None:
        """End profiling; a window cut short by the session's end is still written. Only in
        the thread that called :meth:`start`, like :meth:`step`."""
        self.check_thread()
        prof, self._prof = self._prof, None
        if prof is not None:
            prof.stop()

    def _maybe_open(self) -> None:
        action = self._schedule(self._step)
        if action == self._none:
            return
        tp = self._torch_profiler
        activities = [tp.ProfilerActivity.CPU]
        import torch

        if torch.cuda.is_available():
            activities.append(tp.ProfilerActivity.CUDA)
        prof = tp.profile(
            activities=activities,
            schedule=self._schedule,
            on_trace_ready=self._write,
            with_stack=self.options.with_stack,
            record_shapes=self.options.record_shapes,
            profile_memory=self.options.profile_memory,
        )
        # Start mid-schedule so that ProfilerStep#N carries the session's step number: these
        # are the attributes profile.__init__ sets from schedule(step_num) for step 0.
        prof.step_num = self._step
        prof.current_action = action
        if hasattr(prof, "_prev_schedule_action"):
            prof._prev_schedule_action = action
        prof.start()
        self._prof = prof

    def _unique_path(self) -> Path:
        t = time.time_ns()
        while True:
            path = self.run_dir / f"{self.worker}.{t}{PROFILER_TRACE_SUFFIX}"
            if not (path.exists() or annotated_path(path).exists() or _tmp_path(path).exists()):
                return path
            t += 1

    def _write(self, prof: Any) -> None:
        # torch.profiler's on_trace_ready: called from inside the user's step() (or the
        # session's end). Nothing may raise out of it into the training loop but an interrupt
        # (KeyboardInterrupt, SystemExit: BaseException, not caught here) or, with strict, a
        # CaptureError: a MemoryError of the annotator must not end a week-long job.
        try:
            path = self._export(prof)
        except Exception as e:
            self._failed(f"could not write a profiler trace under {self.run_dir}", e)
            return
        if path is None:
            return
        self.traces.append(path)
        if self.on_trace is not None:
            try:
                self.on_trace(path)
            except Exception as e:
                self._failed(f"the on_trace callback failed for {path}", e)

    def _export(self, prof: Any) -> Path | None:
        """Write the window to a temporary name, check it, rename it into place; None (and a
        warning) where torch produced nothing readable."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        path = self._unique_path()
        tmp = _tmp_path(path)
        try:
            prof.export_chrome_trace(str(tmp))
            problem = check_trace(tmp)
        except BaseException:
            # an interrupt too: a half-written temporary is nobody's file
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        if problem is not None:
            # Kineto failed to write its JSON (file size limit, disk full: it only logs) and
            # torch gzipped what there was: published, it would look like a complete trace
            with contextlib.suppress(OSError):
                tmp.unlink()
            self._failed(
                f"the profiler's trace of this window is {problem}; not published "
                f"(the temporary file {tmp.name} was deleted)",
                None,
            )
            return None
        os.replace(tmp, path)
        return path

    def _failed(self, what: str, error: BaseException | None) -> None:
        reason = "" if error is None else f": {_describe(error)}"
        if self.strict:
            raise CaptureError(f"asynctrace {what}{reason}") from error
        warnings.warn(
            f"asynctrace {what}{reason}; training continues without it",
            AsyncTraceWarning,
            # torch.profiler's own frames sit between this and the user's step()
            stacklevel=2,
        )


def _describe(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


#: a trace inflating to at most this much is parsed whole (msgspec.Raw: no objects built);
#: a larger one is checked for a complete gzip stream holding one JSON object, start to end
_FULL_CHECK_BYTES = 32 << 20
_CHUNK = 1 << 20
_WHITESPACE = b" \t\r\n"


def check_trace(path: Path) -> str | None:
    """None where ``path`` (a ``.json.gz`` trace) is complete; else what is wrong with it.

    Reads the file through once, in bounded memory: the gzip stream must end properly (its
    length and CRC check), and its text be one JSON object or array (parsed whole up to 32 MiB)."""
    kept: list[bytes] | None = []
    size = 0
    first = last = b""
    try:
        with gzip.open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                size += len(chunk)
                stripped = chunk.strip(_WHITESPACE)
                if stripped:
                    if not first:
                        first = stripped[:1]
                    last = stripped[-1:]
                if kept is not None:
                    kept.append(chunk)
                    if size > _FULL_CHECK_BYTES:
                        kept = None
    except (OSError, EOFError, zlib.error) as e:
        return f"not a complete gzip file ({_describe(e)})"
    if not first:
        return "empty" if size == 0 else "blank"
    # an object (what torch writes) or, as old Kineto wrote, a bare list of events
    if (first, last) not in ((b"{", b"}"), (b"[", b"]")):
        return "not one complete JSON document (truncated?)"
    if kept is not None:
        try:
            msgspec.json.decode(b"".join(kept), type=msgspec.Raw)
        except msgspec.DecodeError as e:
            return f"not valid JSON ({e})"
    return None


def _tmp_path(trace: Path) -> Path:
    """Where a trace is written before its rename: still ``.gz`` (torch gzips by the suffix),
    but not a name the TensorBoard plugin or ``find_traces`` lists."""
    return trace.with_name(trace.name + ".tmp.gz")


def make_profiler(
    profile: bool | Profile | None,
    *,
    dir: str | os.PathLike[str],
    run: str,
    on_trace: Callable[[Path], None] | None = None,
    strict: bool = False,
) -> DeepProfiler | None:
    """The session's deep mode from ``profile=``: None, True (the defaults) or a Profile."""
    if profile is None or profile is False:
        return None
    options = Profile() if profile is True else profile
    if not isinstance(options, Profile):
        raise CaptureError(
            f"profile={profile!r}: pass True or asynctrace.Profile(wait=, warmup=, active=, ...)"
        )
    return DeepProfiler(options, dir=dir, run=run, on_trace=on_trace, strict=strict)
