"""``asynctrace export --parquet`` on awkward inputs: same names in two folders, names that are
not UTF-8 or hold escape sequences, links planted at temporary names, write errors, session
records (docs/reliability.md)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from asynctrace.cli import main
from tests.conftest import ROOT

pytest.importorskip("pyarrow")

DEMO = ROOT / "traces" / "cpu-demo"


def _trace(rank: int, kernels: int = 3, *, names: str = "k") -> dict[str, Any]:
    """A Kineto trace of two steps, ``kernels`` launches in each, of rank ``rank``."""
    events: list[dict[str, Any]] = []
    corr = 0
    for step in range(2):
        t0 = step * (kernels * 20 + 100)
        events.append(
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1,
             "tid": 1, "ts": t0, "dur": kernels * 20 + 50}
        )  # fmt: skip
        for k in range(kernels):
            corr += 1
            events.append(
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                 "tid": 1, "ts": t0 + 1 + k * 20, "dur": 5, "args": {"correlation": corr}}
            )  # fmt: skip
            events.append(
                {"ph": "X", "cat": "kernel", "name": f"{names}{corr}", "pid": 0, "tid": 7,
                 "ts": t0 + 10 + k * 20, "dur": 15,
                 "args": {"stream": 7, "correlation": corr, "device": 0}}
            )  # fmt: skip
    return {
        "traceEvents": events,
        "deviceProperties": [{"id": 0, "name": "GPU"}],
        "distributedInfo": {"rank": rank},
    }


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def _files(out: Path, table: str) -> list[Path]:
    return sorted((out / table).glob("rank=*/*"))


@pytest.mark.parametrize("workers", ["1", "2"])
def test_two_inputs_of_one_name_and_rank_keep_both_tables(
    tmp_path: Path, workers: str, capsys: pytest.CaptureFixture[str]
) -> None:
    duckdb = pytest.importorskip("duckdb")
    a = _write(tmp_path / "a" / "t.json", _trace(0, 3))
    b = _write(tmp_path / "b" / "t.json", _trace(0, 5))
    out = tmp_path / "out"
    assert main(["export", str(a), str(b), "--parquet", str(out), "--workers", workers]) == 0
    assert "wrote 2 rank(s)" in capsys.readouterr().out
    steps = _files(out, "steps")
    assert len(steps) == 2
    assert all(p.name.startswith("t.json.") and p.name.endswith(".parquet") for p in steps)
    got = duckdb.sql(
        f"SELECT source, count(*) FROM '{out}/activities/*/*.parquet' GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert got == [(str(a), 6), (str(b), 10)]
    # a second export of the same files replaces them: still two files per table
    assert main(["export", str(a), str(b), "--parquet", str(out), "--workers", workers]) == 0
    assert len(_files(out, "steps")) == 2
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def test_a_name_that_is_not_utf8_is_skipped_escaped_and_the_rest_exported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "in"
    _write(folder / "rank0.json", _trace(0))
    odd = Path(os.fsdecode(os.path.join(os.fsencode(folder), b"rank1-\xff.json")))
    _write(odd, _trace(1))
    out = tmp_path / "out"
    assert main(["export", str(folder), "--parquet", str(out), "--workers", "1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"asynctrace export: skipped {folder}/rank1-\\xff.json: ")
    assert "not UTF-8" in err
    assert [p.parent.name for p in _files(out, "steps")] == ["rank=0"]


def test_escape_sequences_in_a_skipped_name_are_shown_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "in"
    _write(folder / "rank0.json", _trace(0))
    (folder / "bad\x1b]0;TITLE\x07\x1b[2J.json").write_text("{}")
    assert main(["export", str(folder), "--parquet", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err
    assert "\x07" not in err
    assert "bad\\x1b]0;TITLE\\x07\\x1b[2J.json" in err


def test_a_link_planted_at_a_tmp_name_is_never_written_through(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from asynctrace.export.parquet import table_file_name

    trace = _write(tmp_path / "rank0.json", _trace(0))
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    # the names a writer could predict: the old `<name>.parquet.tmp` and today's names + .tmp
    for table in ("steps", "activities", "syncs", "sync_sites", "ranks"):
        folder = out / table / "rank=0"
        folder.mkdir(parents=True)
        for name in ("rank0.json.parquet.tmp", table_file_name(trace) + ".tmp"):
            (folder / name).symlink_to(victim)
    assert main(["export", str(trace), "--parquet", str(out)]) == 0, capsys.readouterr().err
    assert victim.read_text() == "precious\n"
    for table in ("steps", "activities", "syncs", "sync_sites", "ranks"):
        written = out / table / "rank=0" / table_file_name(trace)
        assert written.is_file()
        assert not written.is_symlink()


def _limited_export(args: list[str], limit: int) -> subprocess.CompletedProcess[str]:
    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "asynctrace", "export", *args],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=preexec,
        timeout=300,
        check=False,
    )


@pytest.mark.timeout(300)
def test_a_write_error_names_the_file_and_leaves_none_of_the_ranks_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # many distinct kernel names: the activities table is much larger than the steps table
    trace = _write(tmp_path / "rank0.json", _trace(0, 3000, names="kernel_" + "x" * 40))
    free = tmp_path / "free"
    assert main(["export", str(trace), "--parquet", str(free)]) == 0
    capsys.readouterr()
    sizes = {t: _files(free, t)[0].stat().st_size for t in ("steps", "activities")}
    assert sizes["activities"] > 4 * sizes["steps"], sizes
    limit = (sizes["steps"] + sizes["activities"]) // 2
    out = tmp_path / "out"
    r = _limited_export([str(trace), "--parquet", str(out), "--workers", "1"], limit)
    assert r.returncode == 2, r
    assert "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("asynctrace export: error: "), r.stderr
    assert f"{out}/activities/rank=0/" in r.stderr
    assert "File too large" in r.stderr
    # all of the rank's tables or none: here none, and no temporary left
    assert [p for p in out.rglob("*") if p.is_file()] == []


def test_session_records_are_exported_beside_traces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    duckdb = pytest.importorskip("duckdb")
    from asynctrace.analysis.report import analyze
    from asynctrace.files.sources import load_source

    folder = tmp_path / "in"
    folder.mkdir()
    records = sorted(DEMO.glob("*.records.jsonl"))[0]
    (folder / records.name).write_bytes(records.read_bytes())
    _write(folder / "rank0.json", _trace(0))
    out = tmp_path / "out"
    assert main(["export", str(folder), "--parquet", str(out), "--workers", "1"]) == 0
    assert "wrote 2 rank(s)" in capsys.readouterr().out
    want = analyze(load_source(folder / records.name))
    db = duckdb.connect()
    # one glob reads the trace's steps and the session's together: the same columns
    rows = db.sql(
        "SELECT source, step, frontend_ns, sync_wait_ns, name "
        f"FROM '{out}/steps/*/*.parquet' ORDER BY source, step"
    ).fetchall()
    session = [r for r in rows if r[0] == str(folder / records.name)]
    assert [(r[1], r[2], r[3], r[4]) for r in session] == [
        (s.step, s.frontend_ns, s.sync_wait_ns, None) for s in want.steps
    ]
    assert len([r for r in rows if r[0] == str(folder / "rank0.json")]) == 2
    sites = db.sql(
        f"SELECT site, op, count, wait_ns FROM '{out}/sync_sites/*/*.parquet' "
        f"WHERE source = '{folder / records.name}' ORDER BY site, op"
    ).fetchall()
    assert sites == sorted((s.site, s.op, s.count, s.wait_ns) for s in want.sync_sites)


def test_a_records_file_alone_and_a_folder_of_records_are_exported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = sorted(DEMO.glob("*.records.jsonl"))
    out = tmp_path / "out"
    # was: "malformed JSON … trailing characters"
    assert main(["export", str(records[0]), "--parquet", str(out)]) == 0
    assert "wrote 1 rank(s)" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["steps", "sync_sites"]
    # was: "no trace files" (a folder of records only, as traces/ of a checkout)
    folder = tmp_path / "sessions"
    folder.mkdir()
    for r in records:
        (folder / r.name).write_bytes(r.read_bytes())
    assert main(["export", str(folder), "--parquet", str(tmp_path / "out2")]) == 0
    assert f"wrote {len(records)} rank(s)" in capsys.readouterr().out
    assert len(_files(tmp_path / "out2", "steps")) == len(records)


def test_an_output_folder_whose_name_is_not_utf8_is_refused_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _write(tmp_path / "rank0.json", _trace(0))
    out = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"out-\xff"))
    assert main(["export", str(trace), "--parquet", out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "out-\\xff: the name is not UTF-8" in err
    assert not os.path.exists(out)
