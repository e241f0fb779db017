"""``group_runs``: a folder is not a job (#26.9). Which files are one run's ranks, from their
rank, world size and session header alone; every answer here is read off the metadata."""

from __future__ import annotations

from asynctrace.analysis.ranks import compare_runs, group_runs, job_of
from asynctrace.analysis.report import SourceInfo, analyze
from asynctrace.records import SessionHeader
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.model import RangeKind, Trace
from tests.analysis.test_ranks import _rank


def _records(path: str, name: str, rank: int | None, world: int | None, pid: int = 1) -> SourceInfo:
    header = SessionHeader(
        name=name,
        host="h",
        pid=pid,
        rank=rank,
        world_size=world,
        device_kind="cuda",
        device_name="GPU",
        asynchronous=True,
        started_unix_ns=0,
    )
    return SourceInfo(
        path=path,
        format="records",
        device="GPU",
        asynchronous=True,
        rank=rank,
        world_size=world,
        events=1,
        session=header,
    )


def _trace(path: str, rank: int | None, world: int | None) -> SourceInfo:
    return SourceInfo(
        path=path,
        format="kineto",
        device="GPU",
        asynchronous=True,
        rank=rank,
        world_size=world,
        events=1,
    )


def test_unrelated_single_process_sessions_are_runs_of_their_own() -> None:
    # as traces/ holds: ten sessions of three scripts, none distributed
    srcs = [_records(f"s{i}.records.jsonl", f"script{i % 3}", None, None, pid=i) for i in range(10)]
    runs = group_runs(srcs)
    assert [r.members for r in runs] == [[i] for i in range(10)]
    assert {r.kind for r in runs} == {"file"}
    assert [r.name for r in runs][:3] == ["script0", "script1", "script2"]


def test_ranks_of_one_session_and_of_one_trace_job() -> None:
    srcs = [
        _trace("t1.json.gz", 1, 4),
        _records("train.rank1.records.jsonl", "train", 1, 2),
        _trace("t0.json.gz", 0, 4),
        _records("train.rank0.records.jsonl", "train", 0, 2),
        _records("eval.rank0.records.jsonl", "eval", 0, 2),  # another session name
        _trace("single.json.gz", None, None),
        _trace("t9.json.gz", 0, 8),  # another world size: another job
    ]
    runs = group_runs(srcs)
    assert [(r.kind, r.name, r.members) for r in runs] == [
        ("trace", "world size 4", [2, 0]),  # rank order
        ("session", "train", [3, 1]),
        ("session", "eval", [4]),
        ("file", "single.json.gz", [5]),
        ("trace", "world size 8", [6]),
    ]
    assert runs[0].ranks == [0, 1]
    assert runs[0].missing_ranks == 2
    assert runs[1].missing_ranks == 0
    assert not any(r.warnings for r in runs)


def test_a_duplicate_rank_is_a_run_of_its_own_with_a_warning() -> None:
    srcs = [
        _records("a.records.jsonl", "train", 0, 2, pid=1),
        _records("b.records.jsonl", "train", 1, 2, pid=2),
        _records("c.records.jsonl", "train", 0, 2, pid=3),  # a second run's rank 0
    ]
    runs = group_runs(srcs)
    assert [r.members for r in runs] == [[0, 1], [2]]
    assert runs[1].kind == "file"
    assert not runs[0].warnings
    (w,) = runs[1].warnings
    assert "rank 0 of train is in a.records.jsonl already" in w


def test_a_rank_outside_the_world_and_a_world_of_one() -> None:
    srcs = [_trace("a.json.gz", 0, 2), _trace("b.json.gz", 2, 2), _trace("c.json.gz", 0, 1)]
    runs = group_runs(srcs)
    assert [(r.kind, r.members) for r in runs] == [("trace", [0]), ("file", [1]), ("file", [2])]
    assert "rank 2 is outside world size 2" in runs[1].warnings[0]
    assert runs[2].warnings == []


def _unranked(durations: list[int]) -> Trace:
    b = TraceBuilder("other/single.json")
    t = 0
    for i, d in enumerate(durations):
        b.range(f"ProfilerStep#{i}", t, d, kind=RangeKind.STEP, step=i)
        t += d
    return b.build()


def test_compare_runs_tables_only_a_job() -> None:
    # two ranks of one job and one unrelated trace: the job's table has the two ranks only
    reports = [
        analyze(_rank(0, [100, 100]).build(rank=0, world_size=2)),
        analyze(_rank(1, [300, 100]).build(rank=1, world_size=2)),
        analyze(_unranked([900, 900])),
    ]
    runs = compare_runs(reports)
    assert [r.run.members for r in runs] == [[0, 1], [2]]
    job = job_of(runs)
    assert job is runs[0]
    assert job.ranks is not None
    assert job.cross_rank is not None
    assert [r.rank for r in job.ranks.ranks] == [0, 1]
    assert job.ranks.slowest_rank == 1
    assert job.cross_rank.ranks == 2
    assert runs[1].ranks is None
    # two jobs: no folder-wide job
    assert job_of([*runs, runs[0]]) is None
