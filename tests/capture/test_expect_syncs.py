"""expect_syncs: a CPU guard naming file:line of every sync beyond the budget."""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from torch import nn

import asynctrace
from asynctrace import AsyncTraceWarning, UnexpectedSyncError, expect_syncs
from asynctrace.capture.devices import FakeClock, FakeDevice


def here(offset: int = 0) -> str:
    """file:line of the caller's line plus ``offset``."""
    frame = inspect.currentframe()
    assert frame is not None
    assert frame.f_back is not None
    return f"{__file__}:{frame.f_back.f_lineno + offset}"


def _step(model: nn.Module, opt: torch.optim.Optimizer, log: bool) -> float | None:
    loss = nn.functional.mse_loss(model(torch.ones(4, 3)), torch.zeros(4, 1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item() if log else None


def test_guard_a_training_step_in_a_cpu_test() -> None:
    model = nn.Linear(3, 1)
    opt = torch.optim.Adam(model.parameters())
    with expect_syncs():
        _step(model, opt, log=False)
    line = inspect.getsourcelines(_step)[1] + 5
    with pytest.raises(UnexpectedSyncError) as err, expect_syncs():
        _step(model, opt, log=True)
    msg = str(err.value)
    assert f"{__file__}:{line}: aten::_local_scalar_dense ×1" in msg
    # outside a session the block is the bucket, and the message says so
    assert "at most 0 per block (no asynctrace.trace session, so no steps) allowed" in msg


def test_only_the_excess_is_named() -> None:
    x = torch.ones(3)
    sites: list[str] = []

    def body() -> None:
        x.sum().item()
        sites.append(here(-1))
        x.tolist()
        sites.append(here(-1))

    with pytest.raises(UnexpectedSyncError) as err:
        expect_syncs(max=1)(body)()
    first, second = sites
    msg = str(err.value)
    assert msg.startswith("1 unexpected host-device synchronization (at most 1 per block")
    assert f"{second}: Tensor.tolist ×1" in msg
    assert f"{first}:" not in msg


def test_counts_repeat_at_one_site() -> None:
    x = torch.ones(3)

    @expect_syncs(per="total")
    def body() -> None:
        for _ in range(3):
            x.sum().item()

    with pytest.raises(UnexpectedSyncError, match=re.escape("×3")):
        body()


def test_warn_instead_of_raise() -> None:
    x = torch.ones(3)
    with pytest.warns(AsyncTraceWarning, match=re.escape(here(1))), expect_syncs(action="warn"):
        bool(x.any())


def test_decorator_counts_per_call() -> None:
    x = torch.ones(3)

    @expect_syncs(max=1, per="call")
    def once() -> float:
        return x.sum().item()

    assert [once() for _ in range(3)] == [3.0, 3.0, 3.0]

    @expect_syncs(max=1, per="call")
    def twice() -> float:
        return x.sum().item() + x.max().item()

    with pytest.raises(UnexpectedSyncError, match=re.escape("aten::_local_scalar_dense ×1")):
        twice()
    assert twice.__name__ == "twice"


def test_the_body_error_wins_over_the_count() -> None:
    x = torch.ones(3)

    @expect_syncs()
    def body() -> None:
        x.sum().item()
        raise KeyError("body")

    with pytest.raises(KeyError):
        body()


def test_a_guard_can_be_reused_and_nested() -> None:
    x = torch.ones(3)
    guard = expect_syncs(max=1)
    with guard:
        x.sum().item()

    @guard
    @expect_syncs(max=5)
    def body() -> None:
        x.sum().item()
        x.sum().item()

    with pytest.raises(UnexpectedSyncError) as err:
        body()
    assert str(err.value).startswith("1 unexpected")


def test_bad_options() -> None:
    with pytest.raises(ValueError, match="max"):
        expect_syncs(max=-1)
    with pytest.raises(ValueError, match="per"):
        expect_syncs(per="epoch")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="action"):
        expect_syncs(action="ignore")  # type: ignore[arg-type]


def _session() -> asynctrace.Session:
    return asynctrace.trace(
        device=FakeDevice(FakeClock()), write=False, print_summary=False, nvtx=False
    )


def test_per_step_counts_per_session_step() -> None:
    x = torch.ones(3)
    with _session() as session, expect_syncs(max=1):
        for _ in range(3):
            x.sum().item()
            session.step()
    lines: list[str] = []

    def body() -> None:
        with _session() as session, expect_syncs(max=1):
            for i in range(3):
                x.sum().item()
                if i == 1:
                    x.tolist()
                    lines.append(here(-1))
                session.step()

    with pytest.raises(UnexpectedSyncError) as err:
        body()
    assert str(err.value).startswith("1 unexpected host-device synchronization (at most 1 per step")
    assert f"{lines[0]}: Tensor.tolist ×1" in str(err.value)


def test_session_lint_counts_syncs_per_step_with_sites() -> None:
    x = torch.ones(3)
    session = asynctrace.trace(
        device=FakeDevice(FakeClock()),
        write=False,
        print_summary=False,
        nvtx=False,
        detect_syncs="lint",
    )
    with session:
        for i in range(4):
            x.sum().item()
            item_line = here(-1)
            if i % 2:
                print(x)
                print_line = here(-1)
            session.step()
    report = session.summary()
    assert report.figures["sync_count"].mean == 1.5
    sites = {(s.site, s.op): (s.count, s.steps) for s in report.sync_sites}
    assert sites == {
        (item_line, "aten::_local_scalar_dense"): (4, 4),
        (print_line, "Tensor.__repr__"): (2, 2),
    }


def test_async_and_generator_functions_are_guarded_while_their_body_runs() -> None:
    import asyncio

    x = torch.ones(3)

    @expect_syncs()
    async def coroutine() -> float:
        await asyncio.sleep(0)
        return x.sum().item()

    @expect_syncs()
    def generator() -> object:
        yield x.sum().item()

    # before, the guard opened and closed around creating the coroutine/generator: no sync seen
    with pytest.raises(UnexpectedSyncError, match="aten::_local_scalar_dense"):
        asyncio.run(coroutine())
    with pytest.raises(UnexpectedSyncError, match="aten::_local_scalar_dense"):
        list(generator())  # type: ignore[call-overload]

    async def agen() -> object:
        yield 1

    with pytest.raises(asynctrace.CaptureError, match="async generator"):
        expect_syncs()(agen)
