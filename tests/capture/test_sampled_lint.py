"""A default session on a CPU (``detect_syncs="auto"``) lints a sample of its steps: the first
five, then one at a time, at least a hundred apart and spaced to a budget of the steps' time.
A planted ``loss.item()`` every step is named with its line, counted
once per sampled step; an ``expect_syncs`` inside the session still counts every step."""

from __future__ import annotations

import inspect
import itertools
import threading
from pathlib import Path

import pytest
import torch

import asynctrace
from asynctrace.capture._lint_sample import LINT_EVERY, LINT_FIRST_STEPS
from asynctrace.records import SyncSite, read_records
from asynctrace.render.text import known_fix_lines

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="auto is the CUDA hooks there")


def _train(session: asynctrace.Session, steps: int) -> int:
    model = torch.nn.Linear(4, 1)
    line = 0
    for _ in range(steps):
        loss = model(torch.ones(2, 4)).sum()
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        loss.item()
        session.step()
    return line


def test_a_default_session_names_a_per_step_item_on_a_sample_of_steps(tmp_path: Path) -> None:
    n = 210
    with asynctrace.trace(dir=tmp_path, print_summary=False) as session:
        line = _train(session, n)
    records = read_records(session.records_path)  # type: ignore[arg-type]
    assert records.header.sync_detection == "lint-sampled"
    # the sync is counted in the sampled steps, and only there: the first five, step 100,
    # then none closer than LINT_EVERY to the one before
    sampled = [s.step for s in records.steps if s.sync_count]
    assert sampled[:6] == [0, 1, 2, 3, 4, 100]
    assert all(b - a > LINT_EVERY for a, b in itertools.pairwise(sampled[5:]))
    site = next(s for s in records.syncs if s.site.endswith(f"test_sampled_lint.py:{line}"))
    assert site.count == len(sampled)
    assert site.steps == len(sampled)
    note = next(n for n in session.summary().notes if n.code == "sync-lint-sampled")
    assert f"ran on {len(sampled)} of {n} step(s)" in note.text
    assert (LINT_FIRST_STEPS, LINT_EVERY) == (5, 100)


def test_expect_syncs_inside_a_sampled_session_counts_every_step(tmp_path: Path) -> None:
    model = torch.nn.Linear(4, 1)
    with asynctrace.trace(dir=tmp_path, print_summary=False) as session:
        for _ in range(10):
            session.step()
        # step 10 is not sampled: the session's lint is paused, expect_syncs' is not
        with pytest.raises(asynctrace.UnexpectedSyncError), asynctrace.expect_syncs(max=0):
            model(torch.ones(2, 4)).sum().item()
        session.step()
    steps = read_records(session.records_path).steps  # type: ignore[arg-type]
    assert steps[10].sync_count == 0


def test_explicit_lint_and_off_are_unchanged(tmp_path: Path) -> None:
    with asynctrace.trace(dir=tmp_path, print_summary=False, detect_syncs="lint") as session:
        _train(session, 60)
    records = read_records(session.records_path)  # type: ignore[arg-type]
    assert records.header.sync_detection == "lint"
    assert all(s.sync_count == 1 for s in records.steps)
    with asynctrace.trace(dir=tmp_path, print_summary=False, detect_syncs="off") as session:
        _train(session, 3)
    assert read_records(session.records_path).header.sync_detection == "off"  # type: ignore[arg-type]


def test_a_session_in_another_thread_runs_without_the_lint(tmp_path: Path) -> None:
    seen: list[str | None] = []
    started = threading.Event()
    done = threading.Event()

    def other() -> None:
        with asynctrace.trace(dir=tmp_path / "b", print_summary=False) as s:
            started.set()
            done.wait(60)
            s.step()
        seen.append(read_records(s.records_path).header.sync_detection)  # type: ignore[arg-type]

    with asynctrace.trace(dir=tmp_path / "a", print_summary=False) as session:
        t = threading.Thread(target=other)
        t.start()
        assert started.wait(60)
        session.step()
        done.set()
        t.join()
    assert seen == ["off"]


def test_known_library_syncs_carry_their_fix_in_the_summary() -> None:
    site = SyncSite(
        site="trainer.py:2500",
        op="aten::_local_scalar_dense",
        count=3,
        wait_ns=0,
        steps=3,
        stack=[
            "site-packages/transformers/trainer.py:2500 in _inner_training_loop "
            "[transformers.logging_nan_inf_filter]",
            "train.py:40 in main",
        ],
    )
    lines = known_fix_lines([site])
    assert len(lines) == 2
    assert lines[0].startswith("trainer.py:2500: ")
    assert lines[0].endswith("from train.py:40 in main")
    assert lines[1].startswith("  fix: ")
    assert "logging_nan_inf_filter" in lines[1]
    plain = SyncSite(
        site="train.py:3", op="x", count=1, wait_ns=0, steps=1, stack=["train.py:3 in f"]
    )
    assert known_fix_lines([plain]) == []
