"""Sinks that take the step records in batches (``step_batch``): the records file, the summary
and a user's own. They get every record, in step order, before ``summary()`` reads and before
``finish``; a failing one is dropped with one warning (``strict``: raised once every other sink
has the batch); steps from several threads and a live summary asked from anywhere lose none.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from asynctrace.capture import _clock
from asynctrace.capture.devices import FakeClock, FakeDevice
from asynctrace.capture.sinks import BaseSink, SessionEnd, as_sink
from asynctrace.errors import AsyncTraceWarning, CaptureError
from asynctrace.records import RECORDS_SUFFIX, StepRecord, read_records
from asynctrace.tracing import Session


class Batches(BaseSink):
    """Notes each batch it gets, and how many steps it had when the session finished."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.at_finish = -1

    def step_batch(self, records: list[StepRecord]) -> None:
        self.batches.append([r.step for r in records])

    def finish(self, end: SessionEnd) -> None:
        self.at_finish = sum(len(b) for b in self.batches)


def _session(tmp_path: Path, *sinks: Any, **kw: Any) -> tuple[Session, FakeClock]:
    clock = FakeClock(1_000_000)
    kw.setdefault("print_summary", False)
    kw.setdefault("detect_syncs", "off")
    dev = FakeDevice(clock, lambda i, t: t + 300)
    return Session("b", dir=tmp_path, device=dev, sinks=sinks, **kw), clock


def _steps(s: Session, clock: FakeClock, n: int) -> None:
    for _ in range(n):
        clock.advance(1_000)
        s.step()


def test_a_batch_sink_gets_every_record_in_order_in_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_clock, "BATCH", 4)
    sink = Batches()
    per_step: list[int] = []
    s, clock = _session(tmp_path, sink, lambda rec: per_step.append(rec.step))
    with s:
        _steps(s, clock, 11)
        # the per-step sink has each record the moment it is known; the batches wait for 4
        assert per_step == list(range(len(per_step)))
        assert [len(b) for b in sink.batches] == [4] * (len(per_step) // 4)
    # the last step's marker was waited for at the end
    assert sink.at_finish == 11 == len(per_step)
    assert [i for b in sink.batches for i in b] == list(range(11))
    assert s.summary().source.events == 11
    (path,) = tmp_path.glob("*" + RECORDS_SUFFIX)
    assert [r.step for r in read_records(path).steps] == list(range(11))


def test_the_live_summary_counts_the_records_still_batched(tmp_path: Path) -> None:
    sink = Batches()
    s, clock = _session(tmp_path, sink)
    with s:
        _steps(s, clock, 7)
        live = s.summary()
        # the records are handed on before the summary reads: nothing is behind
        assert live.source.events == sum(len(b) for b in sink.batches) == 6
        _steps(s, clock, 2)
    assert s.summary().source.events == 9


def test_a_sink_asking_for_the_summary_inside_its_step_sees_every_step(tmp_path: Path) -> None:
    counts: list[tuple[int, int]] = []
    s: Session

    def ask(rec: StepRecord) -> None:
        counts.append((rec.step, s.summary().source.events))

    s, clock = _session(tmp_path, ask)
    with s:
        _steps(s, clock, 5)
    # the last one was collected at the end, as the session finished
    assert counts == [(i, i + 1) for i in range(5)]


def test_a_summary_asked_from_another_thread_loses_no_step(tmp_path: Path) -> None:
    s, clock = _session(tmp_path)
    n = 3_000
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.append(s.summary().source.events)

    saved = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: any race shows
    try:
        with s:
            t = threading.Thread(target=watch)
            t.start()
            try:
                _steps(s, clock, n)
            finally:
                stop.set()
                t.join()
    finally:
        sys.setswitchinterval(saved)
    assert seen
    assert seen == sorted(seen)
    assert s.summary().source.events == n
    (path,) = tmp_path.glob("*" + RECORDS_SUFFIX)
    assert [r.step for r in read_records(path).steps] == list(range(n))


def test_a_failing_batch_sink_warns_once_and_the_others_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_clock, "BATCH", 4)

    class Broken(Batches):
        def step_batch(self, records: list[StepRecord]) -> None:
            raise RuntimeError("batch broke")

    broken, after = Broken(), Batches()
    s, clock = _session(tmp_path, broken, after)
    with pytest.warns(AsyncTraceWarning, match="failed in step_batch.*batch broke") as caught, s:
        _steps(s, clock, 13)
    assert len([w for w in caught if issubclass(w.category, AsyncTraceWarning)]) == 1
    assert [i for b in after.batches for i in b] == list(range(13))
    assert s.summary().source.events == 13
    assert any("batch broke" in n.text for n in s.summary().notes)


def test_a_failing_batch_sink_under_strict_raises_after_the_others_have_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_clock, "BATCH", 4)

    class Broken(Batches):
        def step_batch(self, records: list[StepRecord]) -> None:
            raise RuntimeError("batch broke")

    after = Batches()
    s, clock = _session(tmp_path, Broken(), after, strict=True)
    done = 0
    with pytest.raises(CaptureError, match="batch broke"), s:  # noqa: PT012
        for _ in range(10):
            clock.advance(1_000)
            s.step()
            done += 1
    assert done == 4  # the step that filled the first batch raised
    assert after.batches[0] == [0, 1, 2, 3]
    # the session ended with the error; every step's record still reached the others
    assert [i for b in after.batches for i in b] == list(range(5))


def test_an_object_with_only_step_batch_is_a_sink() -> None:
    got: list[list[StepRecord]] = []

    class OnlyBatches:
        def step_batch(self, records: list[StepRecord]) -> None:
            got.append(records)

    sink = as_sink(OnlyBatches())
    sink.start(None)  # type: ignore[arg-type]  # the missing methods do nothing
    rec = StepRecord(step=0, start_ns=0, frontend_ns=1)
    sink.step_batch([rec])  # type: ignore[attr-defined]
    assert got == [[rec]]


def test_records_reach_the_file_a_batch_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_clock, "BATCH", 4)
    s, clock = _session(tmp_path)
    with s:
        _steps(s, clock, 10)  # 9 steps collected (the 10th waits for its marker): 2 batches
        (tmp,) = tmp_path.glob("*.tmp")
        lines = tmp.read_text().splitlines()
        assert len(lines) == 1 + 8  # the header, then whole batches
    (path,) = tmp_path.glob("*" + RECORDS_SUFFIX)
    assert len(read_records(path).steps) == 10
