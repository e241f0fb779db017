"""The options of a capture session, declared once.

:class:`TraceOptions` is the one list of what ``asynctrace.trace()`` accepts. ``trace()``,
:class:`asynctrace.Session`, the Lightning and Hugging Face callbacks and ``asynctrace
run``/``check`` all build one, so a name or a default cannot differ between them, and a wrong
value fails when the session is made, before training starts.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from asynctrace.errors import OptionError

if TYPE_CHECKING:
    from asynctrace.capture.devices import Device
    from asynctrace.capture.profiler import Profile

__all__ = ["DEFAULT_MAX_PENDING", "DEFAULT_WINDOW", "DETECT_MODES", "TraceOptions"]

#: steps whose device figures may wait for their markers at once; beyond, the oldest step is
#: written without device figures (a CUDA launch queue holds ~1k entries, so a real device
#: rarely lets the host run this far ahead)
DEFAULT_MAX_PENDING: Final = 4096
#: recent steps kept for the summary's medians/p90 and the verdict
DEFAULT_WINDOW: Final = 10_000
#: what ``detect_syncs`` accepts
DETECT_MODES: Final = ("auto", "cuda", "lint", "off")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TraceOptions:
    """Every option of a capture session (``asynctrace.trace(name, **options)``).

    Capture options (the session itself):

    - ``device``: a torch device spec or a :class:`~asynctrace.capture.devices.Device`;
      default CUDA/ROCm if available, else the CPU.
    - ``nvtx``: an NVTX range per step in domain ``asynctrace``.
    - ``detect_syncs``: ``"auto"``, ``"cuda"``, ``"lint"`` or ``"off"`` (see ``SyncDetector``).
    - ``optimizer_steps``: each ``optimizer.step()`` of any optimizer is a step boundary.
    - ``on_demand``: keep a control file under ``dir`` and answer ``asynctrace capture`` and
      ``kill -USR2``: a deep-mode window of N steps opened mid-run (``capture/trigger.py``).
    - ``phases``: split each step's host time into data, forward, backward, optimizer and
      other (``StepRecord.phases_ns``), and count the time inside any DataLoader's fetch as
      data wait: a wrapped DataLoader iterator, ``torch.autograd.backward`` and the optimizer
      step hooks, for the session's duration (``capture/_phases.py``).
    - ``strict``: a failure of ours (records or events that cannot be written, a sink that
      raises) raises :class:`~asynctrace.CaptureError` instead of warning.
    - ``max_pending``: the most steps whose device markers may wait at once; beyond it the
      oldest is written without device figures (docs/how-it-works.md).
    - ``profile``: deep mode: ``True`` or an :class:`asynctrace.Profile` schedule runs
      ``torch.profiler`` over the chosen steps and writes
      ``<dir>/<name>/{worker}.{time_ns}.pt.trace.json.gz`` (plus an annotated copy).
    - ``nsys_capture``: step numbers (e.g. ``range(10, 20)``) around which the CUDA profiler
      API is started and stopped, for ``nsys profile --capture-range=cudaProfilerApi``.

    Outputs (the sinks the public layer plugs in for them):

    - ``dir``: where the records file, TensorBoard events and deep-mode traces go.
    - ``write``: write the records file.
    - ``print_summary``: print the summary table at exit (stdout).
    - ``window``: how many recent steps the summary's medians, p90s and the verdict cover.
    - ``tensorboard``: per-step scalars under ``asynctrace/`` and a text summary, in a run of
      its own: ``<dir>/<name>/<time>/``.
    - ``live``: one status line in the terminal, refreshed at most once a second.
    - ``gather_ranks``: under torch.distributed, gather every rank's step summary to rank 0 at
      exit and print the per-rank table (a collective: every rank must enable it).
    """

    dir: str | os.PathLike[str] = "traces"
    device: str | Device | None = None
    nvtx: bool = True
    detect_syncs: str = "auto"
    optimizer_steps: bool = False
    phases: bool = True
    on_demand: bool = True
    print_summary: bool = True
    write: bool = True
    strict: bool = False
    max_pending: int = DEFAULT_MAX_PENDING
    window: int = DEFAULT_WINDOW
    profile: bool | Profile | None = None
    nsys_capture: Iterable[int] | None = None
    tensorboard: bool = False
    live: bool = False
    gather_ranks: bool = False

    def __post_init__(self) -> None:
        if self.detect_syncs not in DETECT_MODES:
            raise OptionError(
                f"detect_syncs={self.detect_syncs!r}: use one of "
                f"{', '.join(map(repr, DETECT_MODES))}"
            )
        for name in ("max_pending", "window"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise OptionError(f"{name} must be >= 1 (an int), got {value!r}")
        if self.profile not in (None, False, True):
            from asynctrace.capture.profiler import Profile

            if not isinstance(self.profile, Profile):
                raise OptionError(
                    f"profile={self.profile!r}: pass True or "
                    "asynctrace.Profile(wait=, warmup=, active=, ...)"
                )
        if self.nsys_capture is not None:
            from asynctrace.capture._nsys import NsysCapture

            # what the capture keeps: a range as it is (a tuple of range(10, 10**12) would
            # never be built), other steps as a frozenset, so a one-shot iterator serves
            # every run of the session
            steps: Collection[int] = NsysCapture(self.nsys_capture, device_kind="cpu").steps
            object.__setattr__(self, "nsys_capture", steps)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every option's name, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_mapping(
        cls, options: Mapping[str, Any], *, accepted: Collection[str] | None = None, what: str
    ) -> TraceOptions:
        """Options from keyword arguments; an unknown name (or one outside ``accepted``) is an
        :class:`~asynctrace.errors.OptionError` that lists what ``what`` accepts."""
        allowed = cls.names() if accepted is None else tuple(accepted)
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            raise OptionError(
                f"{what}: unknown option(s) {', '.join(unknown)}; it accepts "
                f"{', '.join(sorted(allowed))}"
            )
        return cls(**options)

    def replace(self, **changes: Any) -> TraceOptions:
        """A copy with ``changes`` (validated like the original)."""
        return dataclasses.replace(self, **changes)

    @property
    def profiling(self) -> bool:
        """Whether deep mode is on."""
        return self.profile is not None and self.profile is not False
