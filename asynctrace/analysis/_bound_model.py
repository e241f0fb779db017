"""The result types of the bound analysis (``asynctrace.analysis.bound``), apart from it so
that the step figures can hold a step's bound without an import cycle."""

from __future__ import annotations

import msgspec

__all__ = [
    "CAUSES",
    "LAUNCH_GAP_NS",
    "Bound",
    "BoundEvidence",
    "HostFrame",
    "IdleByCause",
    "KernelTime",
    "ReportWarning",
    "StepBound",
    "SyncCost",
    "WaitedOn",
    "WarmUp",
    "WarmUpItem",
]

#: idle causes, in the order ties are broken
CAUSES = ("host", "sync", "input", "dependency", "unattributed")
#: host gaps shorter than this between kernels are launch overhead, longer ones host work
LAUNCH_GAP_NS = 50_000


class IdleByCause(msgspec.Struct, frozen=True, kw_only=True):
    """Idle device time by cause, ns; the five add up to the idle time."""

    host: int = 0
    sync: int = 0
    input: int = 0
    dependency: int = 0
    unattributed: int = 0

    def total(self) -> int:
        return self.host + self.sync + self.input + self.dependency + self.unattributed

    def as_dict(self) -> dict[str, int]:
        return {c: getattr(self, c) for c in CAUSES}


class HostFrame(msgspec.Struct, frozen=True, kw_only=True):
    """A host frame that ran while the device was idle (leading cause)."""

    #: innermost Python function, else the operator
    frame: str
    #: "file.py:123" where the trace has Python frames, else ""
    site: str
    #: idle time of the sampled gaps during which it was the innermost frame
    idle_ns: int
    gaps: int


class SyncCost(msgspec.Struct, frozen=True, kw_only=True):
    """A sync site by cost: the sync idle it opened plus the host's wait in it."""

    site: str
    op: str
    count: int
    wait_ns: int
    #: idle device time of the sync gaps that began while the host was in one of its calls
    idle_ns: int
    cost_ns: int
    #: "sync" (a synchronize call, ``.item()`` and friends) or "blocking-copy" (a copy to or
    #: from pageable memory, or to the CPU, that holds the host until it ends)
    kind: str = "sync"


class KernelTime(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    count: int
    total_ns: int


class WaitedOn(msgspec.Struct, frozen=True, kw_only=True):
    """What dependency gaps ended with: queued work that waited (stream, activity)."""

    stream: str
    name: str
    gaps: int
    idle_ns: int


class BoundEvidence(msgspec.Struct, frozen=True, kw_only=True):
    """The figures behind a label."""

    busy_pct: float
    idle_pct_by_cause: dict[str, float]
    #: the cause with most idle time
    leading_cause: str
    #: host idle in gaps shorter than LAUNCH_GAP_NS (launch overhead) and the rest (host work)
    launch_gaps: int = 0
    launch_gaps_ns: int = 0
    host_work_gaps: int = 0
    host_work_ns: int = 0
    #: host time inside launch calls while a stream's queue was at the cap
    blocked_at_cap_ns: int = 0
    #: host time inside synchronizing calls, and its share of the region
    sync_wait_ns: int = 0
    sync_wait_pct: float = 0.0
    #: what the syncs cost (sync idle + wait) as a share of the region
    sync_cost_pct: float = 0.0
    data_wait_ns: int = 0
    #: run-level lists (empty per step)
    host_frames: list[HostFrame] = msgspec.field(default_factory=list)
    sync_sites: list[SyncCost] = msgspec.field(default_factory=list)
    top_kernels: list[KernelTime] = msgspec.field(default_factory=list)
    waited_on: list[WaitedOn] = msgspec.field(default_factory=list)
    #: the share (%) of host-attributed idle that ``host_frames`` cover; None where the source
    #: has no host events to measure it from
    host_explained_pct: float | None = None
    #: True for live-session records: figures estimated from per-step totals, no timeline
    estimated: bool = False
    notes: list[str] = msgspec.field(default_factory=list)
    #: session records with phases: the share (%) of the host's step time in each phase
    #: (data, forward, backward, optimizer, other); empty otherwise
    phases_pct: dict[str, float] = msgspec.field(default_factory=dict)


class Bound(msgspec.Struct, frozen=True, kw_only=True):
    """The label of a run, its figures, evidence and next step."""

    label: str
    region_ns: int
    busy_ns: int
    idle_ns: int
    idle_ns_by_cause: IdleByCause
    evidence: BoundEvidence
    advice: list[str] = msgspec.field(default_factory=list)


class StepBound(msgspec.Struct, frozen=True, kw_only=True):
    """One step's share of the device timeline and its label (the run's figures, no advice)."""

    label: str
    #: the step's share of the device timeline: [share_start_ns, share_end_ns)
    share_start_ns: int
    share_end_ns: int
    region_ns: int
    busy_ns: int
    idle_ns: int
    idle_ns_by_cause: IdleByCause
    evidence: BoundEvidence


class ReportWarning(msgspec.Struct, frozen=True, kw_only=True):
    """Something in the trace that makes some figures unreliable."""

    #: "clock-mismatch", "missing-activity", "activity-before-launch"
    code: str
    message: str


class WarmUpItem(msgspec.Struct, frozen=True, kw_only=True):
    """One piece of start-up work outside the steady state."""

    #: "context" (CUDA context, first allocation, stream creation), "compile" (torch.compile,
    #: Triton), "autotune" (cuDNN benchmark), "lead-in" (before the first kernel of a whole
    #: program), "first-steps" (a session's leading steps)
    kind: str
    #: the runtime call, op or range that did it ("cudaMalloc", "Torch-Compiled Region", ...)
    name: str
    count: int
    dur_ns: int


class WarmUp(msgspec.Struct, frozen=True, kw_only=True):
    """Start-up work before the steady state; the bound label describes what follows
    ``end_ns``."""

    #: where the steady state begins (the trace's host clock), or the first steady step's start
    end_ns: int
    #: time from the start of the source to ``end_ns``
    span_ns: int
    #: leading steps left out of the steady state (0 where warm-up ends inside the first step)
    steps: int = 0
    items: list[WarmUpItem] = msgspec.field(default_factory=list)
