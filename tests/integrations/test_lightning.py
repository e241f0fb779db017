"""The Lightning callback, against the real ``lightning`` package, training a tiny model on CPU."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lightning", reason="needs the lightning extra: pip install '.[lightning]'")

import lightning.pytorch as pl
import torch
from lightning.fabric.utilities.warnings import PossibleUserWarning

from asynctrace.capture import ranges
from asynctrace.integrations.lightning import AsyncTraceCallback
from asynctrace.records import read_records
from asynctrace.tracing import current_session

BATCHES = 6  # per epoch
EPOCHS = 2
SLEEP_MS = (2, 6, 4)  # each batch sleeps one of these in training_step, in turn


class Tiny(pl.LightningModule):
    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.fail_at = fail_at
        self.seen = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.fail_at is not None and self.seen == self.fail_at:
            raise RuntimeError("boom in training_step")
        # a known host time per step, far above the hooks' own cost
        time.sleep(SLEEP_MS[self.seen % len(SLEEP_MS)] / 1e3)
        self.seen += 1
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _loader(n_batches: int) -> torch.utils.data.DataLoader[Any]:
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(
        torch.randn(4 * n_batches, 8, generator=g), torch.randn(4 * n_batches, 1, generator=g)
    )
    return torch.utils.data.DataLoader(ds, batch_size=4)


class Probe(pl.Callback):
    """Independent host timestamps at the same hooks, after the asynctrace callback's."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def on_train_batch_start(self, *args: Any) -> None:
        self.starts.append(time.perf_counter_ns())

    def on_train_batch_end(self, *args: Any) -> None:
        self.ends.append(time.perf_counter_ns())


def _fit(tmp_path: Path, model: Tiny, *callbacks: pl.Callback) -> pl.Trainer:
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=EPOCHS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=1,
        default_root_dir=tmp_path,
        callbacks=list(callbacks),
    )
    with warnings.catch_warnings():
        # Lightning's advice about data-loader workers on a tiny CPU run: not ours
        warnings.filterwarnings("ignore", category=PossibleUserWarning)
        # lightning 2.6 against torch 2.13's pytree deprecation: not ours
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        trainer.fit(model, _loader(BATCHES), _loader(2))
    return trainer


class _LoggedRange:
    """A real ``asynctrace.range`` that also logs its push."""

    def __init__(self, name: str, log: list[str]) -> None:
        self._range = ranges.Range(name)
        self.name = name
        self._log = log

    def __enter__(self) -> _LoggedRange:
        self._log.append(self.name)
        self._range.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._range.__exit__(*exc)


@pytest.fixture
def nvtx_log(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every asynctrace NVTX push (by name) and pop ("/"), in order."""
    log: list[str] = []
    push, pop = ranges._push, ranges._pop

    def logged_push(handle: Any) -> None:  # the session's step ranges
        log.append(handle.name)
        push(handle)

    def logged_pop() -> None:  # every pop, ranges' and steps'
        log.append("/")
        pop()

    monkeypatch.setattr(ranges, "_push", logged_push)
    monkeypatch.setattr(ranges, "_pop", logged_pop)
    monkeypatch.setattr(ranges, "range", lambda name, **kw: _LoggedRange(name, log))
    return log


def test_fit_is_one_session_with_a_step_per_batch(tmp_path: Path, nvtx_log: list[str]) -> None:
    cb = AsyncTraceCallback("tiny", dir=tmp_path / "traces", device="cpu", print_summary=False)
    probe = Probe()
    _fit(tmp_path, Tiny(), cb, probe)

    assert current_session() is None
    assert ranges.open_ranges() == 0
    session = cb.session
    assert session is not None
    assert session.records_path is not None
    assert session.records_path.parent == tmp_path / "traces"
    assert session.records_path.name.startswith("tiny.")
    rec = read_records(session.records_path)
    assert rec.complete
    assert rec.summary is not None
    assert rec.summary.error is None
    n = BATCHES * EPOCHS
    assert [s.step for s in rec.steps] == list(range(n))
    assert session.summary().source.events == n

    # step i runs from batch i-1's end (batch 0: its start) to batch i's end. The probe runs
    # after our callback at each hook, so step i's end lies between the probe's start and end
    # of batch i: its stamps bracket each step by order, however long the process is
    # descheduled (a bound of 25 ms between the two hooks' clocks could fail on a loaded
    # machine)
    assert len(probe.ends) == len(probe.starts) == n
    for i, s in enumerate(rec.steps):
        assert s.frontend_ns >= SLEEP_MS[i % len(SLEEP_MS)] * 1_000_000
        if i > 0:
            assert s.start_ns == rec.steps[i - 1].start_ns + rec.steps[i - 1].frontend_ns
            lo, hi = probe.starts[i] - probe.ends[i - 1], probe.ends[i] - probe.starts[i - 1]
            assert lo < s.frontend_ns < hi, (i, s.frontend_ns, lo, hi)
        # CPU backend: synchronous, so device time is frontend time and nothing runs ahead
        assert s.device_ns == s.frontend_ns
        assert s.run_ahead_ns == 0
        assert s.in_flight == 0

    # hook ranges, balanced, nested inside the step ranges
    assert nvtx_log.count("train_batch") == n
    assert nvtx_log.count("backward") == n
    assert nvtx_log.count("optimizer_step") == n
    # validation at the end of each epoch (the sanity check runs before the session starts)
    assert nvtx_log.count("validation") == EPOCHS
    depth = 0
    for entry in nvtx_log:
        depth += -1 if entry == "/" else 1
        assert depth >= 0
    assert depth == 0
    assert nvtx_log[:6] == ["step", "train_batch", "backward", "/", "optimizer_step", "/"]


def test_each_fit_is_its_own_session(tmp_path: Path) -> None:
    cb = AsyncTraceCallback("again", dir=tmp_path, device="cpu", print_summary=False)
    _fit(tmp_path, Tiny(), cb)
    first = cb.session
    _fit(tmp_path, Tiny(), cb)
    assert cb.session is not first
    files = sorted(tmp_path.glob("again.*.records.jsonl"))
    assert len(files) == 2
    assert all(len(read_records(f).steps) == BATCHES * EPOCHS for f in files)


def test_exception_in_training_ends_the_session_cleanly(
    tmp_path: Path, nvtx_log: list[str]
) -> None:
    cb = AsyncTraceCallback("fail", dir=tmp_path, device="cpu", print_summary=False)
    with pytest.raises(RuntimeError, match="boom"):
        _fit(tmp_path, Tiny(fail_at=3), cb)
    assert current_session() is None
    assert ranges.open_ranges() == 0
    assert nvtx_log.count("/") == len(nvtx_log) - nvtx_log.count("/")
    assert cb.session is not None
    assert cb.session.records_path is not None
    rec = read_records(cb.session.records_path)
    # batches 0-2 completed; batch 3 raised inside its step, which is dropped
    assert [s.step for s in rec.steps] == [0, 1, 2]
    assert rec.summary is not None
    assert rec.summary.error is not None
    assert "boom" in rec.summary.error


def test_summary_is_printed_by_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fit(tmp_path, Tiny(), AsyncTraceCallback("loud", dir=tmp_path, device="cpu"))
    out = capsys.readouterr().out
    assert f"): {BATCHES * EPOCHS} step(s), " in out


def test_optimizer_steps_option_is_refused() -> None:
    from asynctrace.errors import CaptureError

    with pytest.raises(CaptureError, match="counted twice"):
        AsyncTraceCallback(optimizer_steps=True)
    with pytest.raises(TypeError, match=r"AsyncTraceCallback: unknown option\(s\) colour"):
        AsyncTraceCallback(colour="red")


def test_every_trace_option_works_in_the_callback(tmp_path: Path) -> None:
    # tensorboard=, live= and profile= were refused ("unknown asynctrace.trace option(s)")
    from tensorboard.backend.event_processing import event_accumulator as ea

    from asynctrace import Profile

    cb = AsyncTraceCallback(
        "opts",
        dir=tmp_path,
        device="cpu",
        print_summary=False,
        tensorboard=True,
        live=True,
        # deep mode's windows are counted in training batches: batches 1 and 2 are recorded
        profile=Profile(wait=0, warmup=1, active=2, repeat=1),
    )
    _fit(tmp_path, Tiny(), cb)
    s = cb.session
    assert s is not None
    assert s.tensorboard_dir is not None
    acc = ea.EventAccumulator(str(s.tensorboard_dir), size_guidance={ea.TENSORS: 0})
    acc.Reload()
    tags = set(acc.Tags()["tensors"])
    assert {"asynctrace/frontend_ms", "asynctrace/syncs", "asynctrace/summary"} <= tags
    assert [e.step for e in acc.Tensors("asynctrace/frontend_ms")] == list(range(BATCHES * EPOCHS))
    (trace,) = s.traces
    from asynctrace.traces.load import load

    steps = sorted(r for r in load(trace).strings if r.startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#1", "ProfilerStep#2"]


class TwoOptimizers(pl.LightningModule):
    """Manual optimization with two optimizers, as a GAN steps its generator and critic."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.a = torch.nn.Linear(8, 1)
        self.b = torch.nn.Linear(8, 1)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        for layer, opt in zip((self.a, self.b), self.optimizers(), strict=True):
            opt.zero_grad()
            self.manual_backward(torch.nn.functional.mse_loss(layer(x), y))
            opt.step()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        pass

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        return [
            torch.optim.SGD(self.a.parameters(), lr=0.01),
            torch.optim.SGD(self.b.parameters(), lr=0.01),
        ]


def test_hook_ranges_do_not_nest_across_optimizers(tmp_path: Path, nvtx_log: list[str]) -> None:
    cb = AsyncTraceCallback("two", dir=tmp_path, device="cpu", print_summary=False)
    _fit(tmp_path, TwoOptimizers(), cb)  # type: ignore[arg-type]
    assert ranges.open_ranges() == 0
    # the first optimizer's step is over when the second backward starts: siblings, not nested
    assert nvtx_log[:10] == [
        "step",
        "train_batch",
        "backward",
        "/",
        "optimizer_step",
        "/",
        "backward",
        "/",
        "optimizer_step",
        "/",
    ]
