"""``asynctrace report DIR --html``: a bad file in the folder is named and the rest reported,
as the text report does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asynctrace.cli import main

from .test_report import _write_records
from .test_user_errors import TINY

pytest.importorskip("matplotlib")


@pytest.mark.parametrize("bad", ["rank1.json", "bad.records.jsonl"])
def test_html_of_a_folder_with_a_bad_file_names_it_and_reports_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    (tmp_path / "rank0.json").write_text(json.dumps(TINY))
    _write_records(tmp_path / "good.rank0.records.jsonl", 0, [1000, 3000, 2000])
    (tmp_path / bad).write_text("{not json\n")
    out = tmp_path / "out" / "r.html"
    out.parent.mkdir()
    assert main(["report", str(tmp_path), "--html", str(out)]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("asynctrace report: skipped ")
    assert bad in line
    page = out.read_text()
    assert "rank0.json" in page
    assert "good.rank0.records.jsonl" in page
