"""Phase boundaries with no code change: DataLoader fetches, ``backward``, optimizer steps.

While at least one session with ``phases=True`` runs, three process-wide hooks mark the
phase boundaries of the open step of the session in the calling thread
(:meth:`~asynctrace.capture._clock.StepClock.mark`):

* ``torch.utils.data.dataloader._BaseDataLoaderIter.__next__`` (every DataLoader's iterator)
  is wrapped: the time inside is the step's **data** phase, so its data wait, also under
  ``asynctrace run`` and the trainer callbacks, where no ``session.steps(loader)`` marks it;
* ``torch.autograd.backward`` (which ``Tensor.backward`` calls) is wrapped: the time inside is
  **backward**; a backward called from inside an optimizer step (a closure, as Lightning's
  automatic optimization and LBFGS do) makes the time from the optimizer's start to it
  **forward**, and the step returns to **optimizer** after it;
* torch's global optimizer step pre and post hooks bound **optimizer**.

Everything else is **forward** until the step's first backward (after a data fetch, again) and
**other** after a backward or an optimizer step. Four clock reads a step in a usual loop, no
per-module hook. The originals are put back when the last such session ends, and in a forked
child (a DataLoader worker).

Hooks run in the user's loop: they never raise anything of ours, and the wrapped call's own
exceptions pass through unchanged.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from asynctrace.capture._clock import BACKWARD, DATA, FORWARD, OPTIMIZER, OTHER

if TYPE_CHECKING:
    from asynctrace.capture._clock import StepClock

__all__ = ["register", "unregister"]

# the clock of each thread's session with phases on; the hooks read it by thread
_clocks: dict[int, StepClock] = {}
_lock = threading.Lock()
# what the hooks replaced, to put back; None while not installed
_saved: dict[str, Any] | None = None
_handles: list[Any] = []
_fork_hook = False
_get_ident = threading.get_ident


def register(clock: StepClock) -> None:
    """The calling thread's session measures phases on ``clock`` until :func:`unregister`."""
    global _fork_hook
    with _lock:
        _clocks[_get_ident()] = clock
        if _saved is None:
            _install()
        if not _fork_hook and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_forget_in_child)
            _fork_hook = True


def unregister(clock: StepClock) -> None:
    with _lock:
        for tid, c in list(_clocks.items()):
            if c is clock:
                del _clocks[tid]
        if not _clocks and _saved is not None:
            _uninstall()


def _forget_in_child() -> None:
    # the parent's sessions are not the child's (capture/session.py forgets them too)
    global _lock
    _lock = threading.Lock()
    _clocks.clear()
    if _saved is not None:
        with contextlib.suppress(Exception):
            _uninstall()


def _open_clock() -> StepClock | None:
    clock = _clocks.get(_get_ident())
    if clock is None or not clock.open:
        return None
    return clock


def _install() -> None:
    global _saved
    import torch.autograd
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )
    from torch.utils.data import dataloader

    saved: dict[str, Any] = {
        "next": dataloader._BaseDataLoaderIter.__next__,
        "backward": torch.autograd.backward,
    }
    saved["our_next"] = _wrap_next(saved["next"])
    saved["our_backward"] = _wrap_backward(saved["backward"])
    dataloader._BaseDataLoaderIter.__next__ = saved["our_next"]  # type: ignore[method-assign]
    torch.autograd.backward = saved["our_backward"]
    try:
        _handles.append(register_optimizer_step_pre_hook(_optimizer_pre))
        _handles.append(register_optimizer_step_post_hook(_optimizer_post))
    except Exception:
        _saved = saved
        _uninstall()
        raise
    _saved = saved


def _uninstall() -> None:
    global _saved
    saved, _saved = _saved, None
    handles = list(_handles)
    _handles.clear()
    for h in handles:
        h.remove()
    if saved is None:
        return
    import torch.autograd
    from torch.utils.data import dataloader

    # only ours: a wrapper someone put over ours meanwhile stays (and calls ours, which then
    # passes straight through)
    if dataloader._BaseDataLoaderIter.__dict__.get("__next__") is saved["our_next"]:
        dataloader._BaseDataLoaderIter.__next__ = saved["next"]  # type: ignore[method-assign]
    if torch.autograd.backward is saved["our_backward"]:
        torch.autograd.backward = saved["backward"]


def _wrap_next(orig: Callable[[Any], Any]) -> Callable[[Any], Any]:
    @functools.wraps(orig)
    def __next__(self: Any) -> Any:
        clock = _clocks.get(_get_ident()) if _clocks else None
        if clock is None or not clock.open:
            return orig(self)
        mark = clock.mark
        mark(DATA)
        try:
            return orig(self)
        finally:
            mark(FORWARD)

    __next__.__asynctrace_wrapped__ = orig  # type: ignore[attr-defined]
    return __next__


def _wrap_backward(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def backward(*args: Any, **kwargs: Any) -> Any:
        clock = _clocks.get(_get_ident()) if _clocks else None
        if clock is None or not clock.open:
            return orig(*args, **kwargs)
        inside_optimizer = clock.ph is not None and clock.ph_cur == OPTIMIZER
        if inside_optimizer:
            # a closure's backward: what ran in the optimizer before it was the forward
            clock.ph_cur = FORWARD
        clock.mark(BACKWARD)
        try:
            return orig(*args, **kwargs)
        finally:
            if clock.open:
                clock.mark(OPTIMIZER if inside_optimizer else OTHER)

    backward.__asynctrace_wrapped__ = orig  # type: ignore[attr-defined]
    return backward


def _optimizer_pre(optimizer: Any, args: Any, kwargs: Any) -> None:
    clock = _open_clock()
    if clock is not None:
        clock.mark(OPTIMIZER)


def _optimizer_post(optimizer: Any, args: Any, kwargs: Any) -> None:
    clock = _open_clock()
    if clock is not None:
        clock.mark(OTHER)
