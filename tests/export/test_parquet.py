"""``asynctrace export --parquet``: the tables read back by DuckDB (and Polars) agree with the
JSON report of the same folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from asynctrace.cli import main
from tests.cli.test_many import make_ranks

pytestmark = pytest.mark.real_traces


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the Parquet folder, the rank files' folder)"""
    pytest.importorskip("pyarrow")
    ranks = tmp_path_factory.mktemp("ranks")
    make_ranks(ranks, 4)
    out = tmp_path_factory.mktemp("parquet")
    assert main(["export", str(ranks), "--parquet", str(out), "--workers", "2"]) == 0
    return out, ranks


def _report(folder: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(["report", str(folder), "--json", "--workers", "1"]) == 0
    obj: dict[str, object] = json.loads(capsys.readouterr().out)
    return obj


@pytest.mark.timeout(300)
def test_duckdb_counts_match_the_report(
    exported: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    duckdb = pytest.importorskip("duckdb")
    out, folder = exported
    capsys.readouterr()
    report = _report(folder, capsys)
    reports = {r["source"]["rank"]: r for r in report["reports"]}  # type: ignore[index]
    db = duckdb.connect()

    def rows(sql: str) -> dict[int, tuple[object, ...]]:
        return {r[0]: r[1:] for r in db.sql(sql).fetchall()}

    steps = rows(
        f"SELECT rank, count(*), sum(frontend_ns) FROM '{out}/steps/*/*.parquet' GROUP BY 1"
    )
    acts = rows(
        "SELECT rank, count(*), count(launch_start_ns), max(queue_delay_ns), "
        f"max(launch_to_start_ns) FROM '{out}/activities/*/*.parquet' GROUP BY 1"
    )
    syncs = rows(f"SELECT rank, count(*) FROM '{out}/syncs/*/*.parquet' GROUP BY 1")
    per_step = {
        (r, s): n
        for r, s, n in db.sql(
            f"SELECT rank, step, count(*) FROM '{out}/activities/*/*.parquet' "
            "WHERE step IS NOT NULL GROUP BY 1, 2"
        ).fetchall()
    }
    assert set(steps) == set(acts) == set(reports) == {0, 1, 2, 3}
    for rank, r in reports.items():
        assert steps[rank] == (len(r["steps"]), sum(s["frontend_ns"] for s in r["steps"]))
        launch = r["trace"]["launch"]
        assert acts[rank] == (
            r["trace"]["activities"]["total"],
            launch["matched"],
            launch["queue_delay_ns"]["max"],
            launch["launch_to_start_ns"]["max"],
        )
        assert syncs.get(rank, (0,)) == (r["trace"]["syncs"]["count"],)
        for s, x in zip(r["steps"], r["trace"]["steps"], strict=True):
            assert per_step.get((rank, s["step"]), 0) == x["activities"]
    # the slowest 10 steps across all ranks (the docs' example) run as written
    top = db.sql(
        f"SELECT rank, step, frontend_ns FROM '{out}/steps/*/*.parquet' "
        "ORDER BY frontend_ns DESC LIMIT 10"
    ).fetchall()
    assert len(top) == sum(len(r["steps"]) for r in reports.values())


@pytest.mark.timeout(300)
def test_polars_reads_the_same_rows(exported: tuple[Path, Path]) -> None:
    pl = pytest.importorskip("polars")
    out, _ = exported
    steps = pl.scan_parquet(f"{out}/steps/**/*.parquet", hive_partitioning=True).collect()
    assert sorted(set(steps["rank"].to_list())) == [0, 1, 2, 3]
    assert steps.schema["frontend_ns"] == pl.Int64


def test_without_pyarrow_says_how_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    assert main(["export", str(tmp_path), "--parquet", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert "pip install 'asynctrace[parquet]'" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.timeout(300)
def test_bad_file_skipped_and_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("pyarrow")
    make_ranks(tmp_path / "in", 2)
    (tmp_path / "in" / "rank2.json").write_text("{}")
    assert main(["export", str(tmp_path / "in"), "--parquet", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"asynctrace export: skipped {tmp_path / 'in' / 'rank2.json'}: ")
    assert len(list((tmp_path / "out" / "steps").glob("rank=*/*.parquet"))) == 2
