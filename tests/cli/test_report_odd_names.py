"""A file name that is not UTF-8 in a folder (#27.3): it is analysed under its escaped name
(``\\xff``) and every other rank's output stays, with any ``--workers`` and with ``--json``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from asynctrace.cli import main
from tests.cli.test_report import _write_records
from tests.conftest import shared_trace

pytestmark = pytest.mark.real_traces


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    shutil.copy(shared_trace("kineto", "hta_sampled_rank0.json.gz"), tmp_path / "rank0.json.gz")
    odd = os.fsencode(tmp_path) + b"/rank1-\xff.json.gz"
    shutil.copy(shared_trace("kineto", "hta_sampled_rank1.json.gz"), os.fsdecode(odd))
    _write_records(
        Path(os.fsdecode(os.fsencode(tmp_path) + b"/t\xfe.rank0.records.jsonl")), 0, [5, 7]
    )
    return tmp_path


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", ["1", "2"])
def test_odd_name_is_escaped_and_the_rest_go_on(
    folder: Path, workers: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(folder), "--json", "--workers", workers]) == 0
    doc = json.loads(capsys.readouterr().out)
    names = [Path(r["source"]["path"]).name for r in doc["reports"]]
    assert names == ["rank0.json.gz", "rank1-\\xff.json.gz", "t\\xfe.rank0.records.jsonl"]
    # the two traces are ranks 0 and 1 of one job (world size 128); the records another run
    assert [r["rank"] for r in doc["ranks"]["ranks"]] == [0, 1]
    assert main(["report", str(folder), "--workers", workers]) == 0
    out = capsys.readouterr().out
    assert "rank1-\\xff.json.gz (kineto" in out
    assert "t\\xfe.rank0.records.jsonl (fake" in out
