"""``asynctrace report DIR --html``: a bad file in the folder is named and the rest reported,
as the text report does; the page compares the ranks, and is written from the analyses the
command made (nothing is loaded a second time)."""

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
    # where the page went, and the skipped file
    wrote, line = captured.err.strip().splitlines()
    assert line.startswith("asynctrace report: skipped ")
    assert bad in line
    assert wrote == f"asynctrace report: wrote {out}"
    page = out.read_text()
    assert "rank0.json" in page
    assert "good.rank0.records.jsonl" in page


def test_html_of_a_folder_compares_its_ranks(tmp_path: Path) -> None:
    (tmp_path / "rank0.json").write_text(json.dumps(TINY))
    _write_records(tmp_path / "job.rank0.records.jsonl", 0, [2000, 1000, 2000])
    _write_records(tmp_path / "job.rank1.records.jsonl", 1, [1000, 3000, 2000])
    out = tmp_path / "r.html"
    assert main(["report", str(tmp_path), "--html", str(out)]) == 0
    page = out.read_text()
    lead = page[: page.index("<hr>")]
    # a trace and two sessions in one table of what was read, then the comparison of the one
    # job's ranks: the session's two (the trace is no rank of that job, #26.9)
    assert "<h1>Ranks and sessions (3)</h1>" in lead
    assert '<td class="l">rank0.json</td><td class="l">trace</td>' in lead
    assert '<td class="l">job.rank1.records.jsonl</td><td class="l">session</td>' in lead
    assert "<h2>Ranks compared (2)</h2>" in lead
    assert "<h2>Across ranks (2)</h2>" in lead
    # then each run with its pictures
    assert page.count('<div class="bound">') == 3
    assert page.count("<h2>Pictures</h2>") == 3


def test_the_page_is_written_from_the_analyses_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from asynctrace import records
    from asynctrace._commands._html import write_report_html
    from asynctrace.analysis.ranks import compare_ranks, cross_rank
    from asynctrace.analysis.report import analyze_detail
    from asynctrace.files import sources
    from asynctrace.traces import load

    trace = tmp_path / "rank0.json"
    trace.write_text(json.dumps(TINY))
    rec = _write_records(tmp_path / "job.rank1.records.jsonl", 1, [1000, 3000, 2000])
    analyses = [analyze_detail(sources.load_source(p)) for p in (trace, rec)]
    reports = [a.report for a in analyses]
    # the files are gone, and loading anything would fail: the page needs neither
    trace.unlink()
    rec.unlink()

    def no_loading(*args: object, **kwargs: object) -> None:
        raise AssertionError("the page loaded a file")

    for module, name in ((load, "load"), (sources, "load_source"), (records, "read_records")):
        monkeypatch.setattr(module, name, no_loading)
    out = tmp_path / "r.html"
    ranks, cross = compare_ranks(reports), cross_rank(reports)
    write_report_html(out, analyses, ranks=ranks, cross=cross)
    page = out.read_text()
    assert "<h2>Ranks compared (2)</h2>" in page
    assert "<h1>asynctrace report: rank0.json</h1>" in page
    assert "<h1>asynctrace session: job.rank1.records.jsonl</h1>" in page
    assert page.count("<svg") == 4
