"""torch.distributed / torchrun: which rank we are, and the per-rank step table.

Rank helpers
    :func:`rank_and_world` answers from an initialized default process group, else from the
    ``RANK``/``WORLD_SIZE`` variables torchrun sets (so a session opened before
    ``init_process_group`` is still rank-aware), else ``(None, None)``. :func:`rank_tag` is the
    ``.rank<N>`` part of a file name.

Gathering
    At the end of a session every rank sends a bounded summary of its recent steps (step number,
    frontend and device time, where its records went) to rank 0 over the *existing* default
    process group (``gather_object``; a collective, so every rank must call it). Rank 0 gets
    :class:`GatheredRanks`, other ranks ``None``. The table of them (per step each rank's time,
    the slowest rank and the skew) is analysis: :func:`asynctrace.analysis.ranks.rank_table`,
    the same computation for gathered steps and for files on disk.
"""

from __future__ import annotations

import functools
import os
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from asynctrace.errors import AsyncTraceError, OptionError, TraceFormatError
from asynctrace.records import SessionHeader, SessionSummary, StepRecord, SyncSite

__all__ = [
    "DEFAULT_LAST_STEPS",
    "GatheredRanks",
    "gather_records",
    "gather_steps",
    "is_distributed",
    "rank_and_world",
    "rank_tag",
    "tail_steps",
    "wrap_destroy",
]

#: steps per rank sent to rank 0: enough for a picture, bounded for million-step runs
DEFAULT_LAST_STEPS = 1000


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


class GatheredRanks(msgspec.Struct, frozen=True, kw_only=True):
    """Every rank's recent step records, as gathered to one rank (by global rank)."""

    steps: dict[int, list[StepRecord]]
    records_paths: dict[int, str | None]


def gather_steps(
    steps: Sequence[StepRecord],
    *,
    records_path: str | os.PathLike[str] | None = None,
    last_steps: int = DEFAULT_LAST_STEPS,
    dst: int = 0,
    group: Any = None,
) -> GatheredRanks | None:
    """Gather every rank's recent steps to ``dst`` (a collective); the table of them is
    :func:`asynctrace.analysis.ranks.rank_table`.

    Every rank of ``group`` (default: the default process group) must call this; ``dst`` is a
    global rank, as for ``torch.distributed.gather_object``. Returns the steps on ``dst`` and
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
    return GatheredRanks(
        steps={global_ranks[i]: _from_payload(p) for i, p in enumerate(received)},
        records_paths={global_ranks[i]: p["records_path"] for i, p in enumerate(received)},
    )


def gather_records(
    records_path: str | os.PathLike[str] | None,
    *,
    last_steps: int = DEFAULT_LAST_STEPS,
    dst: int = 0,
    group: Any = None,
) -> GatheredRanks | None:
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
        dst=dst,
        group=group,
    )


def wrap_destroy(before: Callable[[], None]) -> Callable[[], None] | None:
    """Make ``torch.distributed.destroy_process_group()`` of the default group call
    ``before()`` first, while the group still exists (a session's ``gather_ranks``: most
    scripts destroy the group before the session ends). Returns the undo (None where
    torch.distributed is unavailable). ``before`` runs once; what it raises is its own to
    handle. A script that imported the function by name before this ran keeps the original."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not dist.is_available():
        return None
    original = dist.destroy_process_group
    done: list[bool] = []

    @functools.wraps(original)
    def destroy_process_group(group: Any = None, *args: Any, **kwargs: Any) -> Any:
        if group is None and not done and dist.is_initialized():
            done.append(True)
            before()
        return original(group, *args, **kwargs)

    dist.destroy_process_group = destroy_process_group

    def undo() -> None:
        if dist.destroy_process_group is destroy_process_group:
            dist.destroy_process_group = original

    return undo
