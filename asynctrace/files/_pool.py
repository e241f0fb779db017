"""Where the map over rank files runs on this machine: one file after another in this process,
or local worker processes, stopped cleanly however the map ends.

* ``workers=N``: N local processes, each a standard-library ``ProcessPoolExecutor`` of one
  process (``forkserver`` where the platform has it, else ``spawn``: safe beside threads, and
  nothing of the caller's state is copied). One executor per slot, so that a worker process
  that dies (killed by a signal, out of memory, a crash) is known to have held exactly one
  file: that file is named as lost, its slot gets a fresh process, the other files go on.

A local map leaves no process behind, however it ends: Ctrl-C (SIGINT), SIGTERM or SIGHUP to
this process, a worker raising, or an error here stops and reaps every worker before the
exception goes on; the multiprocessing helpers (forkserver, resource tracker) then end with this
process. Workers ignore SIGINT (a terminal's Ctrl-C reaches the whole process group): this
process stops them. SIGTERM and SIGHUP, for the duration of the map, unwind it as Ctrl-C does
and then do what they would have done: the handler that was there, or the process ends by that
signal (its exit status; ``| tail -1`` returns).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from asynctrace.errors import OptionError

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

__all__ = ["MapJob", "OnResult", "default_workers"]

#: what a worker sends back: ok, the msgpack report or the error message, seconds, peak RSS
#: in bytes, and which worker it was ("host:pid")
_Result = tuple[bool, bytes | str, float, int, str]

_LOST = (
    "the worker analysing it was lost (its process ended: killed by a signal, out of memory "
    "or crashed); the other files were analysed; report this file alone to see why"
)


def default_workers(n_files: int) -> int:
    """The number of cores this process may use, at most one per file (at least 1)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, n_files))


def _main_importable() -> bool:
    """Whether a ``spawn`` / ``forkserver`` worker can import this process's main module as
    multiprocessing does: not where it has a file name that is no file (``python - <<EOF``:
    ``<stdin>``), where every worker would die on start; the map then runs in this process."""
    main = sys.modules.get("__main__")
    if getattr(main, "__spec__", None) is not None:
        return True
    path = getattr(main, "__file__", None)
    return path is None or os.path.isfile(path)


def _mp_context() -> Any:
    import multiprocessing

    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    return multiprocessing.get_context(method)


OnResult = Callable[[int, "_Result | None", str | None], None]


class MapJob(msgspec.Struct, frozen=True, kw_only=True):
    """One task over the files, wherever it runs: ``task(paths[i], shown[i], *task_args)``
    for each file ``i``, and ``on_result(i, result, None)``, or ``on_result(i, None,
    reason)`` for a file whose worker was lost."""

    paths: Sequence[str]
    #: what the reports and errors call each file
    shown: Sequence[str]
    task: Callable[..., _Result]
    task_args: tuple[Any, ...]
    on_result: OnResult

    def run(self, i: int) -> _Result:
        """File ``i``'s task, in this process."""
        return self.task(self.paths[i], self.shown[i], *self.task_args)


#: how long a worker told to stop (SIGTERM) has before it is killed, and then to be reaped
_STOP_GRACE_S = 5.0


class _Stopped(BaseException):
    """SIGTERM or SIGHUP during a local map: unwinds it as KeyboardInterrupt does (a
    BaseException, so that no ``except Exception`` on the way swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _worker_init() -> None:
    # a terminal's Ctrl-C goes to the whole process group: the parent stops the workers, so a
    # worker neither dies half way with a traceback of its own nor outlives the parent
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _Stop:
    """The signal that stops a local map, raised where the map can unwind cleanly: while it
    waits for its workers (:meth:`waiting`), or at its next :meth:`check`. Raised anywhere
    else, in the middle of starting a worker, it could leave that worker unknown to the
    cleanup. A second signal while stopping is held, so the cleanup runs to the end."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._waiting = False

    def handler(self, signum: int, frame: object) -> None:
        if self.signum is not None:
            return  # stopping already
        self.signum = signum
        if self._waiting:
            self.check()

    def check(self) -> None:
        if self.signum is None:
            return
        self._waiting = False
        if self.signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise _Stopped(self.signum)

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        self._waiting = True
        try:
            self.check()  # one that came just before
            yield
        finally:
            self._waiting = False


@contextlib.contextmanager
def _signals_stop_the_map() -> Iterator[_Stop]:
    """SIGINT, SIGTERM and SIGHUP stop the map (:class:`_Stop`; its ``finally`` stops the
    workers). Afterwards SIGTERM and SIGHUP do what they would have done: the previous Python
    handler is called, or (the default) the process ends by that signal. A signal ignored
    before stays ignored, a SIGINT handler of the caller's own stays in place; outside the main
    thread nothing is installed (Python runs handlers there only)."""
    stop = _Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous: dict[int, Any] = {}
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        old = signal.getsignal(sig)
        if old is signal.SIG_IGN or old is None:
            continue  # ignored, or set outside Python: left as it is
        if sig == signal.SIGINT and old is not signal.default_int_handler:
            continue  # the caller's own Ctrl-C handler: theirs to run (the finally still cleans up)
        previous[sig] = old
        signal.signal(sig, stop.handler)
    try:
        yield stop
    except _Stopped:
        pass  # the workers are stopped: now what the signal would have done
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
    stopped = stop.signum
    if stopped is None:
        return
    if stopped == signal.SIGINT:
        raise KeyboardInterrupt  # one that came as the map ended: not lost
    old = previous[stopped]
    if callable(old):
        old(stopped, None)
        raise OptionError(f"the map over the files was stopped by {signal.Signals(stopped).name}")
    sys.stderr.flush()
    signal.raise_signal(stopped)  # the default action: the process ends by this signal
    raise SystemExit(128 + stopped)  # where the default action is not to end (never here)


def _stop_workers(executors: Sequence[ProcessPoolExecutor]) -> None:
    """Stop every worker of ``executors`` now and reap it: SIGTERM, then SIGKILL after
    :data:`_STOP_GRACE_S`; the executors' queued files are cancelled."""
    procs = [p for ex in executors for p in list((getattr(ex, "_processes", None) or {}).values())]
    for p in procs:
        with contextlib.suppress(OSError, ValueError):
            p.terminate()
    for ex in executors:
        ex.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + _STOP_GRACE_S
    for p in procs:
        with contextlib.suppress(OSError, ValueError, AssertionError):
            p.join(max(0.0, deadline - time.monotonic()))
            if p.exitcode is None:
                p.kill()
                p.join(_STOP_GRACE_S)
    for ex in executors:
        # its thread sees the workers gone and lets go of the queues (their semaphores would
        # be reported as leaked by the resource tracker otherwise)
        manager = getattr(ex, "_executor_manager_thread", None)
        if isinstance(manager, threading.Thread):
            manager.join(_STOP_GRACE_S)


def _stop_helpers() -> None:
    """Stop and reap multiprocessing's forkserver and resource tracker after a map that did not
    end cleanly (they start again on the next use). They would end with this process, but
    where it ends by a signal or ``os._exit`` they are left to whatever reaps orphans (in a
    container, maybe nothing)."""
    import gc
    import multiprocessing
    from multiprocessing import forkserver, resource_tracker

    if multiprocessing.active_children():
        return  # processes of the caller's own still use them: they end with this process
    gc.collect()  # the executors' queues: their semaphores unregister as they go
    for helper in (
        getattr(forkserver, "_forkserver", None),
        getattr(resource_tracker, "_resource_tracker", None),
    ):
        stop = getattr(helper, "_stop", None)
        if callable(stop):
            with contextlib.suppress(Exception):
                stop()


def _local_map(job: MapJob, workers: int, stop: _Stop) -> None:
    """The job on ``workers`` one-process executors."""
    # imported here: multiprocessing brings tempfile and shutil, which one process never needs
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    ctx = _mp_context()
    slots: list[ProcessPoolExecutor | None] = [None] * workers
    pending = deque(range(len(job.paths)))
    running: dict[Future[_Result], tuple[int, int]] = {}

    def feed(slot: int) -> None:
        while pending:
            i = pending[0]
            ex = slots[slot]
            if ex is None:
                ex = slots[slot] = ProcessPoolExecutor(
                    max_workers=1, mp_context=ctx, initializer=_worker_init
                )
            try:
                fut = ex.submit(job.task, job.paths[i], job.shown[i], *job.task_args)
            except BrokenProcessPool:
                # its process died between two files: the file never started; a fresh one
                ex.shutdown(wait=False, cancel_futures=True)
                slots[slot] = None
                continue
            pending.popleft()
            running[fut] = (i, slot)
            return

    clean = False
    try:
        for slot in range(workers):
            feed(slot)
        while running:
            stop.check()
            with stop.waiting():
                done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: running[f][0]):
                i, slot = running.pop(fut)
                try:
                    result = fut.result()
                except BrokenProcessPool:
                    lost = slots[slot]
                    if lost is not None:
                        lost.shutdown(wait=False, cancel_futures=True)
                    slots[slot] = None
                    job.on_result(i, None, _LOST)
                else:
                    job.on_result(i, result, None)
                feed(slot)
        stop.check()  # one that came after the last wait
        clean = True
    finally:
        alive = [ex for ex in slots if ex is not None]
        if clean:
            for ex in alive:
                ex.shutdown(wait=True)
        else:
            # interrupted, stopped by a signal, or an exception: no worker may outlive this
            # (one would hold this process's stdout, and `| tail -1` would never return)
            _stop_workers(alive)
            _stop_helpers()
