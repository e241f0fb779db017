"""SyncDetector: every op kind the lint catches, at its exact file:line, and clean restoration."""

from __future__ import annotations

import inspect
import os
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from asynctrace.capture import syncs
from asynctrace.capture.syncs import MAX_STACK_DEPTH, SyncDetector, SyncEvent
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


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """torch.cuda's sync hooks, simulated on a machine without CUDA."""
    state: dict[str, Any] = {"mode": 0, "synchronized": 0}

    def synchronize(device: Any = None) -> None:
        time.sleep(0.002)
        state["synchronized"] += 1

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: state["mode"])
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda m: state.__setitem__("mode", m))
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    state["synchronize"] = synchronize
    return state


def test_cuda_mode_catches_sync_warnings_and_explicit_syncs(fake_cuda: dict[str, Any]) -> None:
    filters = list(warnings.filters)
    show = warnings.showwarning
    event_sync = torch.cuda.Event.__dict__.get("synchronize")
    seen: list[SyncEvent] = []
    with SyncDetector(seen.append, mode="cuda") as det:
        assert det.active == "cuda"
        assert fake_cuda["mode"] == "warn"
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
