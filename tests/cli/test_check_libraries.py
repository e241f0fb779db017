"""``asynctrace check`` where users train: host-side reads of the data pipeline are no syncs,
and syncs inside libraries are named at the library's line, with the user frame that led there
and, for known ones, the setting that removes them — against the real torch DataLoader,
``transformers.Trainer`` and ``lightning`` (tiny models built here, nothing downloaded)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from asynctrace._frames import short_path
from asynctrace.cli import main

LOADER = """\
import torch
from torch.utils.data import DataLoader, RandomSampler, TensorDataset

torch.manual_seed(0)
ds = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
loader = DataLoader(ds, batch_size=16, sampler=RandomSampler(ds), num_workers=2)
model = torch.nn.Linear(8, 1)
opt = torch.optim.Adam(model.parameters(), lr=0.1)
for epoch in range(2):
    for i, (x, y) in enumerate(loader):  # the loader line
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        logged = loss.item()  # the sync
"""


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def _check_json(tmp_path: Path, script: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    assert main(["check", "--dir", str(tmp_path / "records"), "--json", str(script)]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_data_loaders_host_reads_are_no_syncs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text(LOADER)
    result = _check_json(tmp_path, script, capsys)
    sites = {s["site"] for s in result["sync_sites"]}
    # before: the sampler's and the workers' seed reads were reported at the loader line
    assert sites == {f"{script}:{_line_of(script, 'the sync')}"}


def test_check_and_session_steps_agree_on_a_loader(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch
    from torch.utils.data import DataLoader, RandomSampler, TensorDataset

    import asynctrace

    ds = TensorDataset(torch.randn(32, 8), torch.randn(32, 1))
    loader = DataLoader(ds, batch_size=8, sampler=RandomSampler(ds), num_workers=2)
    model = torch.nn.Linear(8, 1)
    with asynctrace.trace(
        "steps", dir=tmp_path, detect_syncs="lint", print_summary=False
    ) as session:
        for x, y in session.steps(loader):
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.item()  # the only sync
    sites = [s.site for s in session.summary().sync_sites]
    assert sites == [f"{__file__}:{_line_of(Path(__file__), 'loss.item()  # the only sync')}"]
    # the same loop written as a script: the same single site, at its own loss.item()
    script = tmp_path / "train.py"
    script.write_text(LOADER)
    assert len(_check_json(tmp_path, script, capsys)["sync_sites"]) == 1


def test_short_paths_of_installed_packages() -> None:
    sp = "/venv/lib/python3.11/site-packages"
    assert short_path(f"{sp}/transformers/trainer.py") == "transformers/trainer.py"
    assert short_path(f"{sp}/lightning/fabric/utilities/apply_func.py") == (
        "lightning/…/apply_func.py"
    )
    assert short_path("/usr/lib/python3/dist-packages/numpy/core/x.py") == "numpy/…/x.py"
    assert short_path("/home/me/train.py") == "/home/me/train.py"


HF = """\
import os
os.environ["HF_HUB_OFFLINE"] = "1"
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 32
    def __getitem__(self, i):
        x = torch.randint(0, 64, (8,), generator=torch.Generator().manual_seed(i))
        return {{"input_ids": x, "labels": x, "attention_mask": torch.ones(8, dtype=torch.long)}}

config = GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=16,
                    bos_token_id=0, eos_token_id=0)
torch.manual_seed(0)
args = TrainingArguments(output_dir={out!r}, max_steps=4, per_device_train_batch_size=4,
                         report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no",
                         disable_tqdm=True, logging_nan_inf_filter={nan_filter})
trainer = Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=Data())
trainer.train()  # the user's line
"""


def _known(result: Any) -> dict[str, dict[str, Any]]:
    return {s["known"]["id"]: s for s in result["sync_sites"] if s["known"] is not None}


def test_hugging_face_syncs_are_named_with_the_setting_that_removes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("transformers", reason="needs the transformers extra")
    pytest.importorskip("accelerate", reason="the Trainer needs accelerate")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    script = tmp_path / "hf_train.py"
    script.write_text(HF.format(out=str(tmp_path / "hf"), nan_filter=True))
    result = _check_json(tmp_path, script, capsys)
    known = _known(result)
    nan = known["transformers.logging_nan_inf_filter"]
    assert nan["site"].startswith("transformers/trainer.py:")
    assert nan["per_step"] == 2.0  # isnan and isinf, each micro-batch
    assert nan["known"]["fix"] == "TrainingArguments(logging_nan_inf_filter=False)"
    # the user's own line that led there
    assert nan["from"] == f"{script}:{_line_of(script, 'the user')} in <module>"
    mask = known["transformers.padding_mask"]
    assert mask["site"].startswith("transformers/masking_utils.py:")
    assert "attention_mask" in mask["known"]["fix"]
    # no long site-packages path anywhere
    assert not any("site-packages" in s["site"] for s in result["sync_sites"])

    # the setting named removes the sync
    script.write_text(HF.format(out=str(tmp_path / "hf"), nan_filter=False))
    assert "transformers.logging_nan_inf_filter" not in _known(
        _check_json(tmp_path, script, capsys)
    )


LIGHTNING = """\
import warnings
import torch
import lightning.pytorch as pl

warnings.filterwarnings("ignore")

class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

g = torch.Generator().manual_seed(0)
ds = torch.utils.data.TensorDataset(
    torch.randn(24, 8, generator=g), torch.randn(24, 1, generator=g)
)
trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False,
                     enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, default_root_dir={out!r})
trainer.fit(Tiny(), torch.utils.data.DataLoader(ds, batch_size=4, shuffle=True))
"""


def test_lightning_prog_bar_log_is_named_with_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("lightning", reason="needs the lightning extra")
    script = tmp_path / "pl_train.py"
    script.write_text(LIGHTNING.format(out=str(tmp_path / "pl")))
    result = _check_json(tmp_path, script, capsys)
    site = _known(result)["lightning.log_prog_bar"]
    assert site["site"].startswith("lightning/…/apply_func.py:")
    assert site["known"]["detail"] == "key 'train_loss'"
    assert "prog_bar=False" in site["known"]["fix"]
    # every sync Lightning makes in this fit is a known one: the once-per-fit ones say so
    assert set(_known(result)) == {
        "lightning.log_prog_bar",
        "lightning.teardown",
        "lightning.loader_length",
    }
    assert all(s["known"] is not None for s in result["sync_sites"])
    # the shuffling loader's seed reads are not reported (combined_loader / torch.utils.data)
    assert not any("combined_loader" in s["site"] for s in result["sync_sites"])
    assert not any("loader" in (s["from"] or "") for s in result["sync_sites"])


def test_the_text_output_says_where_and_what_removes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("lightning", reason="needs the lightning extra")
    script = tmp_path / "pl_train.py"
    script.write_text(LIGHTNING.format(out=str(tmp_path / "pl")))
    assert main(["check", "--dir", str(tmp_path / "records"), str(script)]) == 0
    out = capsys.readouterr().out
    # the report's known-sync lines (render.text.known_fix_lines), under the sites table
    user = f"from {script}:{_line_of(script, 'trainer.fit')} in <module>"
    (known,) = [line for line in out.splitlines() if "self.log(..., prog_bar=True)" in line]
    assert known.startswith("  lightning/…/apply_func.py:")
    assert known.endswith(f", {user}")
    assert "key 'train_loss'" in known
    assert "    fix: self.log(..., prog_bar=False)" in out
