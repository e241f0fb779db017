"""Fuzzing the Kineto loader: every mutated trace ends in a report or ``TraceFormatError``.

Seeds are the committed corpus (always) and small real traces from ../shared/traces (skipped
when absent). Mutations are described in ``_mutators.py``; the runs are derandomized, so CI
sees the same cases every time. The files named ``crash_*`` in ``corpus/kineto`` are minimized
cases that crashed the loader once; each has a regression test below.
"""

from __future__ import annotations

import gzip
import json
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asynctrace.errors import TraceFormatError
from asynctrace.traces.kineto import load_kineto
from asynctrace.traces.load import load
from asynctrace.traces.reading import iter_blocks
from tests.conftest import KINETO_DIR, examples
from tests.fuzz._mutators import (
    CORPUS,
    KINETO_OPS,
    Op,
    check_trace_file,
    kineto_corpus_seeds,
    kineto_shared_seeds,
    mutate_kineto,
)

#: the full run (ASYNCTRACE_FULL_PROPERTIES=1): with the other fuzz tests, over 10,000 cases in
#: about two minutes on 2 cores; every push: about a third of them
CORPUS_EXAMPLES = examples(3000, quick=1000)
SHARED_EXAMPLES = examples(2000, quick=500)

_FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_u32 = st.integers(min_value=0, max_value=2**32 - 1)
ops_strategy = st.lists(
    st.builds(Op, st.sampled_from(KINETO_OPS), _u32, _u32, _u32), min_size=1, max_size=3
)

_CORPUS_SEEDS = kineto_corpus_seeds()


def _shared_seeds() -> list[tuple[str, Any]]:
    seeds = kineto_shared_seeds(KINETO_DIR) if KINETO_DIR.is_dir() else []
    if not seeds:
        pytest.skip(f"real traces not available ({KINETO_DIR} is absent on a user's clone)")
    return seeds


def _run(tmp: Path, doc: Any, ops: list[Op]) -> str:
    path = tmp / "case.json"
    path.write_bytes(mutate_kineto(doc, ops))
    return check_trace_file(path)


def test_corpus_has_seeds() -> None:
    assert len(_CORPUS_SEEDS) >= 8


@settings(_FUZZ, max_examples=CORPUS_EXAMPLES)
@given(seed=st.sampled_from(_CORPUS_SEEDS), ops=ops_strategy)
def test_fuzz_corpus_seeds(
    tmp_path_factory: pytest.TempPathFactory, seed: tuple[str, Any], ops: list[Op]
) -> None:
    assert _run(tmp_path_factory.getbasetemp(), seed[1], ops) in ("report", "refused")


def test_fuzz_shared_seeds(tmp_path_factory: pytest.TempPathFactory) -> None:
    seeds = _shared_seeds()
    tmp = tmp_path_factory.mktemp("kineto_shared")

    @settings(_FUZZ, max_examples=SHARED_EXAMPLES)
    @given(seed=st.sampled_from(seeds), ops=ops_strategy)
    def run(seed: tuple[str, Any], ops: list[Op]) -> None:
        assert _run(tmp, seed[1], ops) in ("report", "refused")

    run()


@pytest.mark.parametrize("seed", _CORPUS_SEEDS, ids=[s[0] for s in _CORPUS_SEEDS])
def test_every_unmutated_seed_gives_a_report(tmp_path: Path, seed: tuple[str, Any]) -> None:
    assert _run(tmp_path, seed[1], []) == "report"


@pytest.mark.parametrize("op", KINETO_OPS)
def test_every_mutation_kind_runs_on_every_seed(tmp_path: Path, op: str) -> None:
    # the random run may not pair every op with every seed; this does, once
    for _, doc in _CORPUS_SEEDS:
        assert _run(tmp_path, doc, [Op(op, 7, 11, 13)]) in ("report", "refused")


# --------------------------------------------------------------------------------------------
# Regressions: minimized cases that once crashed the loader (corpus/kineto/crash_*.json).

_REFUSED: dict[str, str] = {
    # RecursionError from msgspec escaped the loader
    "crash_deep_nesting.json": "nested too deeply",
    "crash_deep_envelope.json": "nested too deeply",
    # OverflowError: the exact-decimal fast path did not range-check
    "crash_exact_ts_overflow.json": "timestamp out of range",
    # decimal.Overflow escaped; before that, int() of 1e999999999 would have taken forever
    "crash_exact_ts_exponent.json": "timestamp out of range",
    # ValueError: int() of a 5000-digit first timestamp (Python's 4300-digit limit)
    "crash_first_ts_digits.json": "timestamp out of range",
}


@pytest.mark.parametrize("name", sorted(_REFUSED))
def test_regression_refused(name: str) -> None:
    with pytest.raises(TraceFormatError, match=_REFUSED[name]) as info:
        load(CORPUS / "kineto" / name)
    assert "\n" not in str(info.value)


def test_regression_profiler_step_beyond_int64_is_not_a_step() -> None:
    # was OverflowError: ProfilerStep#<30 digits> went into an int64 column
    path = CORPUS / "kineto" / "crash_profilerstep_huge.json"
    trace = load(path)
    assert check_trace_file(path) == "report"
    assert (trace.ranges.step == -1).all()
    assert len(trace.activities) == 1


def test_regression_unicode_digits_and_huge_decimal_ids() -> None:
    # was ValueError: "²".isdigit() is True but int("²") fails; int() of 5000 digits fails
    path = CORPUS / "kineto" / "crash_unicode_digit_ids.json"
    trace = load(path)
    assert check_trace_file(path) == "report"
    assert trace.rank is None
    assert trace.world_size is None
    # pid "²" and tid "9"*5000 are labels (negative ids), stream/correlation unknown (-1)
    assert int(trace.runtime.pid[0]) < -1
    assert int(trace.runtime.tid[0]) < -1
    assert int(trace.activities.stream[0]) == -1
    assert int(trace.activities.correlation[0]) == -1
    assert trace.skipped["non-numeric id or stream (read as -1)"] == 2


def test_regression_concatenated_gzip_members(tmp_path: Path) -> None:
    # was: "corrupt gzip data" and doubling memory when a member ended in the same call that
    # hit the output cap (unconsumed_tail repeated unused_data after the end of a member)
    text = b"".join(b"%06d," % i for i in range(60_000))
    pieces = [text[i : i + 20_000] for i in range(0, len(text), 20_000)]
    path = tmp_path / "members.gz"
    path.write_bytes(b"".join(gzip.compress(p, mtime=0) for p in pieces))
    for block_bytes in (1000, 4096, 19_999, 20_000, 1 << 20):
        got = b"".join(iter_blocks(path, block_bytes=block_bytes))
        assert got == text, block_bytes


def test_regression_concatenated_gzip_members_trace(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": i, "dur": 1}
        for i in range(3000)
    ]
    text = json.dumps({"traceEvents": events}).encode()
    path = tmp_path / "members.json.gz"
    path.write_bytes(
        b"".join(gzip.compress(text[i : i + 7000], mtime=0) for i in range(0, len(text), 7000))
    )
    trace = load_kineto(path, chunk_bytes=4096)
    assert len(trace.activities) == 3000


# --------------------------------------------------------------------------------------------
# Bounded memory and time on adversarial shapes (the whole file never held at once).


def _gzip_of(parts: list[bytes], repeat_last: int) -> bytes:
    co = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    out = [co.compress(p) for p in parts[:-1]]
    out += [co.compress(parts[-1]) for _ in range(repeat_last)]
    out.append(co.flush())
    return b"".join(out)


def _peak_traced(fn: Any) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_whitespace_bomb_is_read_in_bounded_memory(tmp_path: Path) -> None:
    # was: the whole file held (chunk size doubling on every read), 22 GB for 1 GB of spaces
    path = tmp_path / "spaces.json.gz"
    path.write_bytes(_gzip_of([b'{"traceEvents": [', b" " * (1 << 20)], 160))

    def run() -> None:
        with pytest.raises(TraceFormatError, match="truncated"):
            load(path)

    # one chunk (16 MiB) plus the blocks read ahead: far below the 160 MiB of text
    assert _peak_traced(run) < 64 << 20


def test_tiny_events_are_decoded_a_bounded_number_at_a_time(tmp_path: Path) -> None:
    # 8.6 MB of '{"ph":"X"},': 790 k events. Decoded in one piece (the old 16 MiB chunks) that
    # peaked at 113 MB; decoding is now sized by events, not bytes (48 MB measured).
    path = tmp_path / "tiny.json.gz"
    filler = b'{"ph":"X"},' * (1 << 16)
    path.write_bytes(_gzip_of([b"[", filler], 12) + gzip.compress(b'{"ph":"X"}]', mtime=0))
    traces = []
    peak = _peak_traced(lambda: traces.append(load(path)))
    assert traces[0].skipped == {"X without ts": 12 * (1 << 16) + 1}
    assert peak < 64 << 20


def test_one_giant_element_is_refused_not_held(tmp_path: Path) -> None:
    # an unterminated string: the element never ends, so it must not grow without bound
    path = tmp_path / "giant.json.gz"
    path.write_bytes(_gzip_of([b'{"traceEvents": [{"name": "', b"x" * (1 << 20)], 80))
    with pytest.raises(TraceFormatError, match="larger than 64 MiB"):
        load(path)


@pytest.mark.parametrize("filler", [b" ", b"\x00", b'{"ph":"X"},', b"[", b"0"])
def test_gzip_bomb_stops_at_the_cap(tmp_path: Path, filler: bytes) -> None:
    path = tmp_path / "bomb.json.gz"
    block = filler * ((1 << 20) // len(filler))
    path.write_bytes(_gzip_of([b'{"traceEvents": [', block], 64))
    with pytest.raises(TraceFormatError) as info:
        load(path, max_inflated_bytes=8 << 20)
    # refused for its content, or at the cap; never read to the end
    assert "\n" not in str(info.value)
