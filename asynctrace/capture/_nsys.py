"""``asynctrace.trace(nsys_capture=range(10, 20))``: open Nsight Systems' capture window on steps.

``nsys profile -c cudaProfilerApi`` records only between ``cudaProfilerStart()`` and
``cudaProfilerStop()``. :class:`NsysCapture` calls those (through ``torch.cuda.profiler``) at step
boundaries: the window opens when a step in the chosen set starts and closes when a step outside
it starts, or when the session ends. So ``range(10, 20)`` captures exactly steps 10 to 19.

The session needs two calls into this module: ``on_step_start(n)`` when step ``n`` begins (the
first step is 0) and ``close()`` at exit, in a ``finally``.

Where there is no CUDA/ROCm device the profiler API does not exist; the capture is then a no-op
and says so once, with an :class:`~asynctrace.errors.AsyncTraceWarning`, instead of failing the
user's run.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Collection, Iterable

from asynctrace.errors import AsyncTraceWarning, OptionError

__all__ = ["NsysCapture", "profiler_api_available"]

#: device kinds whose runtime has cudaProfilerStart/Stop (hipProfilerStart/Stop on ROCm)
_PROFILER_KINDS = frozenset({"cuda", "rocm"})


def profiler_api_available() -> bool:
    """Whether ``torch.cuda.profiler.start()`` can work in this process (a CUDA/ROCm device)."""
    import torch

    return bool(torch.cuda.is_available())


def _torch_start() -> None:
    import torch.cuda.profiler

    torch.cuda.profiler.start()  # type: ignore[no-untyped-call]


def _torch_stop() -> None:
    import torch.cuda.profiler

    torch.cuda.profiler.stop()  # type: ignore[no-untyped-call]


class NsysCapture:
    """Calls the CUDA profiler start/stop API around a chosen set of steps.

    ``steps`` is any iterable of step numbers (usually a ``range``); ``device_kind`` is the
    session device's ``kind``. ``start``/``stop`` default to ``torch.cuda.profiler.start/stop``
    and are injectable so the state machine can be tested without a GPU.
    """

    __slots__ = ("_active", "_last", "_start", "_steps", "_stop", "_warned", "enabled", "starts")

    def __init__(
        self,
        steps: Iterable[int],
        *,
        device_kind: str,
        start: Callable[[], None] | None = None,
        stop: Callable[[], None] | None = None,
    ) -> None:
        if isinstance(steps, (str, bytes)) or not isinstance(steps, Iterable):
            raise OptionError(f"nsys_capture needs step numbers, e.g. range(10, 20); got {steps!r}")
        if isinstance(steps, range) and steps.step > 0:
            # kept as it is: `in` costs nothing however far it reaches (a set of
            # range(10, 10**12) would never be built)
            if steps and steps.start < 0:
                raise OptionError(
                    "nsys_capture step numbers must be ints >= 0 (steps count from 0); "
                    f"got {steps!r}"
                )
            self._steps: Collection[int] = steps
            self._last = steps[-1] if steps else -1
        else:
            chosen: set[int] = set()
            for s in steps:
                if isinstance(s, bool) or not isinstance(s, int) or s < 0:
                    raise OptionError(
                        "nsys_capture step numbers must be ints >= 0 (steps count from 0); "
                        f"got {s!r}"
                    )
                chosen.add(s)
            self._steps = frozenset(chosen)
            # Past the last chosen step nothing can open the window again: stop checking.
            self._last = max(chosen, default=-1)
        self._start = start or _torch_start
        self._stop = stop or _torch_stop
        self._active = False
        self._warned = False
        #: False where the device has no profiler API (CPU, fake): every call is a no-op
        self.enabled = device_kind in _PROFILER_KINDS
        #: how many times the capture window was opened (for tests and the summary)
        self.starts = 0

    @property
    def active(self) -> bool:
        """Whether the profiler window is open now."""
        return self._active

    @property
    def steps(self) -> Collection[int]:
        """The chosen steps: the range given, else a frozenset."""
        return self._steps

    def _warn_once(self) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(
                "nsys_capture: no CUDA/ROCm device in this session, so there is no "
                "cudaProfilerStart/Stop to call; steps are traced but no capture window is "
                "opened. Run on a GPU under `nsys profile -c cudaProfilerApi ...`.",
                AsyncTraceWarning,
                stacklevel=3,
            )

    def on_step_start(self, step: int) -> None:
        """Step ``step`` begins: open the window if it is chosen, close it if not."""
        if step > self._last and not self._active:
            return
        wanted = step in self._steps
        if wanted == self._active:
            return
        if not self.enabled:
            if wanted:
                self._warn_once()
            return
        if wanted:
            self._start()
            self._active = True
            self.starts += 1
        else:
            self._active = False
            self._stop()

    def close(self) -> None:
        """The session ends: close the window if it is open. Safe to call twice."""
        if self._active:
            self._active = False
            self._stop()

    def __repr__(self) -> str:
        return (
            f"NsysCapture(steps={_shown(self._steps)}, enabled={self.enabled}, "
            f"active={self._active})"
        )


def _shown(steps: Collection[int]) -> str:
    return repr(steps) if isinstance(steps, range) else repr(sorted(steps))
