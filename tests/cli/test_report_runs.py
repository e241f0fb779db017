"""``report DIR`` groups a folder's files by run (#26.9): unrelated sessions get no rank table
and no skew; one job's ranks do; a duplicate rank is warned about and kept out of the table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from asynctrace.cli import main
from tests.cli.test_report import _write_records
from tests.conftest import ROOT
from tests.export._records import make_steps, write_records_file


def _report(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = main(["report", *args])
    return status, capsys.readouterr().out


@pytest.mark.parametrize("folder", ["mixed", "traces/cpu-demo"])
def test_unrelated_sessions_are_separate_runs(
    folder: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # mixed: the demo's sessions beside two single-rank sessions of other scripts;
    # traces/cpu-demo: the demo's three sessions (what the demo suggests to run on its folder)
    d = ROOT / folder
    if folder == "mixed":
        d = tmp_path
        for f in (ROOT / "traces" / "cpu-demo").glob("*.records.jsonl"):
            shutil.copy(f, d)
        for name in ("train", "finetune"):
            write_records_file(d / f"{name}.records.jsonl", make_steps(3), name=name)
    n = len(list(d.glob("*.records.jsonl")))
    status, out = _report([str(d), "--json"], capsys)
    assert status == 0
    doc = json.loads(out)
    assert len(doc["runs"]) == n == len(doc["reports"])
    assert all(r["run"]["kind"] == "file" and r["ranks"] is None for r in doc["runs"])
    assert doc["ranks"] is None
    assert doc["cross_rank"] is None
    status, out = _report([str(d)], capsys)
    assert status == 0
    assert f"runs in this folder ({n}): no two files are ranks of one job" in out
    assert "ranks (" not in out
    assert "across ranks" not in out
    assert "skew" not in out


def test_a_job_beside_an_unrelated_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for r in (0, 1):
        _write_records(tmp_path / f"train.rank{r}.records.jsonl", r, [1000, 3000 * (r + 1)])
    shutil.copy(next((ROOT / "traces" / "cpu-demo").glob("demo-synced.*.records.jsonl")), tmp_path)
    status, out = _report([str(tmp_path), "--json"], capsys)
    assert status == 0
    doc = json.loads(out)
    assert [(r["run"]["kind"], r["run"]["name"]) for r in doc["runs"]] == [
        ("file", "demo-synced"),
        ("session", "train"),
    ]
    assert [r["rank"] for r in doc["ranks"]["ranks"]] == [0, 1]
    assert doc["ranks"]["slowest_rank"] == 1
    status, out = _report([str(tmp_path)], capsys)
    assert "runs in this folder (2)" in out
    assert "ranks of train (2)" in out
    assert "across ranks of train (2)" in out


def test_duplicate_rank_warned_and_left_out_of_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_records(tmp_path / "a.rank0.records.jsonl", 0, [1000, 1000])
    _write_records(tmp_path / "b.rank1.records.jsonl", 1, [2000, 2000])
    _write_records(tmp_path / "c.rank0.records.jsonl", 0, [9000, 9000])  # another run's rank 0
    status, out = _report([str(tmp_path), "--json"], capsys)
    assert status == 0
    doc = json.loads(out)
    assert [r["source"] for r in doc["ranks"]["ranks"]] == [
        str(tmp_path / "a.rank0.records.jsonl"),
        str(tmp_path / "b.rank1.records.jsonl"),
    ]
    (w,) = [w for r in doc["runs"] for w in r["run"]["warnings"]]
    assert "c.rank0.records.jsonl: rank 0 of train is in a.rank0.records.jsonl already" in w
    status, out = _report([str(tmp_path)], capsys)
    assert "warning: c.rank0.records.jsonl: rank 0 of train is in a.rank0" in out
