"""A crafted Nsight Systems export must not hang the reader: views where nsys writes tables
are refused, and reading an export has a deadline (docs/reliability.md)."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from asynctrace.cli import main
from asynctrace.errors import TraceFormatError
from asynctrace.traces import nsys
from asynctrace.traces.load import load

CORPUS = Path(__file__).parents[1] / "fuzz" / "corpus" / "nsys"


def _export(tmp_path: Path) -> Path:
    src = next(p for p in sorted(CORPUS.glob("seed_*.sqlite")) if _has_kernels(p))
    dst = tmp_path / "crafted.sqlite"
    shutil.copyfile(src, dst)
    return dst


def _has_kernels(p: Path) -> bool:
    with sqlite3.connect(p) as c:
        return bool(
            c.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                "name = 'CUPTI_ACTIVITY_KIND_KERNEL'"
            ).fetchall()
        )


def _endless_kernel_view(path: Path) -> None:
    c = sqlite3.connect(path)
    c.executescript(
        """
        CREATE TABLE k2 AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL;
        DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL;
        CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS
            WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r)
            SELECT k2.* FROM r, k2;
        """
    )
    c.commit()
    c.close()


def test_a_view_where_a_table_belongs_is_refused_in_one_line(tmp_path: Path) -> None:
    path = _export(tmp_path)
    _endless_kernel_view(path)
    # a child process: before the fix this never ended
    r = subprocess.run(
        [sys.executable, "-m", "asynctrace", "report", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("asynctrace report: error: ")
    assert "CUPTI_ACTIVITY_KIND_KERNEL is a view, not a table" in r.stderr


def test_views_of_other_names_are_left_alone(tmp_path: Path) -> None:
    path = _export(tmp_path)
    before = load(path)
    c = sqlite3.connect(path)
    c.execute(
        "CREATE VIEW EXTRAP_FORMAT AS WITH RECURSIVE r(x) AS "
        "(SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x FROM r"
    )
    c.commit()
    c.close()
    assert len(load(path).activities) == len(before.activities)


def test_reading_an_export_has_a_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _export(tmp_path)
    # a small export runs few SQLite steps: the clock is looked at often enough to see it
    monkeypatch.setattr(nsys, "_PROGRESS_STEPS", 100)
    with pytest.raises(TraceFormatError, match="reading it took longer than 0 s"):
        nsys.load_nsys(path, deadline_s=0.0)
    monkeypatch.setattr(nsys, "DEFAULT_DEADLINE_S", 0.0)
    assert main(["report", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("asynctrace report: error: ")
    assert "took longer than 0 s" in err
