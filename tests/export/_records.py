"""Records files with known figures, for the export/render/compare tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec

from asynctrace.records import SessionHeader, SessionSummary, StepRecord, SyncSite

__all__ = ["make_steps", "write_records_file"]


def make_steps(
    n: int,
    *,
    frontend_ns: int = 2_000_000,
    device_ns: int | None = 3_000_000,
    run_ahead_ns: int | None = 1_000_000,
    data_wait_ns: int = 0,
    sync_count: int = 0,
    sync_wait_ns: int = 0,
    in_flight: int = 1,
    mem_allocated_bytes: int | None = 64 << 20,
    jitter_ns: int = 0,
) -> list[StepRecord]:
    """``n`` steps back to back; step k's frontend is ``frontend_ns + (k % 3 - 1) * jitter_ns``."""
    out: list[StepRecord] = []
    t = 0
    for k in range(n):
        fe = frontend_ns + (k % 3 - 1) * jitter_ns
        out.append(
            StepRecord(
                step=k,
                start_ns=t,
                frontend_ns=fe,
                data_wait_ns=data_wait_ns,
                device_ns=device_ns,
                run_ahead_ns=run_ahead_ns,
                in_flight=in_flight,
                sync_count=sync_count,
                sync_wait_ns=sync_wait_ns,
                mem_allocated_bytes=mem_allocated_bytes,
                mem_reserved_bytes=None if mem_allocated_bytes is None else 2 * mem_allocated_bytes,
            )
        )
        t += fe
    return out


def write_records_file(
    path: Path,
    steps: Sequence[StepRecord],
    *,
    name: str = "train",
    asynchronous: bool = True,
    syncs: Sequence[SyncSite] = (),
    verdict: str | None = None,
    sync_detection: str | None = None,
) -> Path:
    header = SessionHeader(
        sync_detection=sync_detection,
        name=name,
        host="testhost",
        pid=4242,
        device_kind="fake" if asynchronous else "cpu",
        device_name="fake device" if asynchronous else "cpu (x86_64)",
        asynchronous=asynchronous,
        started_unix_ns=1_700_000_000_000_000_000,
    )
    summary = SessionSummary(
        steps=len(steps), wall_ns=sum(s.frontend_ns for s in steps), verdict=verdict
    )
    enc = msgspec.json.Encoder()
    lines = [enc.encode(header), *(enc.encode(s) for s in steps)]
    lines += [enc.encode(s) for s in syncs]
    lines.append(enc.encode(summary))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def steps_ms(*frontend_ms: float, first: int = 0, device: bool = False) -> list[StepRecord]:
    """Step records with these frontend times (ms), device twice that if ``device``."""
    return [
        StepRecord(
            step=first + i,
            start_ns=0,
            frontend_ns=int(ms * 1e6),
            device_ns=int(ms * 2e6) if device else None,
        )
        for i, ms in enumerate(frontend_ms)
    ]
