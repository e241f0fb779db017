"""``load()`` dispatch by content and ``find_traces()`` over folders of ranks."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import asynctrace
from asynctrace.errors import TraceFormatError
from asynctrace.traces.load import find_traces, load
from tests.conftest import shared_trace

_DOC = {
    "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 5, "dur": 2}
    ],
    "distributedInfo": {"rank": 2, "world_size": 4},
}


def test_plain_and_gzip_json_by_content(tmp_path: Path) -> None:
    plain = tmp_path / "a.json"
    plain.write_text(json.dumps(_DOC))
    zipped = tmp_path / "misnamed.json"  # gzip inside, whatever the name says
    zipped.write_bytes(gzip.compress(json.dumps(_DOC).encode()))
    for p in (plain, zipped):
        t = load(p)
        assert (t.format, len(t.ranges), t.rank) == ("kineto", 1, 2)
    assert asynctrace.load is load


@pytest.mark.real_traces
def test_sqlite_goes_to_the_nsys_loader() -> None:
    t = load(shared_trace("nsys", "extrap_con_kernel.sqlite"))
    assert t.format == "nsys"


@pytest.mark.real_traces
def test_real_kineto_through_load() -> None:
    t = load(shared_trace("kineto", "hta_a100_event_sync.json.gz"))
    assert (len(t.runtime), len(t.activities)) == (12, 5)


def test_bad_paths(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="no such file"):
        load(tmp_path / "missing.json")
    with pytest.raises(TraceFormatError, match="is a directory"):
        load(tmp_path)
    empty = tmp_path / "empty.json.gz"
    empty.write_bytes(b"")
    with pytest.raises(TraceFormatError, match="empty file"):
        load(empty)


def test_max_inflated_bytes_is_passed_on(tmp_path: Path) -> None:
    p = tmp_path / "big.json.gz"
    p.write_bytes(gzip.compress(json.dumps(_DOC).encode() + b" " * 10_000))
    with pytest.raises(TraceFormatError, match="inflates beyond"):
        load(p, max_inflated_bytes=1000)
    assert len(load(p).ranges) == 1


def test_find_traces_natural_order(tmp_path: Path) -> None:
    for name in ("rank-10.json.gz", "rank-2.json", "rank-1.pt.trace.json", "x.sqlite"):
        (tmp_path / name).write_bytes(b"{}")
    for name in ("s.records.jsonl", "notes.txt", ".hidden.json"):
        (tmp_path / name).write_bytes(b"{}")
    (tmp_path / "sub.json").mkdir()
    got = [p.name for p in find_traces(tmp_path)]
    assert got == ["rank-1.pt.trace.json", "rank-2.json", "rank-10.json.gz", "x.sqlite"]


def test_find_traces_leaves_out_what_asynctrace_derives(tmp_path: Path) -> None:
    # a deep-mode run folder holds each trace and its annotated copy: one rank, not two
    for name in (
        "vm_1.17.pt.trace.json.gz",
        "vm_1.17.annotated.json.gz",
        "x.ANNOTATED.json",
        "demo.summary.json",
    ):
        (tmp_path / name).write_bytes(b"{}")
    assert [p.name for p in find_traces(tmp_path)] == ["vm_1.17.pt.trace.json.gz"]
    (tmp_path / "vm_1.17.pt.trace.json.gz").unlink()
    with pytest.raises(TraceFormatError, match="annotated copies and summaries are left out"):
        find_traces(tmp_path)


def test_find_traces_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="no trace files") as info:
        find_traces(tmp_path)
    # the message names every suffix that is looked for (docs/formats.md), .sqlite3 included
    assert "(*.json, *.json.gz, *.sqlite, *.sqlite3)" in str(info.value)
    with pytest.raises(TraceFormatError, match="no such directory"):
        find_traces(tmp_path / "nope")
    f = tmp_path / "f.json"
    f.write_text("{}")
    with pytest.raises(TraceFormatError, match="not a directory"):
        find_traces(f)


def test_find_sources_lists_traces_and_records(tmp_path: Path) -> None:
    # the one loader of a folder: the error names both kinds, in the loader's own words
    from asynctrace.files.sources import find_sources

    with pytest.raises(TraceFormatError) as info:
        find_sources(tmp_path)
    assert info.value.reason == (
        "no trace files or session records (*.records.jsonl, *.json, *.json.gz, *.sqlite, "
        "*.sqlite3) in this directory"
    )
    # records and no trace: listed, no error
    (tmp_path / "train.records.jsonl").write_text("")
    found = find_sources(tmp_path)
    assert (found.traces, [p.name for p in found.records]) == ([], ["train.records.jsonl"])
    assert find_traces(tmp_path, allow_empty=True) == []
    with pytest.raises(TraceFormatError, match=r"^.*: no trace files \(\*\.json,"):
        find_traces(tmp_path)
