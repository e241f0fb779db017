"""The records file's versions: version 2 notes are ``{code, text}`` objects, version 1 files
(notes as strings) still read, with no code guessed from a note's prose."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from asynctrace.errors import TraceFormatError
from asynctrace.records import (
    RECORDS_SCHEMA,
    RECORDS_VERSION,
    Note,
    SessionHeader,
    SessionSummary,
    read_records,
)

CORPUS = Path(__file__).parent / "fuzz" / "corpus" / "records"


def _header(version: int) -> dict[str, Any]:
    return {
        "type": "header", "schema": RECORDS_SCHEMA, "version": version, "name": "train",
        "host": "node0", "pid": 1, "device_kind": "cpu", "device_name": "CPU",
        "asynchronous": False, "started_unix_ns": 1,
    }  # fmt: skip


def _write(path: Path, *lines: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _summary(notes: list[Any]) -> dict[str, Any]:
    return {"type": "summary", "steps": 0, "wall_ns": 5, "verdict": "no-steps", "notes": notes}


def test_a_new_file_is_version_2_with_coded_notes() -> None:
    assert RECORDS_VERSION == 2
    assert SessionHeader(
        name="n", host="h", pid=1, device_kind="cpu", device_name="c", asynchronous=False,
        started_unix_ns=1,
    ).version == 2  # fmt: skip
    note = Note(code="collected-at-exit", text="3 step(s) were still pending at exit")
    line = SessionSummary(steps=3, wall_ns=1, notes=[note])
    assert json.loads(msgspec.json.encode(line))["notes"] == [
        {"code": "collected-at-exit", "text": "3 step(s) were still pending at exit"}
    ]


def test_version_2_notes_read_back(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "a.records.jsonl",
        _header(2),
        _summary([{"code": "recent-window", "text": "median and p90 are over ..."}]),
    )
    summary = read_records(path).summary
    assert summary is not None
    assert summary.notes == [Note(code="recent-window", text="median and p90 are over ...")]


def test_a_version_1_file_reads_each_note_as_code_note(tmp_path: Path) -> None:
    # the CPU note's prose: still code "note", never a code read from the words
    cpu = "the CPU backend executes synchronously: each op is done when Python gets control back"
    path = _write(tmp_path / "a.records.jsonl", _header(1), _summary([cpu, "n2"]))
    rec = read_records(path)
    assert rec.header.version == 1
    assert rec.summary is not None
    assert rec.summary.notes == [Note(code="note", text=cpu), Note(code="note", text="n2")]
    assert (rec.summary.steps, rec.summary.wall_ns, rec.summary.verdict) == (0, 5, "no-steps")
    assert type(rec.summary) is SessionSummary


def test_the_version_1_corpus_seed_still_reads() -> None:
    rec = read_records(CORPUS / "seed_complete.records.jsonl")
    assert rec.summary is not None
    assert rec.summary.notes == [Note(code="note", text="n1")]
    assert rec.summary.collected_at_exit == 1
    v2 = read_records(CORPUS / "seed_complete_v2.records.jsonl")
    assert v2.summary is not None
    assert [n.code for n in v2.summary.notes] == ["collected-at-exit"]


@pytest.mark.parametrize(
    ("version", "notes"), [(2, ["a plain string"]), (1, [{"code": "x", "text": "y"}])]
)
def test_notes_of_the_other_version_are_refused(
    tmp_path: Path, version: int, notes: list[Any]
) -> None:
    path = _write(tmp_path / "a.records.jsonl", _header(version), _summary(notes))
    with pytest.raises(TraceFormatError, match="line 2: not an asynctrace record"):
        read_records(path)


def test_a_version_1_summary_is_checked_as_any_line(tmp_path: Path) -> None:
    bad = {**_summary(["n"]), "steps": "many"}
    path = _write(tmp_path / "a.records.jsonl", _header(1), bad)
    with pytest.raises(TraceFormatError, match="line 2: not an asynctrace record"):
        read_records(path)
    huge = {**_summary(["n"]), "wall_ns": 2**64 - 1}
    path = _write(tmp_path / "b.records.jsonl", _header(1), huge)
    with pytest.raises(TraceFormatError, match="line 2: wall_ns is out of range"):
        read_records(path)


def test_a_newer_version_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.records.jsonl", _header(3))
    with pytest.raises(TraceFormatError, match="v3 is newer than this asynctrace"):
        read_records(path)


def test_issuing_time_is_one_definition_in_every_view() -> None:
    """A step's issuing time: host time less data and sync waits, never below zero; the
    series' column and the step bars give the same, step by step."""
    from asynctrace.analysis.report import Report, SourceInfo, VerdictInfo
    from asynctrace.analysis.series import steps_series
    from asynctrace.records import StepRecord
    from asynctrace.render.views import step_bars

    steps = [
        StepRecord(step=0, start_ns=0, frontend_ns=10, data_wait_ns=3, sync_wait_ns=2),
        # the waits reach past the host span: nothing was issued, not a negative time
        StepRecord(step=1, start_ns=10, frontend_ns=10, data_wait_ns=3, sync_wait_ns=9),
    ]
    assert [s.issuing_ns for s in steps] == [5, 0]
    series = steps_series(steps, max_bins=len(steps))
    assert list(series.figures["issuing_ns"].median) == [5.0, 0.0]
    report = Report(
        source=SourceInfo(
            path="x",
            format="records",
            device="cpu",
            asynchronous=False,
            rank=None,
            world_size=None,
            events=2,
        ),
        steps=steps,
        verdict=VerdictInfo(code="x", message="x"),
    )
    hosts = [p.dur_ns for b in step_bars(report).bars for p in b.host if p.kind == "host"]
    assert hosts == [5, 0]
