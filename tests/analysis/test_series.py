"""Downsampled per-step series: each bin's envelope bounds every value in it."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from asynctrace.analysis.series import MAX_BINS, bin_size, envelope, steps_series
from asynctrace.records import StepRecord

values = st.lists(
    st.one_of(st.none(), st.integers(min_value=-(2**40), max_value=2**40)), max_size=300
)


@settings(derandomize=True, max_examples=300, deadline=None, database=None)
@given(values=values, max_bins=st.integers(min_value=1, max_value=40))
def test_the_envelope_bounds_every_value_of_its_bin(
    values: list[int | None], max_bins: int
) -> None:
    k = bin_size(len(values), max_bins=max_bins)
    env = envelope([math.nan if v is None else v for v in values], k)
    assert len(env.lo) == -(-len(values) // k) <= max_bins
    for b in range(len(env.lo)):
        got = [v for v in values[b * k : (b + 1) * k] if v is not None]
        assert env.count[b] == len(got)
        if not got:
            assert all(math.isnan(x[b]) for x in (env.lo, env.hi, env.median))
            continue
        assert all(env.lo[b] <= v <= env.hi[b] for v in got)
        # the bounds are values of the bin, and the median is the bin's own
        assert (env.lo[b], env.hi[b]) == (min(got), max(got))
        assert env.median[b] == float(np.median(got))


def test_a_short_run_is_its_own_series_and_a_long_one_is_binned() -> None:
    steps = [
        StepRecord(step=10 + i, start_ns=0, frontend_ns=1000 + i, sync_wait_ns=i % 3,
                   device_ns=None if i % 2 else 900, run_ahead_ns=None)
        for i in range(5000)
    ]  # fmt: skip
    short = steps_series(steps[:MAX_BINS])
    assert (short.bin_steps, short.bins, short.downsampled) == (1, MAX_BINS, False)
    assert short.figures["frontend_ns"].median.tolist() == [1000 + i for i in range(MAX_BINS)]
    long = steps_series(steps)
    assert (long.bin_steps, long.bins, long.downsampled) == (3, 1667, True)
    assert long.first_step[:2].tolist() == [10, 13]
    assert long.last_step[-2:].tolist() == [5007, 5009]
    issuing = long.figures["issuing_ns"]
    assert issuing.lo[0] == issuing.hi[0] == 1000  # host time less sync wait
    assert long.figures["device_ns"].count[:2].tolist() == [2, 1]
    assert np.isnan(long.figures["run_ahead_ns"].median).all()
