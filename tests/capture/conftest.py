"""Capture tests: fail any test that leaves process-wide state changed.

A capture session touches globals on the user's behalf (the active-session stack, torch's
global optimizer hooks, the dispatch-mode stack a sync lint pushes, NVTX ranges). Each must be
restored on exit, exceptions included (the signal handlers a session installs too), so every
test here is checked for leaks afterwards. A
leak is cleaned up (so it does not cascade into the next test) and then reported as a failure.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
import torch
import torch.optim.optimizer as torch_optimizer
from torch.utils import _python_dispatch

from asynctrace.capture import ranges, session

#: the handlers a session installs (stop signals, the on-demand trigger's USR2)
_SIGNALS = tuple(
    getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR2") if hasattr(signal, n)
)


def _hook_ids() -> set[int]:
    return set(torch_optimizer._global_optimizer_post_hooks) | set(
        torch_optimizer._global_optimizer_pre_hooks
    )


@pytest.fixture(autouse=True)
def _no_leaked_capture_state() -> Iterator[None]:
    hooks_before = _hook_ids()
    modes_before = torch._C._len_torch_dispatch_stack()
    ranges_before = ranges.open_ranges()
    profiler_before = bool(torch.autograd.profiler._is_profiler_enabled)
    handlers_before = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    yield
    leaks: list[str] = []
    for sig, before in handlers_before.items():
        now = signal.getsignal(sig)
        if now is not before:
            leaks.append(f"{signal.Signals(sig).name} handler left as {now!r}")
            signal.signal(sig, before)
    if bool(torch.autograd.profiler._is_profiler_enabled) != profiler_before:
        leaks.append("torch profiler left enabled")
    active = list(session._active)
    if active:
        leaks.append(f"session(s) left active: {active}")
        session._active.clear()
    extra_hooks = _hook_ids() - hooks_before
    if extra_hooks:
        leaks.append(f"{len(extra_hooks)} global optimizer hook(s) left registered")
        for hid in extra_hooks:
            torch_optimizer._global_optimizer_post_hooks.pop(hid, None)
            torch_optimizer._global_optimizer_pre_hooks.pop(hid, None)
    modes = torch._C._len_torch_dispatch_stack()
    if modes != modes_before:
        leaks.append(f"dispatch mode stack depth {modes_before} -> {modes}")
        while torch._C._len_torch_dispatch_stack() > modes_before:
            _python_dispatch._pop_mode()
    depth = ranges.open_ranges()
    if depth != ranges_before:
        leaks.append(f"NVTX ranges unbalanced: {ranges_before} open before, {depth} after")
        while ranges.open_ranges() > ranges_before:
            ranges._pop()
    if leaks:
        pytest.fail("test leaked capture state: " + "; ".join(leaks), pytrace=False)
