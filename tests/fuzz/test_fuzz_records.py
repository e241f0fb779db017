"""Fuzzing the session-records reader, and the records file naming (no path traversal).

Every mutated records file ends in a per-step summary or ``TraceFormatError``; a name given to
a session never leaves the output folder nor hides the file.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asynctrace.errors import TraceFormatError
from asynctrace.records import RECORDS_SUFFIX, read_records
from asynctrace.records.names import records_file_name, sanitize_name
from tests.conftest import examples
from tests.fuzz._mutators import (
    CORPUS,
    RECORDS_OPS,
    Op,
    check_records_file,
    mutate_records,
    records_corpus_seeds,
)

EXAMPLES = examples(3500, quick=1000)

_FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
_u32 = st.integers(min_value=0, max_value=2**32 - 1)
ops_strategy = st.lists(
    st.builds(Op, st.sampled_from(RECORDS_OPS), _u32, _u32, _u32), min_size=1, max_size=3
)
_SEEDS = [s for s in records_corpus_seeds() if s[0].startswith("seed_")]


def test_corpus_has_seeds() -> None:
    assert len(_SEEDS) >= 2


@settings(_FUZZ, max_examples=EXAMPLES)
@given(seed=st.sampled_from(_SEEDS), ops=ops_strategy)
def test_fuzz_records(
    tmp_path_factory: pytest.TempPathFactory, seed: tuple[str, bytes], ops: list[Op]
) -> None:
    path = tmp_path_factory.getbasetemp() / f"case{RECORDS_SUFFIX}"
    path.write_bytes(mutate_records(seed[1], ops))
    assert check_records_file(path) in ("records", "refused")


@pytest.mark.parametrize("seed", _SEEDS, ids=[s[0] for s in _SEEDS])
def test_unmutated_seeds_are_read(tmp_path: Path, seed: tuple[str, bytes]) -> None:
    path = tmp_path / seed[0]
    path.write_bytes(seed[1])
    assert check_records_file(path) == "records"


def test_regression_uint64_figure_is_refused_with_its_line() -> None:
    # was OverflowError in the summary: msgspec reads 2**64-1 into int, numpy int64 cannot
    with pytest.raises(TraceFormatError, match="line 2: frontend_ns is out of range"):
        read_records(CORPUS / "records" / "crash_uint64_figure.records.jsonl")


def test_regression_deep_nesting_is_refused() -> None:
    # was RecursionError from msgspec
    with pytest.raises(TraceFormatError, match=r"line 2: .*nested too deeply"):
        read_records(CORPUS / "records" / "crash_deep_nesting.records.jsonl")


def test_int64_bounds_are_accepted(tmp_path: Path) -> None:
    lines = _SEEDS[0][1].splitlines()
    edge = lines[1].replace(b'"frontend_ns":900000', b'"frontend_ns":9223372036854775807')
    path = tmp_path / f"edge{RECORDS_SUFFIX}"
    path.write_bytes(lines[0] + b"\n" + edge + b"\n")
    assert read_records(path).steps[0].frontend_ns == 2**63 - 1
    assert check_records_file(path) == "records"


# --------------------------------------------------------------------------------------------
# Names from user input (``asynctrace.trace(name=...)``) become file names: no traversal.


@settings(derandomize=True, database=None, max_examples=500)
@given(name=st.text(), host=st.text(), rank=st.none() | st.integers(0, 2**20))
def test_records_file_name_never_leaves_the_folder(name: str, host: str, rank: int | None) -> None:
    fname = records_file_name(name, pid=123, rank=rank, time_ns=456, host=host)
    for bad in ("/", "\\", "\x00"):
        assert bad not in fname
    assert not fname.startswith(".")
    assert ".." not in fname
    assert fname.endswith(RECORDS_SUFFIX)
    base = Path("/out")
    assert (base / fname).resolve().parent == base.resolve()
    assert len(fname) < 255  # a file name, not a path component too long for the file system


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("../../etc/passwd", "etc_passwd"),
        ("/abs/path", "abs_path"),
        ("..", "session"),
        ("", "session"),
        ("a\\b", "a_b"),
        ("train.v2", "train_v2"),
        ("x\x00y", "x_y"),
    ],
)
def test_sanitize_name_examples(name: str, expected: str) -> None:
    assert sanitize_name(name) == expected
