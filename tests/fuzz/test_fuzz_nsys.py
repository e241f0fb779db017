"""Fuzzing the Nsight Systems loader: damaged SQLite exports end in a report or
``TraceFormatError``.

Mutations: dropped tables and columns, NULL / text / real / blob / huge values in any column,
negative durations, duplicated and deleted rows, NULL or invalid UTF-8 strings, truncated files,
flipped bytes and zeroed pages. Seeds: the committed corpus (two trimmed real exports) and the
small real exports in ../shared/traces/nsys (skipped when absent).
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asynctrace.errors import TraceFormatError
from asynctrace.traces.load import load
from tests.conftest import NSYS_DIR, examples
from tests.fuzz._mutators import (
    CORPUS,
    NSYS_OPS,
    Op,
    check_trace_file,
    mutate_nsys,
    nsys_corpus_seeds,
    nsys_shared_seeds,
)

CORPUS_EXAMPLES = examples(1000, quick=300)
SHARED_EXAMPLES = examples(500, quick=150)

_FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
_u32 = st.integers(min_value=0, max_value=2**32 - 1)
ops_strategy = st.lists(
    st.builds(Op, st.sampled_from(NSYS_OPS), _u32, _u32, _u32), min_size=1, max_size=3
)
_SEEDS = nsys_corpus_seeds()


def _run(tmp: Path, seed: Path, ops: list[Op]) -> str:
    out = tmp / "case.sqlite"
    out.unlink(missing_ok=True)
    mutate_nsys(seed, out, ops)
    return check_trace_file(out)


def test_corpus_has_seeds() -> None:
    assert len(_SEEDS) >= 2


@settings(_FUZZ, max_examples=CORPUS_EXAMPLES)
@given(seed=st.sampled_from(_SEEDS), ops=ops_strategy)
def test_fuzz_corpus_seeds(
    tmp_path_factory: pytest.TempPathFactory, seed: Path, ops: list[Op]
) -> None:
    assert _run(tmp_path_factory.getbasetemp(), seed, ops) in ("report", "refused")


def test_fuzz_shared_seeds(tmp_path_factory: pytest.TempPathFactory) -> None:
    seeds = nsys_shared_seeds(NSYS_DIR) if NSYS_DIR.is_dir() else []
    if not seeds:
        pytest.skip(f"real exports not available ({NSYS_DIR} is absent on a user's clone)")
    tmp = tmp_path_factory.mktemp("nsys_shared")

    @settings(_FUZZ, max_examples=SHARED_EXAMPLES)
    @given(seed=st.sampled_from(seeds), ops=ops_strategy)
    def run(seed: Path, ops: list[Op]) -> None:
        assert _run(tmp, seed, ops) in ("report", "refused")

    run()


@pytest.mark.parametrize("seed", _SEEDS, ids=[s.name for s in _SEEDS])
def test_unmutated_seeds_give_a_report(seed: Path) -> None:
    assert check_trace_file(seed) == "report"


# Deterministic sweeps: every table missing, every column NULL / text, one at a time.


def _tables_and_columns(seed: Path) -> list[tuple[str, str]]:
    with closing(sqlite3.connect(seed)) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return [
            (t, r[1]) for t in tables for r in conn.execute(f'PRAGMA table_info("{t}")').fetchall()
        ]


@pytest.mark.parametrize("seed", _SEEDS, ids=[s.name for s in _SEEDS])
def test_every_table_missing(tmp_path: Path, seed: Path) -> None:
    tables = sorted({t for t, _ in _tables_and_columns(seed)})
    outcomes = {}
    for i, table in enumerate(tables):
        out = tmp_path / f"drop{i}.sqlite"
        out.write_bytes(seed.read_bytes())
        with closing(sqlite3.connect(out)) as conn:
            conn.execute(f'DROP TABLE "{table}"')
            conn.commit()
        outcomes[table] = check_trace_file(out)
    # StringIds is what makes a file an nsys export: without it, refused; the rest optional
    assert outcomes.pop("StringIds") == "refused"
    assert set(outcomes.values()) == {"report"}


@pytest.mark.parametrize("value", ["NULL", "'abc'", "1.5", "x'00ff'", "9223372036854775807"])
def test_every_column_with_a_wrong_value(tmp_path: Path, value: str) -> None:
    seed = _SEEDS[0]
    for i, (table, column) in enumerate(_tables_and_columns(seed)):
        out = tmp_path / f"col{i}.sqlite"
        out.write_bytes(seed.read_bytes())
        with closing(sqlite3.connect(out)) as conn:
            try:
                conn.execute(f'UPDATE "{table}" SET "{column}" = {value}')
                conn.commit()
            except sqlite3.IntegrityError:
                continue  # NOT NULL / primary key: no export can hold it
        assert check_trace_file(out) in ("report", "refused"), (table, column)


def test_regression_multiline_sqlite_error_is_one_line() -> None:
    # SQLite quotes a damaged schema, newlines included, in its error message
    with pytest.raises(TraceFormatError, match="malformed database schema") as info:
        load(CORPUS / "nsys" / "crash_multiline_schema_error.sqlite")
    assert "\n" not in str(info.value)


def test_negative_durations_are_clamped_and_counted(tmp_path: Path) -> None:
    seed = _SEEDS[0]
    out = tmp_path / "neg.sqlite"
    out.write_bytes(seed.read_bytes())
    with closing(sqlite3.connect(out)) as conn:
        n = conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 5")
        conn.commit()
    trace = load(out)
    assert trace.skipped["activity_negative_duration_clamped"] == n
    assert check_trace_file(out) == "report"
