"""Terminal escape sequences in names taken from files are shown escaped in every text output
(never interpreted by the terminal); JSON output keeps them, escaped by JSON itself."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from asynctrace.analysis.report import Report
from asynctrace.cli import main
from asynctrace.records import Note, SessionHeader, SessionSummary, StepRecord, SyncSite
from asynctrace.render.printable import printable, printable_fields

from .test_check import TRAIN, check

#: sets the window title, clears the screen, plants an OSC 8 link, and a C1 CSI
EVIL = "\x1b]0;TITLE\x07\x1b[2J\x1b]8;;http://evil/\x1b\\click\x1b]8;;\x1b\\\x9b2J\x7f"
SHOWN = printable(EVIL)
RAW = ("\x1b", "\x07", "\x9b", "\x7f")


def _clean(text: str) -> None:
    for c in RAW:
        assert c not in text, repr(text)


def test_printable_escapes_c0_c1_and_del_and_keeps_unicode() -> None:
    assert printable("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert printable("\x00\x07\x0a\x1f\x7f\x80\x9f") == "\\x00\\x07\\x0a\\x1f\\x7f\\x80\\x9f"
    assert printable("é ü ß 漢字 😀 \u00a0") == "é ü ß 漢字 😀 \u00a0"
    assert SHOWN.startswith("\\x1b]0;TITLE\\x07\\x1b[2J\\x1b]8;;http://evil/")


def _trace(tmp_path: Path) -> Path:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0,
         "dur": 100},
        {"ph": "X", "cat": "python_function", "name": f"ev{EVIL}il.py(12): f", "pid": 1,
         "tid": 1, "ts": 10, "dur": 50},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1,
         "ts": 20, "dur": 10, "args": {"correlation": 5}},
        {"ph": "X", "cat": f"c{EVIL}", "name": "q", "pid": 1, "tid": 1, "ts": 0, "dur": 1},
        {"ph": "X", "cat": "kernel", "name": f"k{EVIL}", "pid": 0, "tid": 7, "ts": 30,
         "dur": 2, "args": {"stream": 7, "device": 0}},
    ]  # fmt: skip
    doc = {"traceEvents": events, "deviceProperties": [{"id": 0, "name": f"GPU é{EVIL}"}]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    return path


def test_report_text_shows_escapes_and_json_keeps_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _trace(tmp_path)
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    _clean(out)
    assert f"GPU é{SHOWN}" in out.replace("\n", "")  # the device name (é kept)
    assert f"ev{SHOWN[:20]}" in out  # the sync site, from a python_function name
    assert main(["report", str(path), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert EVIL in obj["source"]["device"]


def _records(path: Path, *, evil: str = EVIL) -> Path:
    header = SessionHeader(
        name=f"n{evil}", host="h", pid=1, device_kind="fake", device_name=f"Fake{evil}",
        asynchronous=True, started_unix_ns=0,
    )  # fmt: skip
    steps = [
        StepRecord(step=i, start_ns=i * 1000, frontend_ns=1000 + i, sync_count=1) for i in range(12)
    ]
    site = SyncSite(site=f"train{evil}.py:3", op=f"op{evil}", count=12, steps=12)
    lines = [header, *steps, site, SessionSummary(steps=12, wall_ns=12_000)]
    path.write_bytes(b"\n".join(msgspec.json.encode(x) for x in lines) + b"\n")
    return path


def test_report_on_records_shows_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = _records(tmp_path / "a.records.jsonl")
    assert main(["report", str(p), "--steps"]) == 0
    out = capsys.readouterr().out
    _clean(out)
    assert f"Fake{SHOWN[:10]}" in out
    assert f"op{SHOWN[:10]}" in out
    assert main(["report", str(p), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["source"]["device"] == f"Fake{EVIL}"


def test_compare_shows_escapes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _records(tmp_path / f"a{EVIL[:8]}.records.jsonl")
    b = _records(tmp_path / "b.records.jsonl")
    main(["compare", str(a), str(b)])
    out = capsys.readouterr().out
    _clean(out)
    assert "\\x1b" in out


def test_errors_and_skipped_files_show_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(tmp_path / f"no{EVIL[:8]}.json")]) == 2
    err = capsys.readouterr().err
    _clean(err)
    assert "no\\x1b]0;TITL.json" in err
    _records(tmp_path / "good.records.jsonl")
    (tmp_path / f"bad{EVIL[:8]}.records.jsonl").write_text("{not json\n")
    assert main(["report", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    _clean(captured.err)
    _clean(captured.out)


def test_check_shows_escapes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / f"x{EVIL[:8]}"
    folder.mkdir()
    script = folder / "train.py"
    script.write_text(TRAIN.format(steps=3, extra="pass"))
    assert check(tmp_path, str(script)) == 0
    out = capsys.readouterr().out
    _clean(out)
    assert "x\\x1b]0;TITL/train.py" in out


def _evil_report(steps: int) -> Report:
    from asynctrace.analysis.accumulate import StepAccumulator
    from asynctrace.analysis.report import session_report

    header = SessionHeader(
        name=f"n{EVIL}", host="h", pid=1, device_kind="cpu", device_name=f"CPU é{EVIL}",
        asynchronous=False, started_unix_ns=0,
    )  # fmt: skip
    acc = StepAccumulator(window=10).extend(
        StepRecord(step=i, start_ns=i, frontend_ns=1) for i in range(steps)
    )
    return session_report(
        acc,
        header=header,
        path=f"/r{EVIL}",
        sync_sites=[SyncSite(site=f"s{EVIL}.py:1", op=f"op{EVIL}", count=1)],
        notes=[Note(code="evil", text=f"note{EVIL}"), Note(code="plain", text="plain")],
        wall_ns=1,
    )


def test_printable_fields_escapes_every_string_of_a_summary_object() -> None:
    report = _evil_report(1)
    shown = printable_fields(report)
    assert shown.source.session is not None
    _clean(
        shown.source.session.name
        + shown.verdict.message
        + "".join(n.text for n in shown.notes)
        + shown.source.path
    )
    assert shown.source.device == f"CPU é{SHOWN}"
    assert shown.notes[:2] == [
        Note(code="evil", text=f"note{SHOWN}"),
        Note(code="plain", text="plain"),
    ]
    assert shown.sync_sites[0].site == f"s{SHOWN}.py:1"
    assert shown.source.events == 1
    plain = SyncSite(site="a.py:1", op="op", count=1)
    assert printable_fields(plain) is plain


def test_the_exit_summary_shows_names_escaped() -> None:
    import io

    from asynctrace.render.text import print_summary

    for steps in (0, 1):
        out = io.StringIO()
        print_summary(_evil_report(steps), file=out)
        _clean(out.getvalue())
        assert SHOWN in out.getvalue()
