"""The map over rank files on an existing Dask distributed cluster
(``pip install 'asynctrace[dask]'``), and the handshake that makes a wrong address one clear
error instead of a hang.

The workers must see the files at the same paths (a shared file system) and have asynctrace
installed. Dask re-runs a task whose worker died; one that keeps killing its workers
(``distributed.scheduler.allowed-failures``) comes back as lost.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from asynctrace._extras import require
from asynctrace.errors import OptionError
from asynctrace.files._pool import _LOST, MapJob

__all__ = ["DEFAULT_SCHEDULER_TIMEOUT_S", "SCHEDULER_TIMEOUT_ENV", "scheduler_timeout"]


#: how long the handshake with a Dask scheduler may take (connect, then its identity), unless
#: ``scheduler_timeout_s`` or this environment variable says otherwise
SCHEDULER_TIMEOUT_ENV = "ASYNCTRACE_SCHEDULER_TIMEOUT"
DEFAULT_SCHEDULER_TIMEOUT_S = 10.0


def scheduler_timeout(value: float | None = None) -> float:
    """The handshake bound in seconds: ``value``, else ``$ASYNCTRACE_SCHEDULER_TIMEOUT``, else
    :data:`DEFAULT_SCHEDULER_TIMEOUT_S`. Raises :class:`OptionError` for one that is no
    positive number."""
    where = "scheduler_timeout_s"
    if value is None:
        text = os.environ.get(SCHEDULER_TIMEOUT_ENV, "").strip()
        if not text:
            return DEFAULT_SCHEDULER_TIMEOUT_S
        where = f"${SCHEDULER_TIMEOUT_ENV}"
        try:
            value = float(text)
        except ValueError:
            raise OptionError(f"{where}={text!r}: give a number of seconds > 0") from None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise OptionError(f"{where}={value!r}: give a number of seconds > 0")
    if value == float("inf"):
        raise OptionError(f"{where}={value!r}: give a finite number of seconds")
    return float(value)


def _is_tcp(address: str) -> bool:
    return "://" not in address or address.startswith("tcp://")


async def _identity(address: str, timeout_s: float) -> Any:
    from distributed.comm.core import connect

    comm = await connect(address, timeout=timeout_s)  # type: ignore[no-untyped-call]
    try:
        await comm.write({"op": "identity", "reply": True})
        return await comm.read()
    finally:
        comm.abort()


def _check_scheduler(address: str, timeout_s: float) -> None:
    """Connect to ``address`` and ask its identity, all of it within ``timeout_s``: a Dask
    scheduler answers ``{"type": "Scheduler", ...}``. Anything else is one
    :class:`OptionError`: a silent listener (which ``distributed.Client`` waits on forever), an
    HTTP or SSH server (whose first bytes Dask reads as a frame length, and tries to allocate
    exabytes), nothing listening. Runs on a thread of its own with its own event loop, so that
    a caller inside an event loop (a notebook) can call it too."""
    import asyncio

    outcome: list[Any] = []

    def probe() -> None:
        try:
            outcome.append(asyncio.run(asyncio.wait_for(_identity(address, timeout_s), timeout_s)))
        except BaseException as e:  # reported below, in the caller's thread
            outcome.append(e)

    t = threading.Thread(target=probe, name="asynctrace-scheduler-check", daemon=True)
    t.start()
    t.join(timeout_s + 5.0)  # the wait_for above ends it; this bound is in case it cannot
    hint = (
        f"give the address of a Dask scheduler (tcp://host:8786); a slow one: "
        f"--scheduler-timeout S or ${SCHEDULER_TIMEOUT_ENV}"
    )
    if not outcome or isinstance(outcome[0], (asyncio.TimeoutError, TimeoutError)):
        raise OptionError(f"{address}: no Dask scheduler answered within {timeout_s:g} s; {hint}")
    got = outcome[0]
    if isinstance(got, OSError):
        raise OptionError(f"cannot reach the Dask scheduler at {address}: {got}; {hint}")
    if isinstance(got, BaseException) or not (
        isinstance(got, dict) and got.get("type") == "Scheduler"
    ):
        what = type(got).__name__ if isinstance(got, BaseException) else "another answer"
        raise OptionError(
            f"{address}: what answers there is not a Dask scheduler ({what}; an HTTP or SSH "
            f"port?); {hint}"
        )


def _client(scheduler: Any, timeout_s: float | None = None) -> tuple[Any, bool]:
    """A ``distributed.Client`` for ``scheduler`` (an address, or a client), and whether we
    opened it (and so close it). An address is checked first (:func:`_check_scheduler`), so
    that no wrong one hangs or crashes."""
    import asyncio

    distributed = require(
        "distributed",
        extra="dask",
        what="--scheduler (a Dask cluster)",
        packages="dask distributed",
    )
    if isinstance(scheduler, distributed.Client):
        return scheduler, False
    if not isinstance(scheduler, str) or not scheduler:
        raise OptionError(
            f"scheduler={scheduler!r}: give a Dask scheduler address (tcp://host:8786) or a "
            "distributed.Client"
        )
    bound = scheduler_timeout(timeout_s)
    if _is_tcp(scheduler):
        # other transports (tls://, ucx://...) need their security settings: the Client's
        # own connect timeout bounds them
        _check_scheduler(scheduler, bound)
    try:
        client = distributed.Client(scheduler, set_as_default=False, timeout=bound)
    except (OSError, asyncio.TimeoutError) as e:
        raise OptionError(f"cannot reach the Dask scheduler at {scheduler}: {e}") from None
    return client, True


def _dask_map(job: MapJob, scheduler: Any, timeout_s: float | None) -> None:
    import distributed

    client, owned = _client(scheduler, timeout_s)
    try:
        stamp = f"{os.getpid()}-{time.monotonic_ns()}"
        n = len(job.paths)
        futures = client.map(
            job.task,
            [os.path.abspath(p) for p in job.paths],  # the workers' working folder may differ
            list(job.shown),
            *[[a] * n for a in job.task_args],
            pure=False,
            key=[f"asynctrace-{job.task.__name__}-{i}-{stamp}" for i in range(n)],
        )
        index = {f.key: i for i, f in enumerate(futures)}
        lost_types: tuple[type[BaseException], ...] = (
            distributed.KilledWorker,
            distributed.client.FutureCancelledError,
        )
        for fut, value in distributed.as_completed(  # type: ignore[no-untyped-call]
            futures, loop=client.loop, with_results=True, raise_errors=False
        ):
            i = index[fut.key]
            # an errored future gives (type, exception, traceback) here, not the exception
            error = fut.exception() if fut.status == "error" else None
            if fut.status == "cancelled" or isinstance(error, lost_types):
                job.on_result(i, None, _LOST + f" ({type(error or value).__name__})")
            elif error is not None:
                raise error
            else:
                job.on_result(i, value, None)
            fut.release()
    finally:
        if owned:
            client.close()
