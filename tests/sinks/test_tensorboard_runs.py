"""One TensorBoard run folder per session (reliability round 3, point 18).

The run folder is ``<dir>/<name>/<time>-<pid>``, and ``<time>`` has one-second resolution: two
sessions of one name started in the same process within one second shared a folder, and their
scalars mixed. The clock is pinned here, so the test does not pass or fail by it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from asynctrace.capture.devices import FakeClock, FakeDevice
from asynctrace.sinks.tensorboard import run_stamp
from asynctrace.tracing import Session


def _frontend_ms(run: Path) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    acc = ea.EventAccumulator(str(run), size_guidance={ea.TENSORS: 0})
    acc.Reload()
    return [
        (e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
        for e in acc.Tensors("asynctrace/frontend_ms")
    ]


def _session(tmp_path: Path, *, steps: int, step_ms: int) -> Session:
    clock = FakeClock(1_000)
    with Session(
        "same", dir=tmp_path, device=FakeDevice(clock), tensorboard=True, print_summary=False
    ) as s:
        for _ in range(steps):
            clock.advance(step_ms * 1_000_000)
            s.step()
    return s


def test_two_sessions_of_one_name_in_one_second_get_a_run_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # both sessions start at the same wall-clock instant: the same one-second stamp
    start_ns = (time.time_ns() // 1_000_000_000) * 1_000_000_000 + 1_000
    monkeypatch.setattr(time, "time_ns", lambda: start_ns)
    first = _session(tmp_path, steps=3, step_ms=2)
    second = _session(tmp_path, steps=5, step_ms=7)
    monkeypatch.undo()

    assert first.tensorboard_dir is not None
    assert second.tensorboard_dir is not None
    assert first.tensorboard_dir != second.tensorboard_dir
    assert first.tensorboard_dir.parent == second.tensorboard_dir.parent == tmp_path / "same"
    # each run holds its own session's steps, and only those
    assert _frontend_ms(first.tensorboard_dir) == [(i, 2.0) for i in range(3)]
    assert _frontend_ms(second.tensorboard_dir) == [(i, 7.0) for i in range(5)]
    # in start order when sorted, as TensorBoard lists them
    runs = sorted(p.name for p in (tmp_path / "same").iterdir())
    assert runs == [first.tensorboard_dir.name, second.tensorboard_dir.name]


def test_the_run_stamp_is_unique_readable_and_sorted_within_one_second() -> None:
    ns = 1_796_156_698_534_998_884
    stamps = [run_stamp(ns) for _ in range(3)]
    assert len(set(stamps)) == 3
    day, clock_time, pid = stamps[0].split("-")
    assert (len(day), len(clock_time), int(pid)) == (8, 6, os.getpid())
    assert stamps[1:] == [f"{stamps[0]}-2", f"{stamps[0]}-3"]
    assert sorted(stamps) == stamps
    # the next second starts again without a suffix
    assert run_stamp(ns + 1_000_000_000).count("-") == 2
