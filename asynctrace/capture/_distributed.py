"""torch.distributed / torchrun: which rank we are, and the per-rank step table.

Rank helpers
    :func:`rank_and_world` answers from an initialized default process group, else from the
    ``RANK``/``WORLD_SIZE`` variables torchrun sets (so a session opened before
    ``init_process_group`` is still rank-aware), else ``(None, None)``. :func:`rank_tag` is the
    ``.rank<N>`` part of a file name.

The per-rank table
    At the end of a session every rank sends a bounded summary of its recent steps (step number,
    frontend and device time, where its records went) to rank 0 over the *existing* default
    process group (``gather_object``; a collective, so every rank must call it). Rank 0 builds a
    :class:`RankTable`: per step, each rank's time, the slowest rank and the **skew** — the
    slowest rank's time minus the fastest rank's for that step. Other ranks get ``None``.

    :func:`rank_table` is the pure part (no torch, no I/O): it works on step records from any
    source, so the gathered table and one built from files on disk are the same computation.

The session needs one call at exit, after its records file is renamed into place::

    table = _distributed.gather_records(self.records_path)   # collective; None off rank 0
    if table is not None and print_summary: print(_distributed.format_rank_table(table))
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec

from asynctrace.errors import AsyncTraceError, OptionError, TraceFormatError
from asynctrace.records import SessionHeader, SessionSummary, StepRecord, SyncSite

__all__ = [
    "DEFAULT_LAST_STEPS",
    "RankStep",
    "RankSummary",
    "RankTable",
    "format_rank_table",
    "gather_records",
    "gather_steps",
    "is_distributed",
    "rank_and_world",
    "rank_table",
    "rank_tag",
    "tail_steps",
]

#: steps per rank sent to rank 0: enough for a picture, bounded for million-step runs
DEFAULT_LAST_STEPS = 1000

Metric = Literal["auto", "frontend", "device"]


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        return None
    return n if n >= 0 else None


def _dist() -> Any:
    """``torch.distributed`` if it is usable and initialized, else None."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch without distributed support
        return None
    if not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def rank_and_world() -> tuple[int | None, int | None]:
    """``(rank, world_size)`` of this process, or ``(None, None)`` outside torch.distributed."""
    dist = _dist()
    if dist is not None:
        return int(dist.get_rank()), int(dist.get_world_size())
    rank = _env_int("RANK")
    if rank is None:
        return None, None
    return rank, _env_int("WORLD_SIZE")


def is_distributed() -> bool:
    """Whether an initialized default process group has more than one rank."""
    dist = _dist()
    return dist is not None and int(dist.get_world_size()) > 1


def rank_tag(rank: int | None) -> str:
    """The file-name part naming a rank: ``".rank3"``, or ``""`` outside torch.distributed."""
    return "" if rank is None else f".rank{int(rank)}"


@dataclass(frozen=True)
class RankStep:
    """One step across ranks; ``time_ns`` is the table's metric, indexed like its ``ranks``."""

    step: int
    time_ns: tuple[int, ...]
    slowest_rank: int
    fastest_rank: int
    #: slowest rank's time minus fastest rank's time for this step (>= 0)
    skew_ns: int


@dataclass(frozen=True)
class RankSummary:
    rank: int
    #: steps this rank reported (its last ``last_steps``)
    steps: int
    median_ns: int | None
    #: steps (of those all ranks reported) on which this rank was the slowest
    slowest_count: int
    records_path: str | None = None


@dataclass(frozen=True)
class RankTable:
    """Per-step times of every rank, the slowest rank and the skew per step."""

    #: "frontend_ns" or "device_ns": which step figure the times are
    metric: str
    ranks: tuple[int, ...]
    #: steps every rank reported, in step order
    steps: tuple[RankStep, ...]
    per_rank: tuple[RankSummary, ...]
    median_skew_ns: int | None
    max_skew_ns: int | None
    max_skew_step: int | None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (ints, strings, lists, None)."""
        out = asdict(self)
        out["ranks"] = list(self.ranks)
        out["steps"] = [{**asdict(s), "time_ns": list(s.time_ns)} for s in self.steps]
        out["per_rank"] = [asdict(r) for r in self.per_rank]
        return out


def _median(values: Sequence[int]) -> int | None:
    if not values:
        return None
    s = sorted(values)
    mid = len(s) // 2
    if len(s) % 2:
        return s[mid]
    # integer ns: round half up so the figure is reproducible without floats
    return (s[mid - 1] + s[mid] + 1) // 2


def _choose_metric(per_rank: Mapping[int, Sequence[StepRecord]], metric: Metric) -> str:
    if metric == "frontend":
        return "frontend_ns"
    if metric == "device":
        return "device_ns"
    if metric != "auto":
        raise OptionError(f"metric must be 'auto', 'frontend' or 'device', got {metric!r}")
    has_device = any(s.device_ns is not None for steps in per_rank.values() for s in steps)
    all_device = all(s.device_ns is not None for steps in per_rank.values() for s in steps)
    # device time is what the ranks wait on each other for in collectives, but only if every
    # rank measured it; mixing figures across ranks would make the skew meaningless
    return "device_ns" if has_device and all_device else "frontend_ns"


def rank_table(
    per_rank: Mapping[int, Sequence[StepRecord]],
    *,
    metric: Metric = "frontend",
    records_paths: Mapping[int, str | None] | None = None,
) -> RankTable:
    """Build the per-rank table from each rank's step records (pure).

    The default compares host step time (``frontend_ns``), the figure ``asynctrace report``
    compares across ranks too; ``metric="device"`` compares ``device_ns``, and ``"auto"`` uses
    ``device_ns`` where every step of every rank has it. Only steps every rank reported (matched
    by step number) are compared.
    """
    name = _choose_metric(per_rank, metric)
    ranks = tuple(sorted(per_rank))
    times: dict[int, dict[int, int]] = {}
    for r in ranks:
        t: dict[int, int] = {}
        for s in per_rank[r]:
            v = getattr(s, name)
            if v is not None:
                t[s.step] = int(v)
        times[r] = t
    common = set.intersection(*(set(t) for t in times.values())) if ranks else set()
    rows: list[RankStep] = []
    slowest_count = dict.fromkeys(ranks, 0)
    for step in sorted(common):
        values = tuple(times[r][step] for r in ranks)
        hi = max(values)
        lo = min(values)
        # ties go to the lowest rank, so the table is deterministic
        slow = ranks[values.index(hi)]
        fast = ranks[values.index(lo)]
        slowest_count[slow] += 1
        rows.append(
            RankStep(
                step=step, time_ns=values, slowest_rank=slow, fastest_rank=fast, skew_ns=hi - lo
            )
        )
    skews = [row.skew_ns for row in rows]
    worst = max(rows, key=lambda row: row.skew_ns, default=None)
    paths = records_paths or {}
    return RankTable(
        metric=name,
        ranks=ranks,
        steps=tuple(rows),
        per_rank=tuple(
            RankSummary(
                rank=r,
                steps=len(per_rank[r]),
                median_ns=_median(list(times[r].values())),
                slowest_count=slowest_count[r],
                records_path=paths.get(r),
            )
            for r in ranks
        ),
        median_skew_ns=_median(skews),
        max_skew_ns=None if worst is None else worst.skew_ns,
        max_skew_step=None if worst is None else worst.step,
    )


_line_decoder = msgspec.json.Decoder(SessionHeader | StepRecord | SyncSite | SessionSummary)


def tail_steps(
    path: str | os.PathLike[str], *, last_steps: int = DEFAULT_LAST_STEPS
) -> list[StepRecord]:
    """The last ``last_steps`` step records of a records file, read line by line (bounded)."""
    if last_steps < 1:
        raise OptionError(f"last_steps must be >= 1, got {last_steps}")
    p = Path(path)
    kept: deque[StepRecord] = deque(maxlen=last_steps)
    try:
        with open(p, "rb") as f:
            for lineno, line in enumerate(f, 1):
                # cheap pre-filter: only step lines are decoded
                if b'"step"' not in line:
                    continue
                try:
                    obj = _line_decoder.decode(line)
                except msgspec.DecodeError as e:
                    raise TraceFormatError(
                        str(p), f"line {lineno}: not an asynctrace record ({e})"
                    ) from None
                if isinstance(obj, StepRecord):
                    kept.append(obj)
    except OSError as e:
        raise TraceFormatError(str(p), f"cannot read: {e.strerror or e}") from None
    return list(kept)


def _to_payload(steps: Sequence[StepRecord], records_path: str | None) -> dict[str, Any]:
    # plain tuples pickle small and fast; StepRecord structs would pickle their field names
    return {
        "steps": [(s.step, s.frontend_ns, s.device_ns) for s in steps],
        "records_path": records_path,
    }


def _from_payload(payload: Mapping[str, Any]) -> list[StepRecord]:
    return [
        StepRecord(step=int(step), start_ns=0, frontend_ns=int(fe), device_ns=dev)
        for step, fe, dev in payload["steps"]
    ]


def gather_steps(
    steps: Sequence[StepRecord],
    *,
    records_path: str | os.PathLike[str] | None = None,
    last_steps: int = DEFAULT_LAST_STEPS,
    metric: Metric = "frontend",
    dst: int = 0,
    group: Any = None,
) -> RankTable | None:
    """Gather every rank's recent steps to ``dst`` and build the table there (a collective).

    Every rank of ``group`` (default: the default process group) must call this; ``dst`` is a
    global rank, as for ``torch.distributed.gather_object``. Returns the table on ``dst`` and
    ``None`` on other ranks; raises :class:`AsyncTraceError` outside an initialized process
    group. With the NCCL backend, ``torch.cuda.set_device`` must have been called (as
    ``gather_object`` requires).
    """
    dist = _dist()
    if dist is None:
        raise AsyncTraceError(
            "gathering per-rank steps needs an initialized torch.distributed process group; "
            "call torch.distributed.init_process_group() first (torchrun sets the environment)"
        )
    if last_steps < 1:
        raise OptionError(f"last_steps must be >= 1, got {last_steps}")
    payload = _to_payload(
        list(steps)[-last_steps:], None if records_path is None else str(records_path)
    )
    world = int(dist.get_world_size(group) if group is not None else dist.get_world_size())
    # gather_object's dst is a global rank whatever the group, so it is compared with this
    # process's global rank (get_rank(group) would be its rank within the group)
    received: list[Any] | None = [None] * world if int(dist.get_rank()) == dst else None
    dist.gather_object(payload, received, dst=dst, group=group)
    if received is None:
        return None
    # gather_object orders by group rank; report global ranks where a subgroup was given
    global_ranks = (
        list(range(world))
        if group is None
        else [int(dist.get_global_rank(group, i)) for i in range(world)]
    )
    per_rank = {global_ranks[i]: _from_payload(p) for i, p in enumerate(received)}
    paths = {global_ranks[i]: p["records_path"] for i, p in enumerate(received)}
    return rank_table(per_rank, metric=metric, records_paths=paths)


def gather_records(
    records_path: str | os.PathLike[str] | None,
    *,
    last_steps: int = DEFAULT_LAST_STEPS,
    metric: Metric = "frontend",
    dst: int = 0,
    group: Any = None,
) -> RankTable | None:
    """Like :func:`gather_steps`, reading this rank's last steps from its records file.

    A rank without a records file (``write=False``) still takes part with no steps, so the
    collective never hangs. Call it after the session has exited (the file is complete then).
    """
    steps: list[StepRecord] = []
    if records_path is not None:
        steps = tail_steps(records_path, last_steps=last_steps)
    return gather_steps(
        steps,
        records_path=records_path,
        last_steps=last_steps,
        metric=metric,
        dst=dst,
        group=group,
    )


def _ms(ns: int | None) -> str:
    if ns is None:
        return "-"
    return f"{ns / 1e6:.3f}"


def format_rank_table(table: RankTable, *, max_rows: int = 20) -> str:
    """Plain-text table (ms): per step each rank's time, the slowest rank and the skew.

    Long runs show the ``max_rows`` steps with the largest skew, in step order.
    """
    label = "device" if table.metric == "device_ns" else "frontend"
    lines = [f"asynctrace: per-rank step {label} time (ms), {len(table.ranks)} ranks"]
    if not table.steps:
        lines.append("  no step was reported by every rank")
    else:
        rows = list(table.steps)
        note = ""
        if len(rows) > max_rows:
            rows = sorted(sorted(rows, key=lambda r: -r.skew_ns)[:max_rows], key=lambda r: r.step)
            note = f"  ({max_rows} of {len(table.steps)} steps shown: those with the largest skew)"
        head = ["step", *(f"rank{r}" for r in table.ranks), "slowest", "skew"]
        body = [
            [
                str(row.step),
                *(_ms(v) for v in row.time_ns),
                f"rank{row.slowest_rank}",
                _ms(row.skew_ns),
            ]
            for row in rows
        ]
        widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
        lines.append("  " + "  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)))
        lines.extend(
            "  " + "  ".join(c.rjust(w) for c, w in zip(b, widths, strict=True)) for b in body
        )
        if note:
            lines.append(note)
    lines.append(
        f"  skew: median {_ms(table.median_skew_ns)} ms, max {_ms(table.max_skew_ns)} ms"
        + ("" if table.max_skew_step is None else f" (step {table.max_skew_step})")
    )
    for r in table.per_rank:
        lines.append(
            f"  rank{r.rank}: {r.steps} steps, median {_ms(r.median_ns)} ms, "
            f"slowest on {r.slowest_count} steps"
            + ("" if r.records_path is None else f", records {r.records_path}")
        )
    return "\n".join(lines)
