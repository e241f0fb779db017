"""asynctrace.range: balance, colours, the fast path, record_function only while profiling."""

from __future__ import annotations

import threading
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import asynctrace  # noqa: E402
from asynctrace.capture import ranges  # noqa: E402


class _Recorder:
    """Stands in for the NVTX domain to see exactly what is pushed and popped."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def push_range(self, attributes: Any) -> None:
        self.calls.append(("push", attributes))

    def pop_range(self) -> None:
        self.calls.append(("pop", None))


class _FakeNvtx:
    """The NVTX state as if a tool were attached: attributes carry (name, colour)."""

    def __init__(self, domain: _Recorder, depth: int) -> None:
        self.domain = domain
        self.attached = True
        self.depth = depth

    def cached(self, name: str, color: int | None) -> ranges._Handle | None:
        return None

    def handle(self, name: str, color: int | None, *, cache: bool) -> ranges._Handle:
        return ranges._Handle(name, (name, ranges.color_of(name) if color is None else color))


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> _Recorder:
    """Route NVTX calls to a recorder, as if a tool were attached."""
    rec = _Recorder()
    monkeypatch.setattr(ranges, "_state", _FakeNvtx(rec, ranges.open_ranges()))
    return rec


def names(rec: _Recorder) -> list[str]:
    return [f"push {a[0]}" if op == "push" else "pop" for op, a in rec.calls]


def test_context_manager_nests_and_pops(recorded: _Recorder) -> None:
    with asynctrace.range("forward"):
        assert ranges.open_ranges() == 1
        with asynctrace.range("inner"):
            assert ranges.open_ranges() == 2
    assert names(recorded) == ["push forward", "push inner", "pop", "pop"]


def test_balanced_when_body_raises(recorded: _Recorder) -> None:
    with pytest.raises(KeyError), asynctrace.range("outer"), asynctrace.range("boom"):
        raise KeyError("x")
    assert names(recorded) == ["push outer", "push boom", "pop", "pop"]


def test_decorator(recorded: _Recorder) -> None:
    @asynctrace.range("train_step")
    def step(x: int) -> int:
        if x < 0:
            raise ValueError("negative")
        return x * 2

    assert step(3) == 6
    with pytest.raises(ValueError, match="negative"):
        step(-1)
    assert step.__name__ == "step"
    assert names(recorded) == ["push train_step", "pop"] * 2


def test_decorator_recursion_and_reentry(recorded: _Recorder) -> None:
    @asynctrace.range("rec")
    def f(n: int) -> int:
        return 0 if n == 0 else 1 + f(n - 1)

    assert f(2) == 2
    assert names(recorded) == ["push rec"] * 3 + ["pop"] * 3
    r = asynctrace.range("same")
    with r, r:
        assert ranges.open_ranges() == 2


def test_decorator_from_threads_stays_balanced() -> None:
    @asynctrace.range("worker")
    def work() -> None:
        for _ in range(200):
            with asynctrace.range("leaf"):
                pass

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_colour_is_stable_and_in_palette(recorded: _Recorder) -> None:
    # crc32("forward") = 0x... fixed; the palette index must not depend on the process
    import zlib

    for name in ("forward", "backward", "step 0", "ünïcode"):
        c = ranges.color_of(name)
        assert c == ranges.PALETTE[zlib.crc32(name.encode()) % len(ranges.PALETTE)]
        assert c >> 24 == 0xFF  # opaque ARGB
    with asynctrace.range("custom", color=0xFF123456):
        pass
    assert recorded.calls[0][1] == ("custom", 0xFF123456)


def test_empty_name_rejected() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        asynctrace.range("")


def test_fast_path_for_session_steps(recorded: _Recorder) -> None:
    for n in range(3):
        h = ranges._handle(f"step {n}", cache=False)
        ranges._push(h)
        with asynctrace.range("forward"):
            pass
        ranges._pop()
    expected = []
    for n in range(3):
        expected += [f"push step {n}", "push forward", "pop", "pop"]
    assert names(recorded) == expected


def test_no_tool_attached_pushes_nothing_but_counts() -> None:
    state = ranges._nvtx()
    if state.attached:
        pytest.skip("an NVTX tool is attached to this process")
    with asynctrace.range("a"):
        assert ranges.open_ranges() >= 1
    assert ranges._handle("a").attributes is None


def test_handle_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    state = ranges._nvtx()
    monkeypatch.setattr(state, "_cache", {})
    monkeypatch.setattr(ranges, "_CACHE_SIZE", 8)
    for i in range(50):
        ranges._handle(f"name {i}")
    assert len(state._cache) == 8
    # the newest names are the ones kept
    assert ("name 49", None) in state._cache
    assert ("name 0", None) not in state._cache
    ranges._handle("once", cache=False)
    assert ("once", None) not in state._cache


def test_record_function_only_while_profiling() -> None:
    from torch.profiler import ProfilerActivity, profile

    with asynctrace.range("outside"):
        torch.ones(2) + 1
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with asynctrace.range("inside"):
            torch.ones(2) + 1

        @asynctrace.range("decorated")
        def f() -> None:
            torch.ones(2) * 2

        f()
    keys = {e.key for e in prof.key_averages()}
    assert "inside" in keys
    assert "decorated" in keys
    assert "outside" not in keys


def test_record_function_closed_when_body_raises() -> None:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with pytest.raises(RuntimeError), asynctrace.range("fails"):
            raise RuntimeError("x")
        with asynctrace.range("after"):
            pass
    keys = {e.key for e in prof.key_averages()}
    assert {"fails", "after"} <= keys


def test_range_refuses_to_decorate_async_and_generator_functions() -> None:
    # their body runs after the call returns, interleaved with other code on the thread: a
    # decorated range would measure nothing (it did: ~0 ns around creating the coroutine)
    async def coroutine() -> None:
        pass

    def generator() -> Any:
        yield 1

    async def agen() -> Any:
        yield 1

    for fn in (coroutine, generator, agen):
        with pytest.raises(asynctrace.CaptureError, match="async or generator function"):
            asynctrace.range("r")(fn)
