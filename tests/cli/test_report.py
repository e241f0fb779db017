from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from asynctrace.analysis.report import REPORT_SCHEMA_VERSION
from asynctrace.cli import main
from asynctrace.records import SessionHeader, SessionSummary, StepRecord, SyncSite
from tests.conftest import shared_trace


def _write_records(path: Path, rank: int, frontend: list[int], *, complete: bool = True) -> Path:
    lines = [
        SessionHeader(
            name="train",
            host="h",
            pid=1,
            rank=rank,
            world_size=2,
            device_kind="fake",
            device_name="Fake GPU",
            asynchronous=True,
            started_unix_ns=0,
        )
    ]
    t = 0
    lines += [
        StepRecord(step=i, start_ns=(t := t + f), frontend_ns=f, device_ns=2 * f, sync_count=1)
        for i, f in enumerate(frontend)
    ]
    lines.append(SyncSite(site="train.py:12", op="aten::_local_scalar_dense", count=len(frontend)))
    if complete:
        lines.append(SessionSummary(steps=len(frontend), wall_ns=sum(frontend)))
    path.write_bytes(b"\n".join(msgspec.json.encode(x) for x in lines) + b"\n")
    return path


def test_records_file_json_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = _write_records(
        tmp_path / "train.rank0.records.jsonl", 0, [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    )
    assert main(["report", str(p), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["schema_version"] == 4
    f = obj["figures"]["frontend_ns"]
    assert (f["count"], f["mean"], f["median"], f["p90"]) == (10, 55.0, 55.0, 90)
    assert obj["figures"]["device_ns"]["mean"] == 110.0
    assert "run_ahead_ns" not in obj["figures"]  # null in every record
    src = obj["source"]
    assert (src["format"], src["rank"], src["complete"]) == ("records", 0, True)
    assert src["session"]["device_kind"] == "fake"
    assert [s["frontend_ns"] for s in obj["steps"]][:3] == [10, 20, 30]
    assert obj["step_bounds"] == []  # a session's report holds the run's bound only
    assert obj["sync_sites"][0]["site"] == "train.py:12"
    assert set(obj["verdict"]) == {"code", "message", "findings", "codes"}
    assert obj["diagnosis"][0]["code"] == obj["bound"]["label"]  # the headline is the label
    assert obj["trace"] is None  # what only a trace has


def test_records_folder_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write_records(tmp_path / "a.rank0.records.jsonl", 0, [1000, 3000])
    _write_records(tmp_path / "a.rank1.records.jsonl", 1, [5000], complete=False)
    assert main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "rank 0" in out
    assert "rank 1" in out
    assert "2.00 µs" in out  # rank 0 mean frontend
    assert "incomplete" in out
    assert "\x1b[" not in out  # no colour when not a terminal
    # a folder of sessions is a job too: the ranks side by side
    assert "ranks (2)" in out
    assert "slowest" in out


def _bad(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["report", *args]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "no such file" in _bad([str(tmp_path / "nope.json")], capsys)


def test_empty_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _bad([str(tmp_path)], capsys)
    # report reads session records from a folder too: the message names them with the traces
    assert main(["report", str(tmp_path)]) == 2
    assert "no trace files or session records (*.records.jsonl, *.json," in capsys.readouterr().err


def test_bad_records_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "x.records.jsonl"
    p.write_text('{"type": "step"}\n')
    _bad([str(p)], capsys)


def test_not_kineto(capsys: pytest.CaptureFixture[str]) -> None:
    _bad([str(shared_trace("kineto", "NOT_KINETO_execution_trace.json.gz"))], capsys)


def test_truncated_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = gzip.decompress(shared_trace("kineto", "hta_a100_event_sync.json.gz").read_bytes())
    p = tmp_path / "cut.json"
    p.write_bytes(raw[: len(raw) // 2])
    _bad([str(p)], capsys)
    g = tmp_path / "cut.json.gz"
    g.write_bytes(gzip.compress(raw)[:-200])
    _bad([str(g)], capsys)


def test_subprocess_one_line_no_traceback(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "asynctrace", "report", str(tmp_path / "missing.json.gz")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1
    assert out.stdout == ""


def test_trace_json_and_text(capsys: pytest.CaptureFixture[str]) -> None:
    path = shared_trace("kineto", "hta_a100_event_sync.json.gz")
    assert main(["report", str(path), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["schema_version"] == 4
    for key in ("source", "steps", "step_bounds", "figures", "verdict", "bound", "trace"):
        assert key in obj
    for key in ("activities", "launch", "queue", "syncs", "step_source", "steps"):
        assert key in obj["trace"]
    assert obj["source"]["format"] == "kineto"
    assert obj["trace"]["activities"]["total"] == 5
    assert len(obj["trace"]["steps"]) == len(obj["steps"])
    assert main(["report", str(path), "--steps"]) == 0
    out = capsys.readouterr().out
    assert "launch delays" in out
    assert "frontend" in out  # the steps table's host column
    # the headline leads, under the title
    assert out.splitlines()[1].startswith(obj["diagnosis"][0]["code"])


def test_rank_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for r in (0, 1):
        src = shared_trace("kineto", f"hta_sampled_rank{r}.json.gz")
        (tmp_path / f"rank{r}.json.gz").write_bytes(src.read_bytes())
    assert main(["report", str(tmp_path), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert set(obj) == {"schema_version", "reports", "runs", "ranks", "cross_rank"}
    assert obj["schema_version"] == REPORT_SCHEMA_VERSION
    # one job (world size 128, ranks 0 and 1): its figures are the folder's
    (run,) = obj["runs"]
    assert run["run"]["kind"] == "trace"
    assert run["run"]["missing_ranks"] == 126
    assert run["ranks"] == obj["ranks"]
    assert [r["source"]["rank"] for r in obj["reports"]] == [0, 1]
    assert [r["rank"] for r in obj["ranks"]["ranks"]] == [0, 1]
    assert sum(r["slowest"] for r in obj["ranks"]["ranks"]) == 1
    assert main(["report", str(tmp_path)]) == 0
    assert "slowest" in capsys.readouterr().out


def test_folder_with_a_bad_file_reports_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = shared_trace("kineto", "hta_a100_event_sync.json.gz")
    (tmp_path / "rank0.json.gz").write_bytes(good.read_bytes())
    (tmp_path / "rank1.json").write_text("{not json")
    assert main(["report", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "launch delays" in captured.out
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("asynctrace report: skipped ")
    assert "rank1.json" in line


def test_folder_of_traces_and_records_is_one_list_of_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = shared_trace("kineto", "hta_sampled_rank0.json.gz")
    (tmp_path / "rank0.json.gz").write_bytes(src.read_bytes())
    _write_records(tmp_path / "train.rank0.records.jsonl", 0, [1000, 3000])
    _write_records(tmp_path / "train.rank1.records.jsonl", 1, [1000, 3000])
    assert main(["report", str(tmp_path), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert "records" not in obj  # session records are reports among the others
    assert [r["source"]["format"] for r in obj["reports"]] == ["kineto", "records", "records"]
    # the trace (world size 128) is no rank of session "train" (world size 2): two runs, and
    # the one job's table holds the session's two ranks only (#26.9)
    assert [r["run"]["members"] for r in obj["runs"]] == [[0], [1, 2]]
    assert [r["rank"] for r in obj["ranks"]["ranks"]] == [0, 1]
    assert obj["cross_rank"]["ranks"] == 2
    assert main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "launch delays" in out  # the trace's sections
    assert "train.rank1.records.jsonl (fake, Fake GPU, rank 1): 2 step(s)" in out
    assert "ranks of train (2)" in out
