"""The Hugging Face callback, against the real ``transformers.Trainer`` with a tiny model on CPU.

The model is built from a config (2 layers, width 16): nothing is downloaded.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers", reason="needs the transformers extra")
pytest.importorskip("accelerate", reason="the Trainer needs accelerate (transformers extra)")

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from asynctrace.capture import ranges
from asynctrace.integrations.transformers import AsyncTraceCallback
from asynctrace.records import read_records
from asynctrace.tracing import current_session

STEPS = 6
SLEEP_MS = (2, 6, 4)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


class _Data(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        x = torch.randint(0, 64, (8,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": x, "labels": x}


class _Probe(TrainerCallback):  # type: ignore[misc]
    """Independent host timestamps at the same hooks, plus a known sleep per step."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.begins: list[int] = []
        self.ends: list[int] = []
        self.depth_in_step: list[int] = []
        self.fail_at = fail_at

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.begins.append(time.perf_counter_ns())
        if self.fail_at is not None and len(self.begins) - 1 == self.fail_at:
            raise RuntimeError("boom in step")
        # ranges open now: the step's and train_step
        self.depth_in_step.append(ranges.open_ranges())
        time.sleep(SLEEP_MS[(len(self.begins) - 1) % len(SLEEP_MS)] / 1e3)

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.ends.append(time.perf_counter_ns())


def _train(tmp_path: Path, *callbacks: TrainerCallback) -> Trainer:
    config = GPT2Config(
        n_layer=2,
        n_head=2,
        n_embd=16,
        vocab_size=64,
        n_positions=16,
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(0)
    args = TrainingArguments(
        output_dir=str(tmp_path / "hf"),
        max_steps=STEPS,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=GPT2LMHeadModel(config), args=args, train_dataset=_Data(), callbacks=list(callbacks)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        trainer.train()
    return trainer


def test_train_is_one_session_with_a_step_per_optimizer_step(tmp_path: Path) -> None:
    cb = AsyncTraceCallback("gpt2-tiny", dir=tmp_path / "traces", device="cpu", print_summary=False)
    probe = _Probe()
    _train(tmp_path, cb, probe)

    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert current_session() is None
    assert ranges.open_ranges() == 0
    assert cb.session is not None
    assert cb.session.records_path is not None
    rec = read_records(cb.session.records_path)
    assert rec.complete
    assert rec.header.name == "gpt2-tiny"
    assert [s.step for s in rec.steps] == list(range(STEPS))
    # step i: from step i-1's end (step 0: its begin) to step i's end. Our callback runs before
    # the probe at each hook, so step i's end lies between the probe's begin and end of step i:
    # the probe's stamps bracket each step by order, however long the process is descheduled
    # (a bound of 25 ms between the two hooks' clocks could fail on a loaded machine)
    for i, s in enumerate(rec.steps):
        assert s.frontend_ns >= SLEEP_MS[i % len(SLEEP_MS)] * 1_000_000
        if i > 0:
            assert s.start_ns == rec.steps[i - 1].start_ns + rec.steps[i - 1].frontend_ns
            lo, hi = probe.begins[i] - probe.ends[i - 1], probe.ends[i] - probe.begins[i - 1]
            assert lo < s.frontend_ns < hi, (i, s.frontend_ns, lo, hi)
        assert s.device_ns == s.frontend_ns
        assert s.run_ahead_ns == 0
    # inside every step: the step range and the train_step hook range
    assert probe.depth_in_step == [2] * STEPS


def test_every_trace_option_works_in_the_callback(tmp_path: Path) -> None:
    # tensorboard= was refused ("unknown asynctrace.trace option(s): tensorboard")
    from tensorboard.backend.event_processing import event_accumulator as ea

    cb = AsyncTraceCallback(
        "opts", dir=tmp_path, device="cpu", print_summary=False, tensorboard=True, window=2
    )
    _train(tmp_path, cb)
    s = cb.session
    assert s is not None
    assert s.tensorboard_dir is not None
    assert s.options.window == 2
    acc = ea.EventAccumulator(str(s.tensorboard_dir), size_guidance={ea.TENSORS: 0})
    acc.Reload()
    assert [e.step for e in acc.Tensors("asynctrace/frontend_ms")] == list(range(STEPS))
    with pytest.raises(TypeError, match="optimizer_steps"):
        AsyncTraceCallback(optimizer_steps=True)


def test_ranges_off(tmp_path: Path) -> None:
    cb = AsyncTraceCallback("plain", dir=tmp_path, device="cpu", ranges=False, print_summary=False)
    probe = _Probe()
    _train(tmp_path, cb, probe)
    assert probe.depth_in_step == [1] * STEPS


def test_failed_train_is_closed_by_the_context_manager(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError, match="boom"),
        AsyncTraceCallback("fail", dir=tmp_path, device="cpu", print_summary=False) as cb,
    ):
        _train(tmp_path, cb, _Probe(fail_at=3))
    assert current_session() is None
    assert ranges.open_ranges() == 0
    assert cb.session is not None
    assert cb.session.records_path is not None
    rec = read_records(cb.session.records_path)
    assert [s.step for s in rec.steps] == [0, 1, 2]
    assert rec.summary is not None
    assert rec.summary.error is not None
    assert "boom" in rec.summary.error


def test_a_later_train_closes_a_session_left_open(tmp_path: Path) -> None:
    cb = AsyncTraceCallback("again", dir=tmp_path, device="cpu", print_summary=False)
    with pytest.raises(RuntimeError, match="boom"):
        _train(tmp_path, cb, _Probe(fail_at=2))
    assert current_session() is cb.session
    _train(tmp_path, cb, _Probe())
    assert current_session() is None
    files = sorted(tmp_path.glob("again.*.records.jsonl"))
    assert len(files) == 2
    steps = sorted(len(read_records(f).steps) for f in files)
    assert steps == [2, STEPS]


def test_a_new_callback_closes_a_session_a_failed_train_left_open(tmp_path: Path) -> None:
    # a notebook re-runs its cell after an interrupted train(): a fresh callback, same thread
    stale = AsyncTraceCallback("stale", dir=tmp_path, device="cpu", print_summary=False)
    with pytest.raises(RuntimeError, match="boom"):
        _train(tmp_path, stale, _Probe(fail_at=2))
    assert current_session() is stale.session
    fresh = AsyncTraceCallback("fresh", dir=tmp_path, device="cpu", print_summary=False)
    _train(tmp_path, fresh, _Probe())
    assert current_session() is None
    assert ranges.open_ranges() == 0
    [stale_file] = tmp_path.glob("stale.*.records.jsonl")
    stale_rec = read_records(stale_file)
    assert [s.step for s in stale_rec.steps] == [0, 1]
    assert stale_rec.summary is not None
    assert stale_rec.summary.error is not None
    [fresh_file] = tmp_path.glob("fresh.*.records.jsonl")
    assert len(read_records(fresh_file).steps) == STEPS
