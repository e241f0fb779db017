"""A long run, CI-sized: 10^6 steps through ``session.steps()`` on the fake device, ended by
Ctrl-C, in flat memory, with every step line on disk and every figure the known one.

The full memory curve (tracemalloc over the whole run, RSS) is ``benchmarks/long_run.py``; its
figures are in ``docs/reliability.md``. ``test_session.py`` has the plain ``step()`` variant.
"""

from __future__ import annotations

import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import torch  # noqa: F401 - imported before tracing: the session imports it, the test must not count it

from asynctrace.capture.devices import FakeClock, FakeDevice
from asynctrace.records import SessionHeader, SessionSummary, StepRecord
from asynctrace.tracing import Session

N = 1_000_000
#: steps traced by tracemalloc at the start and at the end (tracing costs ~3x per step)
TRACED = 100_000
BODY_NS, DATA_NS, LAG_NS = 1_000, 100, 400


@pytest.mark.slow
def test_a_million_steps_through_steps_ended_by_ctrl_c(tmp_path: Path) -> None:
    clock = FakeClock(1_000_000)
    # each marker executes LAG_NS after it is recorded: steps are collected one behind
    dev = FakeDevice(clock, lambda i, t: t + LAG_NS)
    s = Session("long", dir=tmp_path, device=dev, print_summary=False, nvtx=True, window=1_000)

    def batches() -> Iterator[int]:
        for i in range(N + 1):
            clock.now_ns += DATA_NS  # the loader takes this long for each batch
            yield i

    marks: dict[str, tuple[int, int]] = {}
    tracemalloc.start()
    try:
        with pytest.raises(KeyboardInterrupt), s:  # noqa: PT012 - the training loop
            for i in s.steps(batches()):
                clock.now_ns += BODY_NS
                if i == TRACED:
                    marks["start"] = tracemalloc.get_traced_memory()
                    tracemalloc.stop()
                    blocks_start = sys.getallocatedblocks()
                elif i == N - TRACED:
                    tracemalloc.start()
                elif i == N:
                    # steps 0..N-1 are complete; Ctrl-C lands in the body of step N
                    marks["end"] = tracemalloc.get_traced_memory()
                    blocks_end = sys.getallocatedblocks()
                    raise KeyboardInterrupt
    finally:
        tracemalloc.stop()
    start_held, start_peak = marks["start"]
    end_held, end_peak = marks["end"]
    print(
        f"\npeak over the first {TRACED} steps {start_peak} B (held {start_held} B); over the last"
        f" {TRACED} {end_peak} B (held {end_held} B); blocks +{blocks_end - blocks_start}"
        f" from step {TRACED} to {N}"
    )
    # the bounded structures (window of 1k records, pending markers, the writer's batch) fill
    # up early: the start's peak; the end allocates and frees the same, holding only a window's
    # worth of new records. One leaked int per step would hold ~2.8 MB over the last 10^5.
    assert start_peak < 4 * 2**20
    assert end_peak < 4 * 2**20
    assert end_held < 2**20
    assert blocks_end - blocks_start < 10_000

    assert s.records_path is not None
    header_dec = msgspec.json.Decoder(SessionHeader)
    step_dec = msgspec.json.Decoder(StepRecord)
    with open(s.records_path, "rb") as f:
        assert header_dec.decode(f.readline()).name == "long"
        count = 0
        for line in f:
            if not line.startswith(b'{"type":"step"'):
                break
            r = step_dec.decode(line)
            assert r.step == count
            assert r.frontend_ns == DATA_NS + BODY_NS
            assert r.data_wait_ns == DATA_NS
            assert r.device_ns == DATA_NS + BODY_NS
            assert r.run_ahead_ns == LAG_NS
            # the step before is still running on the device when this one starts
            assert r.in_flight == (1 if count else 0)
            count += 1
        summary = msgspec.json.decode(line, type=SessionSummary)
    assert count == N
    assert summary.steps == N
    assert summary.error == "KeyboardInterrupt"
    assert s.summary().source.events == N
    assert s.summary().figures.get("data_wait_ns") is not None
    assert s.summary().figures["data_wait_ns"].mean == DATA_NS
    assert dev.waits <= 1
