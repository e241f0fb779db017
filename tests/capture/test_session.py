"""The capture session, against scripted device timings whose true answers are known."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.optim.optimizer as torch_optimizer

import asynctrace
from asynctrace.analysis.report import Report
from asynctrace.capture import _clock, ranges
from asynctrace.capture.devices import FakeClock, FakeDevice
from asynctrace.capture.options import TraceOptions
from asynctrace.capture.sinks import BaseSink, SessionEnd
from asynctrace.capture.syncs import SyncEvent
from asynctrace.errors import AsyncTraceWarning, CaptureError, OptionError
from asynctrace.records import RECORDS_SUFFIX, StepRecord, read_records
from asynctrace.records import writer as _writer
from asynctrace.records.names import records_file_name, sanitize_name
from asynctrace.records.writer import RecordsWriter
from asynctrace.render.rows import figure_rows
from asynctrace.render.rows import format_value as _fmt
from asynctrace.render.text import print_summary
from asynctrace.tracing import Session, current_session, trace

T0 = 1_000_000


def stream(device_ns: int) -> Callable[[int, int], int]:
    """One in-order stream that needs ``device_ns`` of work between consecutive markers: a
    marker executes when it is recorded or when the work queued before it is done, later of
    the two. The first marker executes when recorded (the device starts idle)."""
    last: list[int] = []

    def executes(i: int, recorded_ns: int) -> int:
        t = recorded_ns if not last else max(recorded_ns, last[0] + device_ns)
        last[:] = [t]
        return t

    return executes


def session(tmp_path: Path, device: Any, **kw: Any) -> Session:
    kw.setdefault("print_summary", False)
    return Session(kw.pop("name", "t"), dir=tmp_path, device=device, **kw)


# ---------------------------------------------------------------- run-ahead and in-flight
def test_never_synced_loop_queue_grows_pinned_to_the_ns(tmp_path: Path) -> None:
    frontend, work, n = 1_000, 3_000, 40
    clock = FakeClock(T0)
    dev = FakeDevice(clock, stream(work))
    with session(tmp_path, dev) as s:
        for _ in range(n):
            clock.advance(frontend)  # Python issues the step's work and returns at once
            s.step()
    steps = read_records(s.records_path).steps  # type: ignore[arg-type]
    assert [r.step for r in steps] == list(range(n))
    # Independent computation: boundary k (k = 0 at session start) is recorded at T0 + k*F and,
    # since the device is slower, executes at T0 + k*W.
    for i, r in enumerate(steps):
        assert r.start_ns == i * frontend
        assert r.frontend_ns == frontend
        assert r.device_ns == work
        assert r.run_ahead_ns == (i + 1) * (work - frontend)
        # steps j < i whose end marker (boundary j+1, executing at (j+1)*W) is not done at i*F
        expected = sum(1 for j in range(i) if (j + 1) * work > i * frontend)
        assert r.in_flight == expected
        assert r.in_flight == i - (i * frontend) // work
    assert steps[-1].in_flight > steps[5].in_flight > 0  # the queue grows
    assert dev.waits == s.summary().source.collected_at_exit > 0


def test_synced_loop_has_no_run_ahead_and_nothing_in_flight(tmp_path: Path) -> None:
    frontend, work, n = 1_000, 3_000, 20
    clock = FakeClock(T0)
    executes = stream(work)
    dev = FakeDevice(clock, executes)
    with session(tmp_path, dev) as s:
        for i in range(n):
            clock.advance(frontend)
            # torch.cuda.synchronize(): the host blocks until the step's work is done
            clock.now_ns = max(clock.now_ns, T0 + (i + 1) * work)
            s.step()
    steps = read_records(s.records_path).steps  # type: ignore[arg-type]
    assert len(steps) == n
    for i, r in enumerate(steps):
        assert r.start_ns == i * work
        assert r.frontend_ns == work  # the host waited for the device inside the step
        assert r.device_ns == work
        assert r.run_ahead_ns == 0
        assert r.in_flight == 0
    assert s.summary().source.collected_at_exit == 0
    assert dev.waits == 0


@pytest.mark.parametrize("latency_ns", [0, 4_000])
def test_synced_loop_allows_the_marker_latency(tmp_path: Path, latency_ns: int) -> None:
    """A real GPU executes even an empty marker a few µs after it is recorded. In a loop that
    syncs on its work once per step, the just-closed step is not "in flight" at the next
    step's start because of that; the session allows the latency measured at alignment."""
    frontend, work, n, lat = 1_000, 3_000, 20, 2_500
    clock = FakeClock(T0)
    executes = stream(work)
    dev = FakeDevice(clock, executes, latency_ns=lat)
    # align() reports latency_ns as its round trip; 0 means no allowance
    dev_align = dev.align
    dev.align = lambda: dev_align().__class__(  # type: ignore[method-assign]
        method="fake", ref_host_ns=clock.now_ns, uncertainty_ns=latency_ns
    )
    with session(tmp_path, dev) as s:
        for i in range(n):
            clock.advance(frontend)
            clock.now_ns = max(clock.now_ns, T0 + (i + 1) * work)  # wait for the step's work
            s.step()
    steps = read_records(s.records_path).steps  # type: ignore[arg-type]
    assert len(steps) == n
    # the step's end marker executes `lat` after it is recorded: that is its run-ahead
    assert all(r.run_ahead_ns == lat for r in steps)
    expected = 0 if latency_ns >= lat else 1
    assert [r.in_flight for r in steps[1:]] == [expected] * (n - 1)
    assert steps[0].in_flight == 0


def test_device_idle_gaps_count_in_device_time_and_run_ahead_never_below_zero(
    tmp_path: Path,
) -> None:
    # host slower than the device: every marker executes when recorded
    clock = FakeClock(T0)
    dev = FakeDevice(clock, stream(100))
    with session(tmp_path, dev) as s:
        for f in (1_000, 2_000, 500):
            clock.advance(f)
            s.step()
    steps = s.summary()
    rec = read_records(s.records_path).steps  # type: ignore[arg-type]
    assert [r.device_ns for r in rec] == [1_000, 2_000, 500]
    assert [r.run_ahead_ns for r in rec] == [0, 0, 0]
    assert steps.figures["in_flight"].mean == 0


# ---------------------------------------------------------------- lazy collection
def test_collection_is_lazy_and_never_waits_inside_steps(tmp_path: Path) -> None:
    frontend, work, n = 1_000, 2_500, 12
    clock = FakeClock(T0)
    dev = FakeDevice(clock, stream(work))
    seen: list[StepRecord] = []
    s = Session("t", dir=tmp_path, device=dev, print_summary=False, sinks=[seen.append])
    with s:
        for i in range(n):
            clock.advance(frontend)
            s.step()
            assert dev.waits == 0
            # a step is written once its end marker (boundary i+1, at (i+1)*W) executed by now
            now = (i + 1) * frontend
            done = sum(1 for j in range(i + 1) if (j + 1) * work <= now)
            assert s.summary().source.events == done
        # the file holds exactly the collected steps, in order (flushed by hand here)
        # every sink got exactly the collected steps, in order
        assert [r.step for r in seen] == list(range(done))
        tmp = next(tmp_path.glob("*.records.jsonl.tmp"))
        pending = n - done
    assert pending > 0
    assert s.summary().source.collected_at_exit == pending
    assert dev.waits == pending  # only at exit
    assert not tmp.exists()  # renamed into place
    rec = read_records(s.records_path)  # type: ignore[arg-type]
    assert [r.step for r in rec.steps] == list(range(n))
    assert rec.summary is not None
    assert rec.summary.collected_at_exit == pending
    (note,) = [n for n in rec.summary.notes if n.code == "collected-at-exit"]
    assert note.text.startswith(f"{pending} step(s) were still pending at exit")


def test_pending_markers_are_bounded(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    dev = FakeDevice(clock, stream(10_000))  # the device falls far behind
    s = Session("b", dir=tmp_path, device=dev, print_summary=False, max_pending=4)
    with s:
        for _ in range(20):
            clock.advance(1_000)
            s.step()
            # at most 4 wait for the device: the older ones are written without device figures
            assert s.summary().source.events >= s.step_index - 4
    rec = read_records(s.records_path)  # type: ignore[arg-type]
    assert [r.step for r in rec.steps] == list(range(20))
    dropped = [r for r in rec.steps if r.device_ns is None]
    assert [r.step for r in dropped] == list(range(16))
    assert all(r.run_ahead_ns is None for r in dropped)
    assert max(r.in_flight for r in rec.steps) == 4
    kept = rec.steps[16:]
    assert all(r.device_ns == 10_000 for r in kept[1:])
    assert rec.summary is not None
    (note,) = [n for n in rec.summary.notes if n.code == "pending-steps-dropped"]
    assert note.text.startswith("16 step(s) have no device figures")
    report = s.summary()
    assert report.figures["device_ns"].count == 4
    assert report.figures["frontend_ns"].count == 20


@pytest.mark.slow
def test_a_million_steps_in_flat_memory(tmp_path: Path) -> None:
    n, warm, tail = 1_000_000, 200_000, 100_000
    clock = FakeClock(T0)
    dev = FakeDevice(clock, lambda i, t: t + 400)
    # a small window, so that a leak of even one int per step would stand out over the tail
    s = Session("m", dir=tmp_path, device=dev, print_summary=False, nvtx=False, window=1_000)
    # tracemalloc costs ~10x per allocation, so it watches the start (where every bounded
    # structure fills up: peak) and the end (where anything that grows per step would still be
    # held); sys.getallocatedblocks watches the whole run cheaply.
    tracemalloc.start()
    try:
        with s:
            t = time.perf_counter()
            for i in range(n):
                clock.now_ns += 1_000
                s.step()
                if i == warm:
                    _, warm_peak = tracemalloc.get_traced_memory()
                    tracemalloc.stop()
                    blocks_warm = sys.getallocatedblocks()
                elif i == n - tail:
                    tracemalloc.start()
            held_by_tail, tail_peak = tracemalloc.get_traced_memory()
            blocks_end = sys.getallocatedblocks()
            elapsed = time.perf_counter() - t
    finally:
        tracemalloc.stop()
    print(
        f"\n{n} fake steps: {elapsed / n * 1e6:.2f} µs per step ({warm + tail} traced); "
        f"peak {warm_peak} B, held by the last {tail} steps {held_by_tail} B"
    )
    assert warm_peak < 4 * 1024 * 1024
    # what the last 100k steps allocated and still hold: the window's 1k records (~0.3 MB) and
    # nothing else; one leaked int per step would be ~3.6 MB
    assert held_by_tail < 1024 * 1024
    assert tail_peak < 4 * 1024 * 1024
    assert blocks_end - blocks_warm < 10_000
    assert s.records_path is not None
    with open(s.records_path, "rb") as f:
        count = sum(1 for line in f if line.startswith(b'{"type":"step"'))
    assert count == n
    assert s.summary().source.events == n
    assert dev.waits <= 1


# ---------------------------------------------------------------- errors and cleanup
def test_exception_inside_a_step_writes_completed_steps_and_restores_everything(
    tmp_path: Path,
) -> None:
    clock = FakeClock(T0)
    dev = FakeDevice(clock, stream(2_000))
    hooks_before = dict(torch_optimizer._global_optimizer_post_hooks)
    s = session(tmp_path, dev, optimizer_steps=True, detect_syncs="lint")

    def train() -> None:
        with s:
            assert current_session() is s
            assert ranges.open_ranges() == 1
            # the boundary hook (and the phases' own, unless phases=False)
            assert len(torch_optimizer._global_optimizer_post_hooks) >= len(hooks_before) + 1
            for i in range(10):
                clock.advance(1_000)
                if i == 4:
                    raise RuntimeError("boom")
                s.step()

    with pytest.raises(RuntimeError, match="boom"):
        train()
    assert current_session() is None
    assert ranges.open_ranges() == 0
    assert torch_optimizer._global_optimizer_post_hooks == hooks_before
    assert torch._C._len_torch_dispatch_stack() == 0
    assert s.records_path is not None
    assert s.records_path.name.endswith(RECORDS_SUFFIX)
    rec = read_records(s.records_path)
    assert rec.complete
    assert [r.step for r in rec.steps] == [0, 1, 2, 3]  # the step that raised is not complete
    assert all(r.device_ns == 2_000 for r in rec.steps)
    assert rec.summary is not None
    assert rec.summary.error == "RuntimeError: boom"
    assert s.summary().source.error == "RuntimeError: boom"
    assert not list(tmp_path.glob("*.tmp"))


def test_nested_sessions_are_a_clear_error(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    with session(tmp_path, FakeDevice(clock), name="outer") as outer:
        inner = session(tmp_path, FakeDevice(clock), name="inner")
        with pytest.raises(CaptureError, match="'outer' is already active; sessions do not nest"):
            inner.__enter__()
        assert current_session() is outer
        clock.advance(10)
        outer.step()
    assert outer.summary().source.events == 1
    assert inner.records_path is None
    assert len(list(tmp_path.iterdir())) == 1


def test_misuse_outside_a_session(tmp_path: Path) -> None:
    s = session(tmp_path, FakeDevice(FakeClock()))
    with pytest.raises(CaptureError, match="step\\(\\) called outside the session"):
        s.step()
    with pytest.raises(CaptureError, match="steps\\(\\) called outside the session"):
        s.steps([1, 2])
    with pytest.raises(CaptureError, match="before the session ran"):
        s.summary()
    with pytest.raises(CaptureError, match="detect_syncs='sometimes'"):
        trace(detect_syncs="sometimes")
    with pytest.raises(CaptureError, match="must be >= 1"):
        Session(device=FakeDevice(FakeClock()), max_pending=0)


# ---------------------------------------------------------------- step sources
def test_decorator_forms(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    dev = FakeDevice(clock)
    seen: list[Session | None] = []

    @trace
    def bare(x: int) -> int:
        seen.append(current_session())
        return x + 1

    @trace(dir=tmp_path, device=dev, print_summary=False)
    def train(steps: int) -> str:
        s = current_session()
        assert s is not None
        seen.append(s)
        for _ in range(steps):
            clock.advance(5)
            s.step()
        return "done"

    named = trace("custom", dir=tmp_path, device=dev, print_summary=False)

    @named
    def other() -> None:
        clock.advance(5)
        named.step()

    assert isinstance(bare, type(train))
    assert train(3) == "done"
    assert train(2) == "done"  # a session can run again; each run is its own file
    other()
    assert current_session() is None
    names = sorted(p.name.split(".")[0] for p in tmp_path.iterdir())
    assert names == ["custom", "train", "train"]
    assert seen[0] is seen[1]
    assert seen[0] is not None
    assert seen[0].summary().source.events == 2  # the last run
    assert train.__name__ == "train"
    assert named.summary().source.events == 1
    # the bare form with defaults: writes under ./traces, prints; not run here (cwd), but it is
    # a Session-wrapped function
    assert bare.__wrapped__.__name__ == "bare"  # type: ignore[attr-defined]


def test_decorator_on_async_and_generator_functions(tmp_path: Path) -> None:
    # was: the session opened and closed around creating the coroutine or generator, so the
    # body ran untraced and an empty records file was written
    clock = FakeClock(T0)
    dev = FakeDevice(clock)

    @trace(dir=tmp_path / "a", device=dev, print_summary=False)
    async def train_async(steps: int) -> str:
        s = current_session()
        assert s is not None
        for _ in range(steps):
            await asyncio.sleep(0)
            clock.advance(5)
            s.step()
        return "done"

    @trace(dir=tmp_path / "g", device=dev, print_summary=False)
    def batches(n: int) -> Iterator[int]:
        s = current_session()
        assert s is not None
        for i in range(n):
            yield i
            clock.advance(7)
            s.step()

    assert asyncio.run(train_async(3)) == "done"
    assert list(batches(4)) == [0, 1, 2, 3]
    assert current_session() is None
    for folder, frontend in (("a", [5, 5, 5]), ("g", [7, 7, 7, 7])):
        (path,) = (tmp_path / folder).glob("*" + RECORDS_SUFFIX)
        rec = read_records(path)
        assert [r.frontend_ns for r in rec.steps] == frontend
        assert rec.summary is not None
        assert rec.summary.error is None

    async def agen() -> AsyncIterator[int]:
        yield 1

    with pytest.raises(CaptureError, match="async generator 'agen'"):
        trace(dir=tmp_path, device=dev)(agen)


def test_train_step_on_async_and_generator_functions(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    s = session(tmp_path, FakeDevice(clock, stream(300)))

    @s.train_step
    async def train(batch: int) -> int:
        await asyncio.sleep(0)
        clock.advance(batch)
        return batch * 2

    async def loop() -> list[int]:
        out = []
        for b in (100, 200):
            clock.advance(50_000)
            out.append(await train(b))
        return out

    with s:
        assert asyncio.run(loop()) == [200, 400]
    rec = read_records(s.records_path).steps  # type: ignore[arg-type]
    assert [r.frontend_ns for r in rec] == [100, 200]

    def gen() -> Iterator[int]:
        yield 1

    with pytest.raises(CaptureError, match="cannot wrap the generator 'gen'"):
        s.train_step(gen)


def test_a_decorated_function_calling_itself_says_sessions_do_not_nest(tmp_path: Path) -> None:
    clock = FakeClock(T0)

    @trace(dir=tmp_path, device=FakeDevice(clock), print_summary=False)
    def recurse(n: int) -> None:
        if n:
            recurse(n - 1)

    with pytest.raises(CaptureError, match="already active in this thread; sessions do not nest"):
        recurse(1)
    assert current_session() is None


def test_bare_decorator_runs_with_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)

    @asynctrace.trace
    def job() -> int:
        return 7

    assert job() == 7
    files = list((tmp_path / "traces").iterdir())
    assert len(files) == 1
    assert files[0].name.startswith("job.")
    assert ": 0 step(s), " in " ".join(capsys.readouterr().out.split())


def test_steps_measures_data_wait(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    dev = FakeDevice(clock)
    waits = [300, 5_000, 700, 0]
    work = [1_000, 2_000, 3_000, 4_000]

    def loader() -> Iterator[int]:
        for w in waits:
            clock.advance(w)  # the batch arrives after w ns
            yield w
        clock.advance(99)  # discovering the end takes time too: not a step

    with session(tmp_path, dev) as s:
        clock.advance(123_456)  # setup before the loop: not a step
        for i, _ in enumerate(s.steps(loader())):
            clock.advance(work[i])
        clock.advance(77)  # after the loop: not a step either
    rec = read_records(s.records_path).steps  # type: ignore[arg-type]
    assert [r.data_wait_ns for r in rec] == waits
    assert [r.frontend_ns for r in rec] == [w + f for w, f in zip(waits, work, strict=True)]
    assert [r.device_ns for r in rec] == [r.frontend_ns for r in rec]
    assert rec[0].start_ns == 123_456
    report = s.summary()
    assert report.figures["data_wait_ns"].mean == sum(waits) / 4


def test_steps_break_drops_the_unfinished_step(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    with session(tmp_path, FakeDevice(clock)) as s:
        for i, _ in enumerate(s.steps(range(100))):
            if i == 3:
                break
            clock.advance(10)
        assert ranges.open_ranges() == 0  # the generator closed and popped its range
        clock.advance(1_000)
        s.step()  # opens a fresh step; the gap before it is not a step
        clock.advance(20)
        s.step()
    rec = read_records(s.records_path).steps  # type: ignore[arg-type]
    assert [r.frontend_ns for r in rec] == [10, 10, 10, 20]
    assert [r.step for r in rec] == [0, 1, 2, 3]


def test_train_step_decorator(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    dev = FakeDevice(clock, stream(300))
    s = session(tmp_path, dev)

    @s.train_step
    def train(batch: int) -> int:
        clock.advance(batch)
        if batch == 13:
            raise ValueError("bad batch")
        return batch * 2

    assert train(1) == 2  # outside the session: just the function
    with s:
        results = []
        for b in (100, 200, 13, 400):
            clock.advance(50_000)  # loading between calls is not part of a step
            with contextlib.suppress(ValueError):
                results.append(train(b))
    assert results == [200, 400, 800]
    rec = read_records(s.records_path).steps  # type: ignore[arg-type]
    assert [r.frontend_ns for r in rec] == [100, 200, 400]
    # each call's work starts on an idle device: 300 ns of it, and the host left after b ns
    assert [r.device_ns for r in rec] == [300, 300, 400]
    assert [r.run_ahead_ns for r in rec] == [200, 100, 0]
    assert [r.in_flight for r in rec] == [0, 0, 0]


def test_optimizer_steps_with_a_real_sgd(tmp_path: Path) -> None:
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4)
    hooks_before = dict(torch_optimizer._global_optimizer_post_hooks)
    with trace(dir=tmp_path, device="cpu", optimizer_steps=True, print_summary=False) as s:
        for _ in range(5):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
        model(x)  # after the last optimizer step: the unfinished step is dropped
    assert torch_optimizer._global_optimizer_post_hooks == hooks_before
    opt.step()  # no session, no hook: nothing happens
    rec = read_records(s.records_path)  # type: ignore[arg-type]
    assert [r.step for r in rec.steps] == [0, 1, 2, 3, 4]
    assert all(r.frontend_ns > 0 for r in rec.steps)


# ---------------------------------------------------------------- CPU honesty
def test_cpu_figures_are_honest_on_a_real_torch_loop(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 16), torch.randn(32, 1)
    before = time.perf_counter_ns()
    with trace("cpu", dir=tmp_path, device="cpu", print_summary=False) as s:
        after_enter = time.perf_counter_ns()
        for _ in range(20):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            before_last = time.perf_counter_ns()
            s.step()
        after_last = time.perf_counter_ns()
    rec = read_records(s.records_path)  # type: ignore[arg-type]
    assert rec.header.device_kind == "cpu"
    assert not rec.header.asynchronous
    assert len(rec.steps) == 20
    for r in rec.steps:
        assert r.device_ns == r.frontend_ns > 0
        assert r.run_ahead_ns == 0
        assert r.in_flight == 0
        assert r.mem_allocated_bytes is None
    # steps are contiguous from the session's start to the last step(): an independent clock
    # brackets their sum
    total = sum(r.frontend_ns for r in rec.steps)
    assert before_last - after_enter <= total <= after_last - before
    report = s.summary()
    assert report.verdict.code == "cpu-synchronous"
    assert "executes synchronously" in report.verdict.message
    assert rec.summary is not None
    assert rec.summary.verdict == "cpu-synchronous"


# ---------------------------------------------------------------- syncs and memory
def test_syncs_are_counted_per_step_and_per_site(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    with session(tmp_path, FakeDevice(clock), detect_syncs="off") as s:
        s._on_sync(SyncEvent("aten::_local_scalar_dense", "train.py:10", ("train.py:10 in f",), 50))
        s._on_sync(SyncEvent("aten::_local_scalar_dense", "train.py:10", (), 70))
        clock.advance(1_000)
        s.step()
        clock.advance(1_000)
        s.step()
        s._on_sync(SyncEvent("cudaStreamSynchronize", "train.py:20", (), 5))
        s._on_sync(SyncEvent("aten::_local_scalar_dense", "train.py:10", (), 1))
        clock.advance(1_000)
        s.step()
    rec = read_records(s.records_path)  # type: ignore[arg-type]
    assert [r.sync_count for r in rec.steps] == [2, 0, 2]
    assert [r.sync_wait_ns for r in rec.steps] == [120, 0, 6]
    sites = {x.site: x for x in rec.syncs}
    assert sites["train.py:10"].count == 3
    assert sites["train.py:10"].wait_ns == 121
    assert sites["train.py:10"].steps == 2
    assert sites["train.py:10"].stack == ["train.py:10 in f"]
    assert sites["train.py:20"].op == "cudaStreamSynchronize"
    assert [x.site for x in s.summary().sync_sites] == ["train.py:10", "train.py:20"]


def test_memory_is_read_at_step_end(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    mem = iter([(100, 1_000), (200, 2_000), (300, 2_000)])
    dev = FakeDevice(clock, stream(10), memory=lambda: next(mem))
    with session(tmp_path, dev) as s:
        for _ in range(3):
            clock.advance(100)
            s.step()
    rec = read_records(s.records_path).steps  # type: ignore[arg-type]
    assert [(r.mem_allocated_bytes, r.mem_reserved_bytes) for r in rec] == [
        (100, 1_000),
        (200, 2_000),
        (300, 2_000),
    ]


# ---------------------------------------------------------------- the summary
def test_summary_statistics_match_numpy(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    frontends = [int(x) for x in rng.integers(1_000, 50_000, size=57)]
    clock = FakeClock(T0)
    with session(tmp_path, FakeDevice(clock), window=20) as s:
        for f in frontends:
            clock.advance(f)
            s.step()
    r = s.summary()
    fe = r.figures["frontend_ns"]
    assert r.source.events == fe.count == 57
    # the summary holds the steps its medians are over
    assert len(r.steps) == 20
    assert fe.mean == pytest.approx(np.mean(frontends))
    last = frontends[-20:]
    assert fe.window_steps == 20
    assert fe.median == pytest.approx(np.median(last))
    assert fe.p90 == np.percentile(last, 90, method="inverted_cdf")
    assert fe.p90 == sorted(last)[17]  # nearest rank: ceil(0.9 * 20) = 18th
    assert r.source.wall_ns == sum(frontends)
    (note,) = [n for n in r.notes if n.code == "recent-window"]
    assert "median and p90 are over the last 20 of 57 steps" in note.text


def test_printed_table_shows_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clock = FakeClock(T0)
    with session(tmp_path, FakeDevice(clock, stream(2_500)), print_summary=True) as s:
        for _ in range(12):
            clock.advance(1_000)
            s.step()
    out = capsys.readouterr().out
    report = s.summary()
    rows = figure_rows(report.figures)
    assert [row[0] for row in rows] == ["frontend", "device", "run-ahead", "in flight"]
    assert rows[0][1:4] == ("1.00 µs", "1.00 µs", "1.00 µs")
    assert rows[1][1:4] == ("2.50 µs", "2.50 µs", "2.50 µs")
    for row in rows:
        assert " ".join(row[1:4]) in " ".join(out.split()) or all(v in out for v in row[1:4])
    # the diagnosis's headline first, under the title (the records file, its step count); no
    # verdict line says something else
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith(report.diagnosis[0].code))
    assert "".join(lines[:head]).endswith("): 12 step(s), 12.0 µs")
    assert "verdict:" not in out
    assert str(s.records_path) in out.replace("\n", "")
    with session(tmp_path, FakeDevice(clock), print_summary=False) as quiet:
        quiet.step()
    assert capsys.readouterr().out == ""


def test_the_exit_summary_is_the_report_of_its_records_printed_by_the_one_renderer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from asynctrace.analysis.report import analyze
    from asynctrace.files.sources import load_source

    clock = FakeClock(T0)
    with session(tmp_path, FakeDevice(clock, stream(2_500)), print_summary=True) as s:
        for i in range(12):
            clock.advance(1_000 + 100 * i)
            s.step()
    printed = capsys.readouterr().out
    assert s.records_path is not None
    later = analyze(load_source(s.records_path))
    # one type, one path: the live report is the records file's (steps within the window)
    assert s.summary() == later
    print_summary(later)
    assert capsys.readouterr().out == printed


def test_report_json_round_trip(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    with session(tmp_path, FakeDevice(clock, stream(100))) as s:
        for _ in range(3):
            clock.advance(50)
            s.step()
    r = s.summary()
    assert isinstance(r, Report)
    again = Report.from_json(r.to_json())
    assert again == r
    assert json.loads(r.to_json())["figures"]["device_ns"]["mean"] == 100


def test_print_report_goes_to_a_given_file(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    with session(tmp_path, FakeDevice(clock)) as s:
        clock.advance(10)
        s.step()
    out = tmp_path / "out.txt"
    with open(out, "w") as f:
        print_summary(s.summary(), file=f)
    assert s.summary().diagnosis[0].code in out.read_text()


# ---------------------------------------------------------------- the records file
def test_records_round_trip(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    dev = FakeDevice(clock, stream(1_500))
    with session(tmp_path, dev, name="round") as s:
        for _ in range(6):
            clock.advance(1_000)
            s.step()
    assert s.records_path is not None
    name = s.records_path.name
    parts = name[: -len(RECORDS_SUFFIX)].split(".")
    assert parts[0] == "round"
    assert parts[2] == str(os.getpid())
    assert int(parts[3]) == read_records(s.records_path).header.started_unix_ns
    rec = read_records(s.records_path)
    assert rec.complete
    h = rec.header
    assert (h.name, h.pid, h.device_kind, h.asynchronous) == ("round", os.getpid(), "fake", True)
    assert h.clock_method == "fake"
    assert h.rank is None
    assert h.torch_version == torch.__version__
    # "auto" as resolved: no CUDA here, so nothing ran
    # "auto": CUDA's hooks, else the lint on a sample of the steps
    assert h.sync_detection == ("cuda" if torch.cuda.is_available() else "lint-sampled")
    assert all(isinstance(r, StepRecord) for r in rec.steps)
    assert rec.summary is not None
    assert rec.summary.steps == 6
    assert rec.summary.wall_ns == 6_000
    assert s.summary().figures.get("device_ns") is not None
    assert s.summary().figures["device_ns"].mean == np.mean([r.device_ns for r in rec.steps])  # type: ignore[union-attr]


def test_write_false_writes_nothing(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    with session(tmp_path / "never", FakeDevice(clock), write=False) as s:
        clock.advance(10)
        s.step()
    assert s.records_path is None
    assert not (tmp_path / "never").exists()
    assert s.summary().source.events == 1


def test_rank_in_the_file_name_under_torch_distributed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dist = torch.distributed
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 3)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 4)
    with session(tmp_path, FakeDevice(FakeClock())) as s:
        s.step()
    assert s.records_path is not None
    assert f".{os.getpid()}.rank3." in s.records_path.name
    h = read_records(s.records_path).header
    assert (h.rank, h.world_size) == (3, 4)


@pytest.mark.parametrize("name", ["../../etc/passwd", "/abs/path", "..", "a b\\c", "", "é"])
def test_names_cannot_escape_the_directory(tmp_path: Path, name: str) -> None:
    out = tmp_path / "out"
    with trace(name, dir=out, device=FakeDevice(FakeClock()), print_summary=False) as s:
        pass
    assert s.records_path is not None
    assert s.records_path.parent == out
    assert s.records_path.name.count(".") == 5  # name.host.pid.time.records.jsonl


def test_records_file_name_fields() -> None:
    assert (
        records_file_name("a/b", pid=12, rank=None, time_ns=99, host="h.x")
        == "a_b.h_x.12.99.records.jsonl"
    )
    assert (
        records_file_name("n", pid=1, rank=0, time_ns=2, host="h") == "n.h.1.rank0.2.records.jsonl"
    )
    assert sanitize_name("...") == "session"


def test_unwritable_dir_warns_and_training_continues(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    clock = FakeClock(T0)
    s = session(blocker / "sub", FakeDevice(clock))

    def train() -> None:
        with s:
            for _ in range(3):
                clock.advance(10)
                s.step()

    with pytest.warns(AsyncTraceWarning, match="could not write the session records"):
        train()
    assert s.records_path is None
    report = s.summary()
    assert report.source.events == 3
    assert any(n.code == "records-not-written" for n in report.notes)


def test_unwritable_dir_with_strict_raises_and_leaves_nothing_changed(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    s = session(blocker / "sub", FakeDevice(FakeClock()), strict=True, optimizer_steps=True)
    with pytest.raises(CaptureError, match="could not write the session records"), s:
        pytest.fail("the body must not run")
    assert current_session() is None


def test_disk_full_mid_run_warns_and_keeps_measuring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(T0)
    s = session(tmp_path, FakeDevice(clock))
    real_flush = RecordsWriter.flush
    calls = {"n": 0}

    def flaky_flush(self: RecordsWriter) -> None:
        calls["n"] += 1
        if calls["n"] > 1:  # the header goes through, then the disk fills up
            raise OSError(errno.ENOSPC, "No space left on device")
        real_flush(self)

    monkeypatch.setattr(RecordsWriter, "flush", flaky_flush)
    # every step goes straight to the disk
    monkeypatch.setattr(_clock, "BATCH", 1)
    monkeypatch.setattr(_writer, "_BATCH", 1)

    def train() -> None:
        with s:
            for _ in range(5):
                clock.advance(10)
                s.step()

    with pytest.warns(AsyncTraceWarning, match="No space left on device"):
        train()
    assert s.records_path is None
    assert s.summary().source.events == 5


def test_device_failure_at_exit_keeps_host_figures(tmp_path: Path) -> None:
    clock = FakeClock(T0)

    class Broken(FakeDevice):
        def wait(self, event: Any) -> None:
            raise RuntimeError("CUDA error: device-side assert triggered")

    dev = Broken(clock, stream(10_000))
    with session(tmp_path, dev) as s:
        for _ in range(3):
            clock.advance(100)
            s.step()
    rec = read_records(s.records_path)  # type: ignore[arg-type]
    assert [r.frontend_ns for r in rec.steps] == [100, 100, 100]
    assert [r.device_ns for r in rec.steps] == [None, None, None]
    assert rec.summary is not None
    (note,) = [n for n in rec.summary.notes if n.code == "markers-failed-at-exit"]
    assert note.text.startswith("3 step(s) have no device figures")


# ---------------------------------------------------------------- NVTX
def test_each_step_is_one_balanced_nvtx_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_push, real_pop = ranges._push, ranges._pop

    def push(handle: Any) -> None:
        events.append(f"push {handle.name}")
        real_push(handle)

    def pop() -> None:
        events.append("pop")
        real_pop()

    monkeypatch.setattr(ranges, "_push", push)
    monkeypatch.setattr(ranges, "_pop", pop)
    # as if Nsight were attached: each range is named after its step
    monkeypatch.setattr(ranges, "nvtx_attached", lambda: True)
    clock = FakeClock(T0)
    with session(tmp_path, FakeDevice(clock)) as s:
        for _ in range(2):
            clock.advance(10)
            s.step()
    assert events == ["push step 0", "pop", "push step 1", "pop", "push step 2", "pop"]
    assert ranges.open_ranges() == 0


def test_nvtx_off_pushes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: Any) -> None:
        raise AssertionError("no NVTX call expected")

    monkeypatch.setattr(ranges, "_push", fail)
    monkeypatch.setattr(ranges, "_pop", fail)
    clock = FakeClock(T0)
    with session(tmp_path, FakeDevice(clock), nvtx=False) as s:
        clock.advance(10)
        s.step()
    assert s.summary().source.events == 1


def test_summary_statistics_by_hand(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    with session(tmp_path, FakeDevice(clock)) as s:
        for f in (70, 10, 100, 40, 20, 90, 30, 60, 50, 80):
            clock.advance(f)
            s.step()
    r = s.summary().figures.get("frontend_ns")
    assert r is not None
    assert (r.count, r.mean, r.median, r.p90, r.window_steps) == (10, 55.0, 55.0, 90, 10)


def test_lint_mode_counts_real_syncs_per_step(tmp_path: Path) -> None:
    x = torch.randn(8, 4)
    w = torch.randn(4, 1, requires_grad=True)
    with trace(dir=tmp_path, device="cpu", detect_syncs="lint", print_summary=False) as s:
        for i in range(4):
            loss = (x @ w).square().mean()
            loss.backward()
            if i % 2 == 0:
                loss.item()  # a sync on an accelerator: the lint flags it on CPU too
            s.step()
    rec = read_records(s.records_path)  # type: ignore[arg-type]
    assert [r.sync_count > 0 for r in rec.steps] == [True, False, True, False]
    assert len(rec.syncs) == 1
    assert (
        rec.syncs[0].site.startswith("test_session.py:") or "test_session.py" in rec.syncs[0].site
    )
    assert rec.syncs[0].steps == 2


def test_a_failure_while_finishing_never_masks_the_users_exception(tmp_path: Path) -> None:
    clock = FakeClock(T0)

    class Broken(BaseSink):
        def finish(self, end: SessionEnd) -> None:
            raise RuntimeError("finish broke")

    s = Session("t", dir=tmp_path, device=FakeDevice(clock), print_summary=False, sinks=[Broken()])

    def train() -> None:
        with s:
            raise KeyError("user")

    with (
        pytest.warns(AsyncTraceWarning, match="failed in finish.*finish broke"),
        pytest.raises(KeyError, match="user"),
    ):
        train()
    assert current_session() is None


def test_a_users_failed_sink_is_a_sink_failed_note(tmp_path: Path) -> None:
    clock = FakeClock(T0)

    class Says(BaseSink):
        def step(self, record: StepRecord) -> None:
            raise RuntimeError("says broke")

        def failure_note(self, error: BaseException) -> str:
            return f"my sink stopped: {error}"

    class Silent(BaseSink):
        def step(self, record: StepRecord) -> None:
            raise RuntimeError("silent broke")

        def __repr__(self) -> str:
            return "Silent()"

    s = Session(
        "t", dir=tmp_path, device=FakeDevice(clock), print_summary=False, sinks=[Says(), Silent()]
    )

    def train() -> None:
        with s:
            for _ in range(3):
                clock.advance(10)
                s.step()

    with pytest.warns(AsyncTraceWarning, match="failed in step"):
        train()
    # its own text where it gives one, under the one code a sink of the user's has
    expected = ["my sink stopped: says broke", "sink Silent() stopped: silent broke"]
    assert [n.text for n in s.summary().notes if n.code == "sink-failed"] == expected
    rec = read_records(s.records_path)  # type: ignore[arg-type]
    assert rec.summary is not None
    assert [n.text for n in rec.summary.notes if n.code == "sink-failed"] == expected


def test_summary_units_are_chosen_after_rounding() -> None:
    # just under a unit boundary the value rounds up to it: the next unit, never "1000 ns"
    assert _fmt(999.6, "ns") == "1.00 µs"
    assert _fmt(999.4, "ns") == "999 ns"
    assert _fmt(999_999.6, "ns") == "1.00 ms"
    assert _fmt(999_940, "ns") == "1.00 ms"
    assert _fmt(999_999_999.6, "ns") == "1.00 s"
    assert _fmt(-999.6, "ns") == "-1.00 µs"
    assert _fmt(1023.96 * 1024, "bytes") == "1.0 MiB"
    assert _fmt(1000 * 1024, "bytes") == "1000.0 KiB"
    assert _fmt(64 << 20, "bytes") == "64.0 MiB"
    assert _fmt(float("nan"), "ns") == "-"


def test_trace_session_and_callbacks_take_the_options_declared_once() -> None:
    s = trace(max_pending=7, window=3, write=False, print_summary=False)
    assert (s.options.max_pending, s.options.window) == (7, 3)
    assert s.options == TraceOptions(max_pending=7, window=3, write=False, print_summary=False)
    with pytest.raises(OptionError, match=r"unknown option.*windw") as e:
        trace(windw=3)
    # the message lists what is accepted, from the one declaration
    assert all(name in str(e.value) for name in TraceOptions.names())
    with pytest.raises(TypeError):  # what it raised before it had its own class
        Session(windw=3)


def test_a_session_without_steps_says_how_to_mark_them(tmp_path: Path) -> None:
    import io

    with trace("train", dir=tmp_path, device="cpu", print_summary=False) as s:
        pass
    report = s.summary()
    assert (report.source.events, report.verdict.code) == (0, "no-steps")
    buf = io.StringIO()
    print_summary(report, file=buf)
    text = " ".join(buf.getvalue().split())
    assert ": 0 step(s), " in text
    assert "session.step() at the end of each iteration" in text
    assert "verdict:" not in text  # "no steps" says it all
    assert "┏" not in text  # no empty table


def test_the_cpu_note_is_not_said_twice(tmp_path: Path) -> None:
    # a "cpu-synchronous" verdict is the note itself; under another headline the note stays
    with trace("cpu", dir=tmp_path, device="cpu", print_summary=False) as s:
        for _ in range(3):
            s.step()
    report = s.summary()
    assert report.verdict.code == "cpu-synchronous"
    assert not any(n.code == "cpu-synchronous" for n in report.notes)
    with trace("none", dir=tmp_path, device="cpu", print_summary=False) as s:
        pass
    assert any(n.code == "cpu-synchronous" for n in s.summary().notes)


def test_the_header_says_which_sync_detector_ran(tmp_path: Path) -> None:
    from asynctrace.records import read_records

    for mode in ("lint", "off"):
        with trace(mode, dir=tmp_path, device="cpu", detect_syncs=mode, print_summary=False) as s:
            s.step()
        assert s.records_path is not None
        assert read_records(s.records_path).header.sync_detection == mode


@pytest.mark.parametrize(
    ("work_ns", "label"), [(2_000_000, "device-bound"), (200_000, "host-bound")]
)
def test_the_exit_summary_says_what_bounds_the_steps(
    tmp_path: Path, work_ns: int, label: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # a host step of 1 ms; the device needs twice as long (it sets the pace) or a fifth
    clock = FakeClock(T0)
    with Session("b", dir=tmp_path, device=FakeDevice(clock, stream(work_ns))) as s:
        for _ in range(20):
            clock.advance(1_000_000)
            s.step()
    report = s.summary()
    assert report.bound is not None
    assert report.bound.label == label
    assert report.bound.evidence.estimated
    out = " ".join(capsys.readouterr().out.split())
    assert f"bound: {label} (estimated from step records)" in out
    assert "next step:" in out
    # the same label as the records file gives, read back
    from asynctrace.analysis.report import analyze

    rec = read_records(s.records_path)  # type: ignore[arg-type]
    summary = analyze(rec).bound
    assert summary is not None
    assert summary.label == label


def test_the_exit_summary_names_the_top_sync_sites(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Session("s", dir=tmp_path, device="cpu", detect_syncs="lint") as s:
        for _ in range(3):
            torch.ones(2).sum().item()
            s.step()
    out = capsys.readouterr().out
    (site,) = s.sync_sites()
    assert site.site.endswith("test_session.py:" + str(site.stack[0].split(":")[-1].split()[0]))
    assert "sync sites" in out
    # the table folds a long path onto several lines: every character of it is shown
    cells = "".join(line.split("│")[1].strip() for line in out.splitlines() if line.count("│") >= 4)
    assert site.site in cells
    assert "aten::_local_scalar_dense" in out


def test_a_slow_loader_reads_input_bound_in_the_exit_summary(tmp_path: Path) -> None:
    # each batch takes 3 ms to arrive, the step's own work 1 ms, on a device that keeps pace
    clock = FakeClock(T0)

    def loader() -> Iterator[int]:
        for i in range(20):
            clock.advance(3_000_000)
            yield i

    with Session(
        "in", dir=tmp_path, device=FakeDevice(clock, stream(200_000)), print_summary=False
    ) as s:
        for _ in s.steps(loader()):
            clock.advance(1_000_000)
    report = s.summary()
    assert report.bound is not None
    assert report.bound.label == "input-bound"
    assert report.bound.idle_ns_by_cause.input > report.bound.idle_ns_by_cause.host
