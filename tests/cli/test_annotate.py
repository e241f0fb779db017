"""``asynctrace annotate``: real and hand-built traces, checked by the strict validator."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from asynctrace.analysis.report import analyze
from asynctrace.cli import main
from asynctrace.traces.load import load
from tests.conftest import shared_trace
from tests.export._records import make_steps, write_records_file
from tests.export._trace_event_validator import load_events, tb_profiler_problems, validate

REAL = [
    "hta_a100_event_sync.json.gz",
    "hta_v100_ns_resolution_rank0.json.gz",
    "kineto_2021_resnet50_barelist.json.gz",
    "tracelens_h100_bert_small_with_stack.json.gz",
    "hta_cpu_only_rank34.json.gz",
]


@pytest.mark.real_traces
@pytest.mark.parametrize("name", REAL)
def test_annotate_real_trace(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = shared_trace("kineto", name)
    out = tmp_path / "out.json.gz"
    assert main(["annotate", str(src), "-o", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    events, doc = load_events(out)
    original, _ = load_events(src)
    assert events[: len(original)] == original
    overlay = events[len(original) :]
    assert validate(overlay) == []
    assert tb_profiler_problems(overlay) == []
    # nothing the overlay adds makes the whole file less valid than the original was
    assert len(validate(events, doc=doc, strict_ids=False)) == len(
        validate(original, strict_ids=False)
    )
    # the overlay's host spans sit exactly on the trace's own step ranges
    report = analyze(load(src))
    host = [e for e in overlay if e["ph"] == "X" and e["tid"] == 1]
    assert len(host) == len(report.steps)
    steps = [
        e for e in original
        if e.get("ph") == "X"
        and str(e.get("name", "")).startswith("ProfilerStep#")
        and e.get("cat") != "gpu_user_annotation"  # Kineto repeats steps on the device rows
    ]  # fmt: skip
    if steps:
        assert [round(e["ts"], 3) for e in host] == [round(float(e["ts"]), 3) for e in steps]
    syncs = [e for e in overlay if e["ph"] == "i"]
    assert report.trace is not None
    assert len(syncs) == report.trace.syncs.count


def test_annotate_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"nodes": []}))
    assert main(["annotate", str(bad), "-o", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("asynctrace annotate: error:")
    assert main(["annotate", str(bad), "-o", str(bad)]) == 2


@pytest.mark.parametrize("name", ["profile.sqlite", "profile.sqlite3", "profile.db", "profile"])
def test_an_sqlite_file_is_refused_as_no_chrome_trace_whatever_its_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    import sqlite3

    src = tmp_path / name
    with contextlib.closing(sqlite3.connect(src)) as db:
        db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
        db.commit()
    out = tmp_path / "o.json.gz"
    assert main(["annotate", str(src), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    # not "not a Chrome trace (JSON is malformed ...)": it says what the file is and what to use
    assert err == (
        f"asynctrace annotate: error: {src}: an SQLite file, the format of Nsight Systems "
        "exports: annotate takes Kineto/Chrome traces (.json or .json.gz), not Nsight Systems "
        "exports (`asynctrace report` reads those)\n"
    )
    assert not out.exists()


def test_session_records_are_refused_as_no_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # they are JSON lines: read as one JSON document they were "malformed JSON"
    records = write_records_file(tmp_path / "train.vm.1.2.records.jsonl", make_steps(3))
    assert main(["annotate", str(records), "-o", str(tmp_path / "a.json")]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"asynctrace annotate: error: {records}: session records, not a trace: annotate takes "
        "Kineto/Chrome traces (.json or .json.gz, as torch.profiler writes them: "
        "asynctrace.trace(profile=True) does); `asynctrace report` and `asynctrace plot` read "
        "records\n"
    )
    assert not (tmp_path / "a.json").exists()


def test_broken_session_records_are_one_line_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = tmp_path / "train.vm.1.2.records.jsonl"
    records.write_text('{"type": "header"}\n{"type": "step"}\n')
    assert main(["annotate", str(records), "-o", str(tmp_path / "a.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"asynctrace annotate: error: {records}: line 1: ")
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "a.json").exists()
