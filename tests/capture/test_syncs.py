"""SyncDetector: every op kind the lint catches, at its exact file:line, and clean restoration."""

from __future__ import annotations

import inspect
import logging
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, cast

import numpy as np
import pytest
import torch
from torch import nn

from asynctrace.capture import syncs
from asynctrace.capture.syncs import MAX_STACK_DEPTH, SyncDetector, SyncEvent, expect_syncs
from asynctrace.errors import CaptureError

_PATCHED = ("tolist", "numpy", "cpu", "__repr__")


def _tensor_state() -> dict[str, Any]:
    return {name: torch.Tensor.__dict__.get(name) for name in _PATCHED}


@pytest.fixture
def events() -> Iterator[list[SyncEvent]]:
    """A lint detector running for the test's body; checks it left nothing behind."""
    before = _tensor_state()
    seen: list[SyncEvent] = []
    det = SyncDetector(seen.append, mode="lint")
    det.start()
    try:
        yield seen
    finally:
        det.stop()
    assert _tensor_state() == before
    assert torch._C._len_torch_dispatch_stack() == 0


def marked_line(fn: Callable[..., Any], marker: str = "# sync") -> str:
    """file:line of the one line of ``fn`` that carries the ``marker``."""
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, line in enumerate(lines) if line.rstrip().endswith(marker)]
    assert len(hits) == 1, fn
    return f"{inspect.getsourcefile(fn)}:{hits[0]}"


x = torch.arange(-2.0, 3.0)
mask = x > 0


def case_item() -> None:
    x.sum().item()  # sync


def case_bool() -> None:
    bool(x.sum())  # sync


def case_float() -> None:
    float(x.sum())  # sync


def case_int() -> None:
    int(x.sum())  # sync


def case_if_tensor() -> None:
    if x.sum():  # sync
        pass


def case_format() -> None:
    _ = f"{x.sum():.3f}"  # sync


def case_index_with_tensor() -> None:
    x[torch.tensor(1)]  # sync


def case_nonzero() -> None:
    x.nonzero()  # sync


def case_where_one_arg() -> None:
    torch.where(mask)  # sync


def case_argwhere() -> None:
    torch.argwhere(mask)  # sync


def case_one_hot() -> None:
    nn.functional.one_hot(torch.tensor([0, 2]))  # sync


def case_mask_index() -> None:
    x[mask]  # sync


def case_mask_assign() -> None:
    y = x.clone()
    y[mask] = 0.0  # sync


def case_masked_select() -> None:
    torch.masked_select(x, mask)  # sync


def case_unique() -> None:
    torch.unique(x)  # sync


def case_unique_consecutive() -> None:
    torch.unique_consecutive(x)  # sync


def case_repeat_interleave() -> None:
    torch.repeat_interleave(x, torch.tensor([1, 2, 1, 1, 1]))  # sync


def case_bincount() -> None:
    torch.bincount(torch.tensor([1, 2, 2]))  # sync


def case_equal() -> None:
    torch.equal(x, x)  # sync


def case_allclose() -> None:
    torch.allclose(x, x)  # sync


def case_tolist() -> None:
    x.tolist()  # sync


def case_numpy() -> None:
    x.numpy()  # sync


def case_np_asarray() -> None:
    np.asarray(x)  # sync


def case_cpu() -> None:
    x.cpu()  # sync


def case_print(capsys: pytest.CaptureFixture[str]) -> None:
    print(x)  # sync


def case_repr() -> None:
    repr(x)  # sync


def case_str() -> None:
    str(x)  # sync


CASES: dict[str, tuple[Callable[..., None], str]] = {
    "item": (case_item, "aten::_local_scalar_dense"),
    "bool": (case_bool, "aten::_local_scalar_dense"),
    "float": (case_float, "aten::_local_scalar_dense"),
    "int": (case_int, "aten::_local_scalar_dense"),
    "if tensor": (case_if_tensor, "aten::_local_scalar_dense"),
    "format": (case_format, "aten::_local_scalar_dense"),
    "index with 0-d tensor": (case_index_with_tensor, "aten::_local_scalar_dense"),
    "nonzero": (case_nonzero, "aten::nonzero"),
    "where(cond)": (case_where_one_arg, "aten::nonzero"),
    "argwhere": (case_argwhere, "aten::nonzero"),
    "mask index": (case_mask_index, "aten::index"),
    "mask assign": (case_mask_assign, "aten::index_put_"),
    "masked_select": (case_masked_select, "aten::masked_select"),
    "unique": (case_unique, "aten::_unique2"),
    "unique_consecutive": (case_unique_consecutive, "aten::unique_consecutive"),
    "repeat_interleave": (case_repeat_interleave, "aten::repeat_interleave"),
    "bincount": (case_bincount, "aten::bincount"),
    "equal": (case_equal, "aten::equal"),
    "allclose": (case_allclose, "aten::allclose"),
    # reads min and max to size its output: two scalar reads
    "one_hot": (case_one_hot, "aten::_local_scalar_dense"),
    "tolist": (case_tolist, "Tensor.tolist"),
    "numpy": (case_numpy, "Tensor.numpy"),
    "np.asarray": (case_np_asarray, "Tensor.numpy"),
    "cpu": (case_cpu, "Tensor.cpu"),
    "print": (case_print, "Tensor.__repr__"),
    "repr": (case_repr, "Tensor.__repr__"),
    "str": (case_str, "Tensor.__repr__"),
}


class _Reads(nn.Module):
    def forward(self, t: torch.Tensor) -> float:
        return t.sum().item()  # sync


def test_the_stack_is_the_users_call_chain(events: list[SyncEvent]) -> None:
    _Reads()(x)  # call
    (event,) = events
    site = marked_line(_Reads.forward)
    call = marked_line(test_the_stack_is_the_users_call_chain, "# call")
    assert event.site == site
    # torch's Module.__call__ frames between forward() and its caller are not the user's, nor
    # pytest's around this test
    assert event.stack[:2] == (
        f"{site} in forward",
        f"{call} in test_the_stack_is_the_users_call_chain",
    )
    torch_dir = os.path.dirname(torch.__file__) + os.sep
    assert not [f for f in event.stack if f.startswith(torch_dir) or "site-packages" in f]


@pytest.mark.parametrize("kind", list(CASES))
def test_each_op_kind_is_caught_once_at_its_line(
    kind: str, events: list[SyncEvent], capsys: pytest.CaptureFixture[str]
) -> None:
    fn, op = CASES[kind]
    if "capsys" in inspect.signature(fn).parameters:
        fn(capsys)
    else:
        fn()
    site = marked_line(fn)
    assert [(e.op, e.site) for e in events] == [(op, site)] * (2 if kind == "one_hot" else 1)
    stack = events[0].stack
    # innermost first: the site, then this test calling it
    assert stack[0] == f"{site} in {fn.__name__}"
    assert stack[1].startswith(f"{__file__}:")
    assert len(stack) <= MAX_STACK_DEPTH
    assert events[0].wait_ns == 0


def test_ops_that_do_not_sync_are_not_flagged(events: list[SyncEvent]) -> None:
    y = x * 2 + 1
    y.masked_fill(mask, 0.0)
    torch.where(mask, x, y)
    torch.repeat_interleave(x, torch.tensor([1, 2, 1, 1, 1]), output_size=6)
    x.to("cpu")  # indistinguishable from batch.to(device) on CPU: not flagged
    x.to(torch.float64)
    x.sum(), x.max(), x.argmax(), torch.topk(x, 2), x.any()
    x[1:3], x[torch.tensor([0, 2])]
    list(x)  # iterating unbinds; each element stays a tensor
    len(x)
    assert events == []


def test_a_training_step_without_reads_is_clean(events: list[SyncEvent]) -> None:
    # Adam reads its host-side step counter with .item() on purpose; that is no sync on a GPU
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    for opt in (
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        torch.optim.Adam(model.parameters()),
        torch.optim.AdamW(model.parameters()),
    ):
        for _ in range(2):
            loss = nn.functional.cross_entropy(model(torch.randn(4, 8)), torch.tensor([0, 1, 0, 1]))
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert events == []


def test_cpu_is_device_false_flags_only_what_syncs_whatever_the_device() -> None:
    seen: list[SyncEvent] = []
    det = SyncDetector(seen.append, mode="lint", cpu_is_device=False)
    det.start()
    try:
        x.tolist()
        x.numpy()
        x.cpu()
        repr(x)
        x.sum().item()  # sync
        line = inspect.currentframe().f_lineno - 1  # type: ignore[union-attr]
    finally:
        det.stop()
    assert [(e.op, e.site) for e in seen] == [("aten::_local_scalar_dense", f"{__file__}:{line}")]


def test_syncs_made_inside_asynctrace_are_not_the_users() -> None:
    seen: list[SyncEvent] = []
    own = os.path.join(os.path.dirname(syncs.__file__), "_pretend_device_layer.py")
    code = compile("t.item()\n", own, "exec")
    with SyncDetector(seen.append, mode="lint"):
        exec(code, {"t": x.sum()})
    assert seen == []


def test_two_detectors_both_see_and_stop_in_any_order_restores() -> None:
    before = _tensor_state()
    a: list[SyncEvent] = []
    b: list[SyncEvent] = []
    da = SyncDetector(a.append, mode="lint")
    db = SyncDetector(b.append, mode="lint", cpu_is_device=False)
    da.start()
    db.start()
    x.sum().item()
    x.tolist()
    da.stop()  # not LIFO on purpose
    x.sum().item()
    db.stop()
    x.sum().item()
    assert [e.op for e in a] == ["aten::_local_scalar_dense", "Tensor.tolist"]
    assert [e.op for e in b] == ["aten::_local_scalar_dense", "aten::_local_scalar_dense"]
    assert _tensor_state() == before
    assert torch._C._len_torch_dispatch_stack() == 0


def test_start_and_stop_are_idempotent_and_exceptions_in_the_body_restore() -> None:
    before = _tensor_state()
    seen: list[SyncEvent] = []
    det = SyncDetector(seen.append, mode="lint")
    det.start()
    det.start()
    assert det.active == "lint"
    det.stop()
    det.stop()
    assert det.active is None
    with pytest.raises(ZeroDivisionError), SyncDetector(seen.append, mode="lint"):
        raise ZeroDivisionError
    assert _tensor_state() == before
    assert torch._C._len_torch_dispatch_stack() == 0


def test_a_lint_detector_stops_only_in_the_thread_that_started_it() -> None:
    # was: the stop popped the other thread's (empty) stack, raised, and left the mode on
    # this thread's stack and the Tensor wrappers installed for good
    before = _tensor_state()
    seen: list[SyncEvent] = []
    det = SyncDetector(seen.append, mode="lint")
    det.start()
    caught: list[BaseException] = []

    def stop() -> None:
        try:
            det.stop()
        except BaseException as e:
            caught.append(e)

    try:
        t = threading.Thread(target=stop)
        t.start()
        t.join(30)
        assert len(caught) == 1
        assert isinstance(caught[0], CaptureError)
        assert det.active == "lint"  # still running, so this thread can stop it
        x.sum().item()
        assert len(seen) == 1
    finally:
        det.stop()
    assert det.active is None
    assert _tensor_state() == before
    assert torch._C._len_torch_dispatch_stack() == 0


def test_a_lint_mode_popped_from_under_the_detector_still_unwraps_tensor() -> None:
    from torch.utils import _python_dispatch

    before = _tensor_state()
    det = SyncDetector(lambda e: None, mode="lint")
    det.start()
    _python_dispatch._pop_mode()  # someone else's cleanup popped our mode
    det.stop()  # nothing of ours is left to pop: no error, and nothing else is popped
    assert _tensor_state() == before
    assert torch._C._len_torch_dispatch_stack() == 0


def test_a_users_mode_left_on_above_the_lint_stays_and_the_lint_goes() -> None:
    from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

    seen: list[str] = []

    class Users(TorchDispatchMode):  # type: ignore[misc]
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
            seen.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    users = Users()
    det = SyncDetector(lambda e: None, mode="lint")
    det.start()
    users.__enter__()  # entered inside the session, not exited before it ends
    try:
        det.stop()
        # before: the user's mode was popped and the lint's stayed on the stack
        assert _get_current_dispatch_mode_stack() == [users]
        torch.ones(2).add(1)
        assert "aten.add" in seen
    finally:
        users.__exit__(None, None, None)
    assert torch._C._len_torch_dispatch_stack() == 0


def test_a_tensor_method_the_user_patched_during_the_lint_is_theirs_after() -> None:
    before = _tensor_state()
    original = torch.Tensor.tolist

    def users_tolist(self: torch.Tensor) -> Any:
        return ["mine"]

    det = SyncDetector(lambda e: None, mode="lint")
    det.start()
    torch.Tensor.tolist = users_tolist  # type: ignore[method-assign]
    try:
        det.stop()
        # before: stop() deleted it (Tensor.tolist is inherited), the user's patch gone
        assert torch.Tensor.__dict__["tolist"] is users_tolist
        # the methods we wrapped and nobody touched are back as they were
        assert {k: v for k, v in _tensor_state().items() if k != "tolist"} == {
            k: v for k, v in before.items() if k != "tolist"
        }
    finally:
        del torch.Tensor.tolist
    assert torch.Tensor.tolist is original


def test_auto_on_cpu_does_nothing() -> None:
    before = _tensor_state()
    seen: list[SyncEvent] = []
    with SyncDetector(seen.append, mode="auto") as det:
        assert det.active == "off"
        assert _tensor_state() == before
        x.sum().item()
    assert seen == []


def test_bad_mode_and_cuda_without_cuda() -> None:
    with pytest.raises(ValueError, match="one of"):
        SyncDetector(lambda e: None, mode="sometimes")
    with pytest.raises(CaptureError, match="needs a CUDA"):
        SyncDetector(lambda e: None, mode="cuda").start()


#: what torch's C++ side warns at an implicit sync in sync debug mode "warn":
#: c10::cuda::warn_or_error_on_sync() does TORCH_WARN("called a synchronizing CUDA operation"),
#: and torch/csrc/Exceptions.cpp's PyWarningHandler turns it into a UserWarning with the C++
#: site appended (as this CPU build does with another TORCH_WARN: torch.from_numpy of a
#: read-only array ends "(Triggered internally at /__w/pytorch/pytorch/torch/csrc/utils/
#: tensor_numpy.cpp:213.)"); the path and line below vary by build
TORCH_SYNC_WARNING = (
    "called a synchronizing CUDA operation "
    "(Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp:179.)"
)
_TORCH_DIR = os.path.dirname(torch.__file__)


def _torch_op(name: str) -> Callable[[], None]:
    """An op that synchronizes (``.item()`` of a CUDA tensor), seen from Python as torch does it:
    warn_or_error_on_sync() warns in mode "warn" and raises in mode "error"; the warning is
    raised by C++ (PyErr_WarnEx, stacklevel 1) under a frame of torch's own, such as
    ``torch/_tensor.py``'s wrappers around ``.item()``."""
    path = os.path.join(_TORCH_DIR, f"_asynctrace_test_{name}.py")
    code = compile(
        "def op():\n"
        "    mode = torch.cuda.get_sync_debug_mode()\n"
        "    if mode == 1:\n"
        "        warnings.warn(MESSAGE, UserWarning, stacklevel=1)\n"
        "    elif mode == 2:\n"
        "        raise RuntimeError('called a synchronizing CUDA operation')\n",
        path,
        "exec",
    )
    env: dict[str, Any] = {"torch": torch, "warnings": warnings, "MESSAGE": TORCH_SYNC_WARNING}
    exec(code, env)
    return cast(Callable[[], None], env["op"])


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """torch.cuda's sync hooks, simulated on a machine without CUDA.

    The debug mode follows torch/cuda/__init__.py: set_sync_debug_mode takes "default", "warn",
    "error" or 0-2, and get_sync_debug_mode returns the int. Explicit syncs block (sleep) and
    count; Stream.synchronize also warns, as c10::cuda::stream_synchronize() calls
    warn_or_error_on_sync() (c10/cuda/CUDAFunctions.h; CUDAStream::synchronize calls it from
    CUDAStream.cpp, which the wheel does not ship: test_cuda_hooks_on_a_real_gpu checks it),
    while Event.synchronize does not (c10/cuda/CUDAEvent.h: a bare cudaEventSynchronize).
    """
    state: dict[str, Any] = {"mode": 0, "synchronized": 0, "calls": []}
    names = {"default": 0, "warn": 1, "error": 2}

    def set_mode(mode: int | str) -> None:
        if isinstance(mode, str):
            if mode not in names:
                raise RuntimeError(
                    "invalid value of debug_mode, expected one of `default`, `warn`, `error`"
                )
            mode = names[mode]
        state["calls"].append(mode)
        state["mode"] = mode

    def synchronize(device: Any = None) -> None:
        time.sleep(0.002)
        state["synchronized"] += 1

    def stream_synchronize(self: Any) -> None:
        if state["mode"] == 1:
            warnings.warn(TORCH_SYNC_WARNING, UserWarning, stacklevel=1)
        synchronize()

    def event_synchronize(self: Any) -> None:
        synchronize()

    def accelerator_synchronize(device: Any = None, /) -> None:
        synchronize()

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: state["mode"])
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", set_mode)
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    monkeypatch.setattr(torch.cuda.Stream, "synchronize", stream_synchronize)
    monkeypatch.setattr(torch.cuda.Event, "synchronize", event_synchronize)
    monkeypatch.setattr(torch.accelerator, "synchronize", accelerator_synchronize)
    state["synchronize"] = synchronize
    state["originals"] = _sync_functions()
    return state


def _sync_functions() -> dict[str, Any]:
    return {
        "torch.cuda": torch.cuda.__dict__.get("synchronize"),
        "Stream": torch.cuda.Stream.__dict__.get("synchronize"),
        "Event": torch.cuda.Event.__dict__.get("synchronize"),
        "accelerator": torch.accelerator.__dict__.get("synchronize"),
    }


def _assert_cuda_restored(fake_cuda: dict[str, Any], filters: list[Any], show: Any) -> None:
    assert fake_cuda["mode"] == 0
    assert warnings.filters == filters
    assert warnings.showwarning is show
    assert _sync_functions() == fake_cuda["originals"]


def test_cuda_mode_catches_sync_warnings_and_explicit_syncs(fake_cuda: dict[str, Any]) -> None:
    filters = list(warnings.filters)
    show = warnings.showwarning
    event_sync = torch.cuda.Event.__dict__.get("synchronize")
    seen: list[SyncEvent] = []
    with SyncDetector(seen.append, mode="cuda") as det:
        assert det.active == "cuda"
        assert fake_cuda["mode"] == 1
        # what torch's C++ side does at an implicit sync in sync debug mode "warn"
        warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)
        warn_line = inspect.currentframe().f_lineno - 1  # type: ignore[union-attr]
        warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)
        torch.cuda.synchronize()
        sync_line = inspect.currentframe().f_lineno - 1  # type: ignore[union-attr]
        # a CPU tensor printed is no CUDA sync
        repr(x)
    assert [(e.op, e.site) for e in seen] == [
        ("cuda sync (sync debug mode)", f"{__file__}:{warn_line}"),
        ("cuda sync (sync debug mode)", f"{__file__}:{warn_line + 2}"),
        ("torch.cuda.synchronize", f"{__file__}:{sync_line}"),
    ]
    assert seen[2].wait_ns >= 2_000_000
    assert fake_cuda["synchronized"] == 1
    # everything put back
    assert fake_cuda["mode"] == 0
    assert warnings.filters == filters
    assert warnings.showwarning is show
    assert torch.cuda.synchronize is fake_cuda["synchronize"]
    assert torch.cuda.Event.__dict__.get("synchronize") is event_sync
    # other warnings still reach the user untouched
    with pytest.warns(UserWarning, match="unrelated"):
        warnings.warn("unrelated", UserWarning, stacklevel=1)


def test_cuda_mode_counts_torchs_own_warning_at_the_users_line(fake_cuda: dict[str, Any]) -> None:
    filters = list(warnings.filters)
    show = warnings.showwarning
    item = _torch_op("item")
    seen: list[SyncEvent] = []
    with warnings.catch_warnings():
        # the user's (or pytest's) "error" filter must not turn a watched sync into an exception
        warnings.simplefilter("error")
        inner = list(warnings.filters)
        with SyncDetector(seen.append, mode="cuda"):
            item()
            first = inspect.currentframe().f_lineno - 1  # type: ignore[union-attr]
            item()
        assert warnings.filters == inner
    assert [(e.op, e.site) for e in seen] == [
        ("cuda sync (sync debug mode)", f"{__file__}:{first}"),
        ("cuda sync (sync debug mode)", f"{__file__}:{first + 2}"),
    ]
    assert [e.wait_ns for e in seen] == [0, 0]  # an implicit sync's wait is not measurable
    _assert_cuda_restored(fake_cuda, filters, show)


def test_each_explicit_sync_counts_once_with_its_wait(fake_cuda: dict[str, Any]) -> None:
    filters = list(warnings.filters)
    show = warnings.showwarning
    # torch.cuda.Stream()/Event() need a CUDA build (their bases are dummy types here); the
    # methods are looked up on the class, as they are on a real stream or event
    stream = object.__new__(torch.cuda.Stream)
    event = object.__new__(torch.cuda.Event)
    seen: list[SyncEvent] = []
    with SyncDetector(seen.append, mode="cuda"):
        torch.cuda.synchronize()
        stream.synchronize()  # also warns inside, as stream_synchronize() does: one sync
        event.synchronize()
        torch.accelerator.synchronize()
    assert [e.op for e in seen] == [
        "torch.cuda.synchronize",
        "Stream.synchronize",
        "Event.synchronize",
        "torch.accelerator.synchronize",
    ]
    assert all(e.site.startswith(f"{__file__}:") for e in seen)
    assert all(e.wait_ns >= 2_000_000 for e in seen)
    assert fake_cuda["synchronized"] == 4
    _assert_cuda_restored(fake_cuda, filters, show)


def test_a_failing_sync_raises_and_detection_goes_on(
    fake_cuda: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_synchronize(device: Any = None) -> None:
        # how an earlier kernel's error surfaces: at the next synchronizing call
        raise RuntimeError("CUDA error: device-side assert triggered")

    monkeypatch.setattr(torch.cuda, "synchronize", failing_synchronize)
    fake_cuda["originals"] = _sync_functions()
    filters = list(warnings.filters)
    show = warnings.showwarning
    item = _torch_op("item")
    seen: list[SyncEvent] = []
    with SyncDetector(seen.append, mode="cuda"):
        with pytest.raises(RuntimeError, match="device-side assert"):
            torch.cuda.synchronize()
        item()  # not hidden by the failed call's suppression
    assert [e.op for e in seen] == ["cuda sync (sync debug mode)"]
    _assert_cuda_restored(fake_cuda, filters, show)


def test_cuda_detectors_share_the_hooks_and_the_last_stop_restores(
    fake_cuda: dict[str, Any],
) -> None:
    filters = list(warnings.filters)
    show = warnings.showwarning
    item = _torch_op("item")
    a: list[SyncEvent] = []
    b: list[SyncEvent] = []
    da = SyncDetector(a.append, mode="cuda")
    db = SyncDetector(b.append, mode="cuda")
    da.start()
    db.start()
    assert fake_cuda["calls"] == [1]  # installed once
    item()
    torch.cuda.synchronize()
    da.stop()  # not LIFO on purpose
    assert fake_cuda["mode"] == 1
    item()
    db.stop()
    item()
    assert [e.op for e in a] == ["cuda sync (sync debug mode)", "torch.cuda.synchronize"]
    assert [e.op for e in b] == [*(e.op for e in a), "cuda sync (sync debug mode)"]
    assert fake_cuda["calls"] == [1, 0]
    _assert_cuda_restored(fake_cuda, filters, show)


def test_a_failed_cuda_start_leaves_nothing_behind(
    fake_cuda: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    tensor = _tensor_state()
    filters = list(warnings.filters)
    show = warnings.showwarning

    def not_here() -> int:
        # torch.cuda._lazy_init's error in a child forked after the parent used CUDA; every
        # sync-debug-mode call initializes CUDA first
        raise RuntimeError(
            "Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, "
            "you must use the 'spawn' start method"
        )

    with monkeypatch.context() as m:
        m.setattr(torch.cuda, "get_sync_debug_mode", not_here)
        det = SyncDetector(lambda e: None, mode="cuda")
        with pytest.raises(RuntimeError, match="forked subprocess"):
            det.start()
    assert det.active is None
    assert _tensor_state() == tensor
    _assert_cuda_restored(fake_cuda, filters, show)
    # and the next start installs everything afresh
    seen: list[SyncEvent] = []
    with SyncDetector(seen.append, mode="cuda"):
        torch.cuda.synchronize()
    assert [e.op for e in seen] == ["torch.cuda.synchronize"]
    assert _tensor_state() == tensor
    _assert_cuda_restored(fake_cuda, filters, show)


def test_a_failing_restore_still_undoes_every_other_hook(
    fake_cuda: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    filters = list(warnings.filters)
    show = warnings.showwarning
    before = _tensor_state()
    det = SyncDetector(lambda e: None, mode="cuda")
    det.start()
    set_mode = torch.cuda.set_sync_debug_mode

    def failing(mode: int | str) -> None:
        raise RuntimeError("driver gone")

    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", failing)
    with pytest.raises(RuntimeError, match="driver gone"):
        det.stop()
    # was: the Tensor wrappers stayed installed after the failing restore
    assert _tensor_state() == before
    assert warnings.filters == filters
    assert warnings.showwarning is show
    assert _sync_functions() == fake_cuda["originals"]
    set_mode(0)


def test_the_users_own_sync_debug_mode_is_kept(
    fake_cuda: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    filters = list(warnings.filters)
    item = _torch_op("item")
    seen: list[SyncEvent] = []

    # "error": torch raises at each implicit sync; watching must not turn that off
    torch.cuda.set_sync_debug_mode("error")
    with SyncDetector(seen.append, mode="cuda"):
        assert fake_cuda["mode"] == 2
        with pytest.raises(RuntimeError, match="synchronizing CUDA operation"):
            item()
        torch.cuda.synchronize()  # explicit syncs are still timed
    assert fake_cuda["calls"] == [2]
    assert fake_cuda["mode"] == 2
    assert [e.op for e in seen] == ["torch.cuda.synchronize"]

    # "warn": the user asked to see torch's warnings, and still does, each one counted too
    torch.cuda.set_sync_debug_mode("warn")
    shown: list[str] = []

    def users_showwarning(message: Any, *args: Any, **kwargs: Any) -> None:
        shown.append(str(message))

    monkeypatch.setattr(warnings, "showwarning", users_showwarning)
    seen.clear()
    with SyncDetector(seen.append, mode="cuda"):
        item()
    assert fake_cuda["calls"] == [2, 1]
    assert fake_cuda["mode"] == 1
    assert [e.op for e in seen] == ["cuda sync (sync debug mode)"]
    assert shown == [TORCH_SYNC_WARNING]
    assert warnings.filters == filters
    assert warnings.showwarning is users_showwarning
    torch.cuda.set_sync_debug_mode("default")


def test_a_filter_the_user_already_had_is_kept(fake_cuda: dict[str, Any]) -> None:
    with warnings.catch_warnings():
        # the very filter the detector adds (pytest's filterwarnings can spell it too)
        warnings.filterwarnings(
            "always", message=".*called a synchronizing CUDA operation", category=UserWarning
        )
        warnings.simplefilter("error")
        users = list(warnings.filters)
        seen: list[SyncEvent] = []
        with SyncDetector(seen.append, mode="cuda"):
            _torch_op("item")()
        assert len(seen) == 1
        assert warnings.filters == users


def test_a_hook_put_back_after_stop_passes_every_warning_on(
    fake_cuda: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    shown: list[str] = []

    def users_showwarning(message: Any, *args: Any, **kwargs: Any) -> None:
        shown.append(str(message))

    monkeypatch.setattr(warnings, "showwarning", users_showwarning)
    det = SyncDetector(lambda e: None, mode="cuda")
    det.start()
    # logging.captureWarnings saves the hook in place (ours) and restores it when turned off,
    # which here is after the detector stopped
    logging.captureWarnings(True)
    try:
        det.stop()
    finally:
        logging.captureWarnings(False)
    stale = warnings.showwarning
    assert stale is not users_showwarning
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        # e.g. the user's own torch.cuda.set_sync_debug_mode("warn") later on
        warnings.warn(TORCH_SYNC_WARNING, UserWarning, stacklevel=1)
        warnings.warn("unrelated", UserWarning, stacklevel=1)
    assert shown == [TORCH_SYNC_WARNING, "unrelated"]


def test_a_start_in_one_thread_waits_for_a_stop_in_another(
    fake_cuda: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    filters = list(warnings.filters)
    show = warnings.showwarning
    a = SyncDetector(lambda e: None, mode="cuda")
    a.start()
    seen: list[SyncEvent] = []
    b = SyncDetector(seen.append, mode="cuda")
    set_mode = torch.cuda.set_sync_debug_mode
    restoring = threading.Event()
    release = threading.Event()

    def slow_set_mode(mode: int | str) -> None:
        set_mode(mode)
        if mode == 0 and not restoring.is_set():
            # a's stop() is putting the mode back: hold it there while b starts
            restoring.set()
            release.wait(10)

    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", slow_set_mode)
    errors: list[BaseException] = []

    def run(fn: Callable[[], None]) -> threading.Thread:
        def target() -> None:
            try:
                fn()
            except BaseException as e:  # reported by the test, not lost in the thread
                errors.append(e)

        t = threading.Thread(target=target)
        t.start()
        return t

    stopping = run(a.stop)
    try:
        assert restoring.wait(10)
        starting = run(b.start)
        starting.join(0.2)  # b either waits for a's stop to finish, or races it
        release.set()
        stopping.join(10)
        starting.join(10)
        assert not errors
        assert b.active == "cuda"
        # b's hooks are in place: a's stop() finished before b installed them
        assert fake_cuda["mode"] == 1
        torch.cuda.synchronize()
        assert [e.op for e in seen] == ["torch.cuda.synchronize"]
    finally:
        release.set()
        b.stop()
    _assert_cuda_restored(fake_cuda, filters, show)


def test_a_sync_is_placed_at_the_users_line_under_python_314s_warnings(
    fake_cuda: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Python 3.14 moved the warnings code to _py_warnings.py, and ``warnings`` re-exports its
    # _showwarnmsg; the C warn() looks ``warnings._showwarnmsg`` up for every warning
    # (Python/_warnings.c, call_show_warning). This is 3.14's function, in a frame of its file.
    path = os.path.join(os.path.dirname(warnings.__file__), "_py_warnings.py")
    code = compile(
        "def _showwarnmsg(msg):\n"
        "    sw = _wm.showwarning\n"
        "    if sw is not _showwarning_orig:\n"
        "        sw(msg.message, msg.category, msg.filename, msg.lineno, msg.file, msg.line)\n"
        "        return\n"
        "    _wm._showwarnmsg_impl(msg)\n",
        path,
        "exec",
    )
    env: dict[str, Any] = {
        "__name__": "_py_warnings",
        "_wm": warnings,
        "_showwarning_orig": warnings._showwarning_orig,  # type: ignore[attr-defined]
    }
    exec(code, env)
    monkeypatch.setattr(warnings, "_showwarnmsg", env["_showwarnmsg"])
    item = _torch_op("item")
    seen: list[SyncEvent] = []
    with SyncDetector(seen.append, mode="cuda"):
        item()
        line = inspect.currentframe().f_lineno - 1  # type: ignore[union-attr]
    assert [(e.op, e.site) for e in seen] == [("cuda sync (sync debug mode)", f"{__file__}:{line}")]


def test_a_session_on_cuda_counts_its_syncs_per_step_with_their_wait(
    fake_cuda: dict[str, Any],
) -> None:
    import asynctrace
    from asynctrace.capture.devices import FakeClock, FakeDevice

    filters = list(warnings.filters)
    show = warnings.showwarning
    item = _torch_op("item")
    # detect_syncs="auto" is the CUDA hooks where torch sees CUDA
    session = asynctrace.trace(
        device=FakeDevice(FakeClock()), write=False, print_summary=False, nvtx=False
    )
    with session:
        for _ in range(3):
            item()
            item_line = inspect.currentframe().f_lineno - 1  # type: ignore[union-attr]
            torch.cuda.synchronize()
            sync_line = inspect.currentframe().f_lineno - 1  # type: ignore[union-attr]
            session.step()
    report = session.summary()
    assert report.figures["sync_count"].mean == 2
    sites = {(s.site, s.op): s for s in report.sync_sites}
    implicit = sites[f"{__file__}:{item_line}", "cuda sync (sync debug mode)"]
    explicit = sites[f"{__file__}:{sync_line}", "torch.cuda.synchronize"]
    assert (implicit.count, implicit.steps, implicit.wait_ns) == (3, 3, 0)
    assert (explicit.count, explicit.steps) == (3, 3)
    assert explicit.wait_ns >= 3 * 2_000_000
    assert len(sites) == 2
    _assert_cuda_restored(fake_cuda, filters, show)


def test_expect_syncs_auto_uses_the_cuda_hooks_where_cuda_is(fake_cuda: dict[str, Any]) -> None:
    from asynctrace import UnexpectedSyncError, expect_syncs

    item = _torch_op("item")

    @expect_syncs(max=0, per="total", mode="auto")
    def step() -> None:
        item()  # sync

    with pytest.raises(UnexpectedSyncError) as err:
        step()
    site = marked_line(step.__wrapped__)  # type: ignore[attr-defined]
    assert f"{site}: cuda sync (sync debug mode) ×1" in str(err.value)
    assert fake_cuda["mode"] == 0


@pytest.mark.gpu
def test_cuda_hooks_on_a_real_gpu() -> None:  # pragma: no cover - GPU machines only
    # the text the fakes above stand for is torch's own
    assert torch.cuda.get_sync_debug_mode() == 0
    t = torch.ones(4, device="cuda")
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t.sum().item()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert any(syncs._SYNC_WARNING in str(w.message) for w in caught), caught

    seen: list[SyncEvent] = []
    event = torch.cuda.Event()
    with SyncDetector(seen.append, mode="cuda"):
        t.sum().item()
        lines = [inspect.currentframe().f_lineno - 1]  # type: ignore[union-attr]
        torch.cuda.current_stream().synchronize()  # one sync, though it warns inside too
        lines.append(inspect.currentframe().f_lineno - 1)  # type: ignore[union-attr]
        event.record()
        event.synchronize()
        lines.append(inspect.currentframe().f_lineno - 1)  # type: ignore[union-attr]
        torch.cuda.synchronize()
        lines.append(inspect.currentframe().f_lineno - 1)  # type: ignore[union-attr]
        repr(t)  # one read, though printing copies more than once
        lines.append(inspect.currentframe().f_lineno - 1)  # type: ignore[union-attr]
    assert [(e.op, e.site) for e in seen] == [
        (op, f"{__file__}:{line}")
        for op, line in zip(
            [
                "cuda sync (sync debug mode)",
                "Stream.synchronize",
                "Event.synchronize",
                "torch.cuda.synchronize",
                "Tensor.__repr__",
            ],
            lines,
            strict=True,
        )
    ]
    assert torch.cuda.get_sync_debug_mode() == 0


def test_expect_syncs_in_two_threads_ends_each_threads_own_entry(
    fake_cuda: dict[str, Any],
) -> None:
    # one guard decorating a function that runs in two threads at once (CUDA hooks: not bound
    # to a thread): main enters, then the worker; the worker leaves first and must end its own
    # entry (a shared stack ended main's, and main's exit then ended the worker's)
    import threading

    guard = expect_syncs(mode="cuda")
    inside, leave = threading.Event(), threading.Event()
    worker_entry: list[Any] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with guard:
                worker_entry.append(guard._entries()[-1])
                inside.set()
                leave.wait()
        except BaseException as e:
            errors.append(e)

    with guard:
        (mine,) = guard._entries()
        t = threading.Thread(target=worker)
        t.start()
        inside.wait()
        leave.set()
        t.join()
        assert not errors
        assert guard._entries() == [mine]  # still open, and only main's
        assert mine[1].active == "cuda"
        assert worker_entry[0][1].active is None  # the worker's own detector stopped
    assert mine[1].active is None


def test_a_suspended_lint_is_off_the_dispatch_stack_and_counts_nothing() -> None:
    before = _tensor_state()
    seen: list[SyncEvent] = []
    det = SyncDetector(seen.append, mode="lint")
    det.start()
    try:
        x = torch.ones(3)
        x.sum().item()
        det.suspend()
        det.suspend()  # idempotent
        assert det.suspended
        assert torch._C._len_torch_dispatch_stack() == 0
        x.sum().item()
        x.tolist()
        det.resume()
        assert torch._C._len_torch_dispatch_stack() == 1
        x.sum().item()
        with det.suspending():
            x.sum().item()
        det.suspend()
    finally:
        det.stop()  # ends the suspension; nothing pushed back for a detector that leaves
    assert len(seen) == 2
    assert not det.suspended
    assert torch._C._len_torch_dispatch_stack() == 0
    assert _tensor_state() == before
    # a detector that runs no lint has nothing to suspend
    off = SyncDetector(seen.append, mode="off")
    off.start()
    off.suspend()
    assert not off.suspended
    off.stop()


def test_a_suspension_holds_every_lint_detector_off_until_the_last_resume() -> None:
    a_seen: list[SyncEvent] = []
    b_seen: list[SyncEvent] = []
    a = SyncDetector(a_seen.append, mode="lint")
    b = SyncDetector(b_seen.append, mode="lint")
    a.start()
    b.start()
    try:
        a.suspend()
        b.suspend()
        a.resume()
        torch.ones(1).item()  # b still holds the lint off
        assert torch._C._len_torch_dispatch_stack() == 0
        b.stop()  # b leaves while suspended: a's lint comes back
        assert torch._C._len_torch_dispatch_stack() == 1
        torch.ones(1).item()
    finally:
        b.stop()
        a.stop()
    assert (len(a_seen), len(b_seen)) == (1, 0)
    assert torch._C._len_torch_dispatch_stack() == 0


def test_suspending_the_lint_keeps_dispatch_mode_events_out_of_a_profiled_window(
    tmp_path: Any,
) -> None:
    import gzip
    import json

    from asynctrace.capture.profiler import DeepProfiler, Profile

    model = nn.Linear(16, 16)
    seen: list[SyncEvent] = []
    det = SyncDetector(seen.append, mode="lint")
    prof = DeepProfiler(Profile(wait=1, warmup=1, active=2, annotate=False), dir=tmp_path, run="r")
    det.start()
    try:
        prof.start()
        # what the session does after starting deep mode and after each of its steps
        det.suspend_while(prof.active)
        for _ in range(6):
            model(torch.randn(8, 16)).sum().item()
            prof.step()
            det.suspend_while(prof.active)
        prof.stop()
    finally:
        det.stop()
    (trace,) = prof.traces
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    # before (the lint on throughout): one PythonDispatchMode event around every op
    assert not [e for e in events if "PythonDispatchMode" in str(e.get("name"))]
    # steps 0, 4, 5 were outside the window (1 warm-up, 2-3 recorded): the lint counted those
    assert len(seen) == 3
    assert det.held_steps == 3


def test_a_lint_session_in_deep_mode_leaves_the_profiled_steps_undistorted(
    tmp_path: Any,
) -> None:
    import gzip
    import json

    import asynctrace

    model = nn.Linear(16, 16)
    profile = asynctrace.Profile(wait=1, warmup=1, active=2, annotate=False)
    with asynctrace.trace(
        "p", dir=tmp_path, detect_syncs="lint", profile=profile, print_summary=False
    ) as s:
        for _ in s.steps(range(6)):
            model(torch.randn(8, 16)).sum().item()
    (trace,) = tmp_path.glob("**/*.pt.trace.json.gz")
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    assert not [e for e in events if "PythonDispatchMode" in str(e.get("name"))]
    (records,) = tmp_path.glob("*.records.jsonl")
    from asynctrace.records import read_records

    # the lint counted the steps outside the window (0, 4, 5); the trace holds the others'
    assert [st.sync_count for st in read_records(records).steps] == [1, 0, 0, 0, 1, 1]
