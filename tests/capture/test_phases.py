"""Per-step phases (data, forward, backward, optimizer, other) and data wait with no code
change, against scripted sleeps in a real tiny model on the CPU.

Sleeps are never shorter than asked, so each phase is bounded below by the sleep planted in
it; above, only loosely (a loaded machine oversleeps), by comparing medians to the sleeps of
the other phases."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, dataloader

import asynctrace
from asynctrace.analysis.records_bound import bound_of_records
from asynctrace.export.tensorboard import step_scalars
from asynctrace.records import StepRecord, read_records

REPO = Path(__file__).resolve().parents[2]
MS = 1_000_000


class _Sleepy(Dataset[torch.Tensor]):
    def __init__(self, n: int, delay_s: float) -> None:
        self.n, self.delay_s = n, delay_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.delay_s)
        return torch.ones(4)


class _SlowForward(torch.nn.Module):
    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.delay_s = delay_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.delay_s)
        return _SlowBackward.apply(self.lin(x))  # type: ignore[no-any-return]


class _SlowBackward(torch.autograd.Function):
    delay_s = 0.0

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        time.sleep(_SlowBackward.delay_s)
        return grad


def _slow_sgd(params: Any, delay_s: float) -> torch.optim.SGD:
    """SGD whose step takes ``delay_s`` more (its own pre-hook, run inside the step; not a
    subclass, whose super().step() torch may hook a second time)."""
    opt = torch.optim.SGD(params, lr=0.1)
    opt.register_step_pre_hook(lambda *a: time.sleep(delay_s))
    return opt


def _steps(session: asynctrace.Session) -> list[StepRecord]:
    assert session.records_path is not None
    return read_records(session.records_path).steps


def _check_sums(steps: list[StepRecord]) -> None:
    for s in steps:
        ph = s.phases_ns
        assert ph is not None
        assert ph.data + ph.forward + ph.backward + ph.optimizer + ph.other == s.frontend_ns
        assert ph.data == s.data_wait_ns
        assert min(ph.data, ph.forward, ph.backward, ph.optimizer, ph.other) >= 0


def test_phases_split_each_step_at_its_data_backward_and_optimizer_boundaries(
    tmp_path: Path,
) -> None:
    fwd, bwd, opt = 0.010, 0.030, 0.120
    _SlowBackward.delay_s = bwd
    model = _SlowForward(fwd)
    optimizer = _slow_sgd(model.parameters(), opt)
    loader = DataLoader(_Sleepy(5, 0.005), batch_size=1)
    with asynctrace.trace(
        dir=tmp_path, optimizer_steps=True, print_summary=False, detect_syncs="off"
    ) as session:
        for batch in loader:
            optimizer.zero_grad()
            model(batch).sum().backward()
            optimizer.step()
    steps = _steps(session)
    assert len(steps) == 5
    _check_sums(steps)
    phases = [s.phases_ns for s in steps]
    assert all(p is not None for p in phases)
    assert all(p.data >= 5 * MS for p in phases if p is not None)
    assert all(p.forward >= fwd * 1e9 for p in phases if p is not None)
    assert all(p.backward >= bwd * 1e9 for p in phases if p is not None)
    assert all(p.optimizer >= opt * 1e9 for p in phases if p is not None)
    # each sleep in its own phase: the medians of the shorter phases stay below the next sleep
    med = {
        k: statistics.median(getattr(p, k) for p in phases if p is not None)
        for k in ("forward", "backward", "other")
    }
    assert med["forward"] < bwd * 1e9
    assert med["backward"] < opt * 1e9
    assert med["other"] < bwd * 1e9
    # the bound's evidence says the optimizer dominates
    run = bound_of_records(steps, asynchronous=False).run
    assert run.evidence.phases_pct["optimizer"] > 50
    assert any("optimizer phase dominates" in n for n in run.evidence.notes)
    # and TensorBoard's scalars carry them
    scalars = step_scalars(steps[0])
    assert scalars["asynctrace/phase_optimizer_ms"] >= opt * 1e3


def test_a_closure_runs_forward_and_backward_outside_the_optimizer_phase(tmp_path: Path) -> None:
    # as Lightning's automatic optimization and LBFGS do: optimizer.step(closure)
    bwd = 0.040
    _SlowBackward.delay_s = bwd
    model = _SlowForward(0.040)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = model(torch.ones(1, 4)).sum()
        loss.backward()
        return loss

    with asynctrace.trace(dir=tmp_path, print_summary=False, detect_syncs="off") as session:
        for _ in range(3):
            optimizer.step(closure)
            session.step()
    steps = _steps(session)
    _check_sums(steps)
    for s in steps:
        ph = s.phases_ns
        assert ph is not None
        assert ph.forward >= 40 * MS
        assert ph.backward >= bwd * 1e9
        assert ph.optimizer < 40 * MS


def test_data_wait_with_no_code_change_makes_a_loader_bound_loop_input_bound(
    tmp_path: Path,
) -> None:
    # the loop of an unchanged script: for batch in loader, optimizer.step() ends each step
    delay = 0.030
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(_Sleepy(12, delay / 2), batch_size=2)
    with asynctrace.trace(
        dir=tmp_path, optimizer_steps=True, print_summary=False, detect_syncs="off"
    ) as session:
        for batch in loader:
            optimizer.zero_grad()
            model(batch).sum().backward()
            optimizer.step()
    steps = _steps(session)
    assert len(steps) == 6
    for s in steps:
        assert delay * 1e9 <= s.data_wait_ns <= s.frontend_ns
    report = session.summary()
    assert report.bound is not None
    assert report.bound.label == "input-bound"


def test_a_fetch_inside_session_steps_counts_once(tmp_path: Path) -> None:
    loader = DataLoader(_Sleepy(4, 0.020), batch_size=1)
    with asynctrace.trace(dir=tmp_path, print_summary=False, detect_syncs="off") as session:
        for _ in session.steps(loader):
            pass
    steps = _steps(session)
    assert len(steps) == 4
    for s in steps:
        assert 20 * MS <= s.data_wait_ns <= s.frontend_ns
        assert s.phases_ns is not None
        assert s.phases_ns.data == s.data_wait_ns


def test_the_hooks_are_undone_when_the_session_ends(tmp_path: Path) -> None:
    before = (dataloader._BaseDataLoaderIter.__next__, torch.autograd.backward)
    with asynctrace.trace(dir=tmp_path, print_summary=False, detect_syncs="off") as session:
        assert dataloader._BaseDataLoaderIter.__next__ is not before[0]
        session.step()
    assert (dataloader._BaseDataLoaderIter.__next__, torch.autograd.backward) == before
    with asynctrace.trace(
        dir=tmp_path, print_summary=False, detect_syncs="off", phases=False
    ) as session:
        assert dataloader._BaseDataLoaderIter.__next__ is before[0]
        session.step()
    # a loop with no phase boundary has none recorded
    assert _steps(session)[0].phases_ns is None


def test_records_without_phases_still_read(tmp_path: Path) -> None:
    line = {"type": "step", "step": 0, "start_ns": 0, "frontend_ns": 5}
    rec = __import__("msgspec").json.decode(json.dumps(line), type=StepRecord)
    assert rec.phases_ns is None


SCRIPT = """
import time, torch
from torch.utils.data import DataLoader, Dataset
class D(Dataset):
    def __len__(self): return 16
    def __getitem__(self, i):
        time.sleep(0.02)
        return torch.ones(4)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for batch in DataLoader(D(), batch_size=2):
    opt.zero_grad()
    model(batch).sum().backward()
    opt.step()
"""


def test_asynctrace_run_calls_a_loader_bound_script_input_bound(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "asynctrace",
            "run",
            "--json",
            "--dir",
            str(tmp_path / "o"),
            str(script),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    report = json.loads(out.stdout)
    assert report["source"]["events"] == 8
    assert report["figures"]["data_wait_ns"]["median"] >= 40 * MS
    assert "phase_backward_ns" in report["figures"]
    # the steady state (step 0 holds the script's set-up: torch.optim's first import alone
    # takes seconds on a loaded machine, a warm-up the exit summary's headline sets apart)
    steps = read_records(report["source"]["path"]).steps
    assert all(s.data_wait_ns >= 40 * MS for s in steps)
    assert bound_of_records(steps[1:], asynchronous=False).run.label == "input-bound"


def test_a_plain_iterable_in_session_steps_is_the_data_phase(tmp_path: Path) -> None:
    def batches() -> Any:
        for _ in range(3):
            time.sleep(0.030)
            yield torch.ones(1, 4)

    model = torch.nn.Linear(4, 1)
    with asynctrace.trace(dir=tmp_path, print_summary=False, detect_syncs="off") as session:
        for batch in session.steps(batches()):
            model(batch).sum().backward()
    steps = _steps(session)
    _check_sums(steps)
    for s in steps:
        assert s.phases_ns is not None
        assert s.phases_ns.data >= 30 * MS
        assert s.phases_ns.forward < 30 * MS
