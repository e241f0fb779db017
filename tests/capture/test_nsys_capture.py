"""``nsys_capture``: the profiler window opens and closes on exactly the chosen steps."""

from __future__ import annotations

import warnings

import pytest

from asynctrace.capture._nsys import NsysCapture
from asynctrace.errors import AsyncTraceWarning


def _recording(steps: object, kind: str = "cuda") -> tuple[NsysCapture, list[str]]:
    calls: list[str] = []
    cap = NsysCapture(
        steps,  # type: ignore[arg-type]
        device_kind=kind,
        start=lambda: calls.append("start"),
        stop=lambda: calls.append("stop"),
    )
    return cap, calls


def _run(cap: NsysCapture, n_steps: int) -> list[int]:
    """Drive ``n_steps`` steps; return the steps that ran with the window open."""
    captured = []
    for step in range(n_steps):
        cap.on_step_start(step)
        if cap.active:
            captured.append(step)
    cap.close()
    return captured


def test_range_captures_exactly_those_steps() -> None:
    cap, calls = _recording(range(10, 20))
    assert _run(cap, 30) == list(range(10, 20))
    assert calls == ["start", "stop"]
    assert cap.starts == 1
    assert not cap.active


def test_window_still_open_at_exit_is_closed() -> None:
    cap, calls = _recording(range(3, 100))
    assert _run(cap, 5) == [3, 4]
    assert calls == ["start", "stop"]
    cap.close()  # twice is harmless
    assert calls == ["start", "stop"]


def test_disjoint_sets_open_the_window_once_per_run_of_steps() -> None:
    cap, calls = _recording([1, 2, 5])
    assert _run(cap, 8) == [1, 2, 5]
    assert calls == ["start", "stop", "start", "stop"]
    assert cap.starts == 2


def test_steps_never_reached_call_nothing() -> None:
    cap, calls = _recording(range(50, 60))
    assert _run(cap, 10) == []
    assert calls == []


def _run_twice(cap: NsysCapture, n_steps: int) -> None:
    for step in range(n_steps):
        cap.on_step_start(step)
        cap.on_step_start(step)
    cap.close()


def test_cpu_is_a_noop_with_one_warning() -> None:
    cap, calls = _recording(range(2, 4), kind="cpu")
    with pytest.warns(AsyncTraceWarning, match="no CUDA/ROCm device") as record:
        _run_twice(cap, 6)
    assert len(record) == 1
    assert calls == []
    assert not cap.enabled
    # a CPU session that never reaches the chosen steps does not warn at all
    quiet, _ = _recording(range(100, 101), kind="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _run(quiet, 5)


@pytest.mark.parametrize("bad", ["10-20", 3, [1, -1], [1.5], [True]])
def test_bad_steps_are_rejected(bad: object) -> None:
    with pytest.raises((TypeError, ValueError), match="nsys_capture"):
        _recording(bad)


def test_default_start_stop_use_the_torch_profiler_api(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.cuda.profiler

    calls: list[str] = []
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: calls.append("cudaProfilerStart"))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: calls.append("cudaProfilerStop"))
    cap = NsysCapture(range(1, 2), device_kind="cuda")
    _run(cap, 3)
    assert calls == ["cudaProfilerStart", "cudaProfilerStop"]
