"""A sync site as ``asynctrace check`` and the demo list it: one row, its calls per step of the
steps its count was taken over, and for a sync inside a library the user frame that led there
and what the known-sync table says of it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from asynctrace.records import SyncSite

__all__ = ["library_fields", "site_rows"]


def site_rows(sites: Sequence[SyncSite], *, steps: int) -> list[dict[str, Any]]:
    """The sync sites as ``check --json`` lists them, in their order; each one's calls per
    step are its count over ``steps``, the steps that count was taken over (1: the run as one
    step, where none completed)."""
    return [
        {
            "site": s.site,
            "op": s.op,
            "count": s.count,
            "steps": s.steps,
            "per_step": s.count / steps,
            "wait_ns": s.wait_ns,
            "stack": list(s.stack),
            **library_fields(s.stack),
        }
        for s in sites
    ]


def library_fields(stack: Sequence[str]) -> dict[str, Any]:
    """For a sync made inside a library: ``from``, the innermost user frame that led to it
    (None when only the library's own frames are there), and ``known``, what the known-sync
    table (``asynctrace/records/known_syncs.py``) says of it. Both None for a sync in user code."""
    from asynctrace.records.known_syncs import is_library_frame, known_sync

    if not stack or not is_library_frame(stack[0]):
        return {"from": None, "known": None}
    user = next((f for f in stack[1:] if not is_library_frame(f)), None)
    found = known_sync(stack[0])
    known = None
    if found is not None:
        entry, detail = found
        known = {"id": entry.id, "what": entry.what, "fix": entry.fix, "detail": detail}
    return {"from": user, "known": known}
