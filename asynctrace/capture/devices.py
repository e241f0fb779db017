"""The device layer: the only place that talks to a device's event API.

A :class:`Device` records markers ("events") into the current stream without blocking, tells
whether one has executed (non-blocking), and converts an executed marker into a time on the
host's clock. Three implementations:

* :class:`CudaDevice` — ``torch.cuda.Event(enable_timing=True)``; works on ROCm builds too.
* :class:`CpuDevice` — the CPU backend runs each op before returning, so a marker "executes"
  when it is recorded: device time equals host time, run-ahead is zero. Reported as such.
* :class:`FakeDevice` — scripted completion times on an injected clock, for tests.

Clock alignment (CUDA): at session start we record a reference event on the current stream,
wait for it once, and read the host clock; the reference's device time is taken as that host
time (an upper bound: the wait's wake-up latency is the uncertainty). We repeat a few times and
keep the tightest wait. Any later event's host-clock time is then
``ref_host_ns + ref.elapsed_time(event)``. That is the only synchronization a session adds, and
it happens before the first step.
"""

from __future__ import annotations

import itertools
import platform
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "ClockAlignment",
    "CpuDevice",
    "CudaDevice",
    "Device",
    "FakeClock",
    "FakeDevice",
    "get_device",
]


@dataclass(frozen=True)
class ClockAlignment:
    method: str
    #: host time (ns, on the device layer's host clock) of the reference marker's execution
    ref_host_ns: int
    #: bound on the error of ref_host_ns
    uncertainty_ns: int


@runtime_checkable
class Device(Protocol):
    """What a capture session needs from a device."""

    #: "cuda", "rocm", "cpu", "fake"
    kind: str
    #: e.g. "NVIDIA H200", "cpu (x86_64)"
    name: str
    #: True where work is queued and runs later (CUDA/ROCm), False on the CPU backend
    asynchronous: bool

    def host_now_ns(self) -> int:
        """The host clock every figure uses (monotonic ns)."""
        ...

    def align(self) -> ClockAlignment:
        """Align device and host clocks once; may block briefly. Call before the first step."""
        ...

    def record(self) -> Any:
        """Record a marker on the current stream; never blocks."""
        ...

    def query(self, event: Any) -> bool:
        """Whether the marker has executed; never blocks."""
        ...

    def wait(self, event: Any) -> None:
        """Block until the marker has executed (only at exit, never inside a step)."""
        ...

    def executed_at_ns(self, event: Any) -> int:
        """Host-clock time the marker executed; only valid once ``query(event)`` is True."""
        ...

    def memory(self) -> tuple[int, int] | None:
        """(allocated, reserved) bytes on the device, or None where not available."""
        ...


class CpuDevice:
    """The CPU backend: synchronous, so a marker executes when it is recorded."""

    kind = "cpu"
    asynchronous = False

    def __init__(self, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self._clock = clock
        #: the clock itself, not a method calling it: read at every step boundary
        self.host_now_ns: Callable[[], int] = clock
        #: no memory figures on the CPU backend: a C callable that always gives None (asked at
        #: every step's close; a method returning None would be a Python call)
        self.memory: Callable[[], tuple[int, int] | None] = itertools.repeat(None).__next__
        self.name = f"cpu ({platform.machine() or 'unknown'})"

    def align(self) -> ClockAlignment:
        return ClockAlignment(
            method="same clock (cpu)", ref_host_ns=self._clock(), uncertainty_ns=0
        )

    def record(self) -> int:
        return self._clock()

    def query(self, event: Any) -> bool:
        return True

    def wait(self, event: Any) -> None:
        return None

    def executed_at_ns(self, event: Any) -> int:
        return int(event)


class CudaDevice:
    """CUDA (and ROCm, through torch's HIP-backed ``torch.cuda``) timing events."""

    asynchronous = True

    def __init__(
        self, index: int | None = None, clock: Callable[[], int] = time.perf_counter_ns
    ) -> None:
        import torch

        self._torch = torch
        self._index = torch.cuda.current_device() if index is None else index
        self._clock = clock
        #: the clock itself, not a method calling it: read at every step boundary
        self.host_now_ns: Callable[[], int] = clock
        self.kind = "rocm" if getattr(torch.version, "hip", None) else "cuda"
        self.name = torch.cuda.get_device_name(self._index)
        # torch.cuda.Event is untyped for mypy; bound once, which also saves a look-up per record
        self._event_cls: Any = torch.cuda.Event
        self._current_stream: Any = torch.cuda.current_stream
        self._ref: Any = None
        self._ref_host_ns = 0

    @property
    def index(self) -> int:
        """The CUDA device index the markers are recorded on."""
        return self._index

    def align(self, rounds: int = 5) -> ClockAlignment:
        best: tuple[int, int, Any] | None = None
        stream = self._current_stream(self._index)
        stream.synchronize()
        for _ in range(rounds):
            ev = self._event_cls(enable_timing=True)
            before = self._clock()
            ev.record(stream)
            ev.synchronize()
            after = self._clock()
            if best is None or after - before < best[0]:
                best = (after - before, after, ev)
        if best is None:
            raise ValueError(f"align() needs rounds >= 1, got {rounds}")
        self._ref = best[2]
        self._ref_host_ns = best[1]
        return ClockAlignment(
            method="reference event recorded and waited for once at session start",
            ref_host_ns=best[1],
            uncertainty_ns=best[0],
        )

    def record(self) -> Any:
        ev = self._event_cls(enable_timing=True)
        # on this device's current stream: Event.record() alone takes the *current device's*
        # stream, so a session on cuda:1 while device 0 is current would time device 0's queue
        # (and elapsed_time against the cuda:1 reference would fail)
        ev.record(self._current_stream(self._index))
        return ev

    def query(self, event: Any) -> bool:
        return bool(event.query())

    def wait(self, event: Any) -> None:
        event.synchronize()

    def executed_at_ns(self, event: Any) -> int:
        if self._ref is None:
            self.align()
        # elapsed_time has ~0.5 µs resolution; float ms -> int ns once, here
        elapsed_ms: float = self._ref.elapsed_time(event)
        return self._ref_host_ns + round(elapsed_ms * 1e6)

    def memory(self) -> tuple[int, int] | None:
        # torch.cuda.memory_allocated/reserved each flatten the whole allocator stats dict in
        # Python (tens of µs); the session asks once per step, so read the nested dict once.
        stats_fn = getattr(self._torch._C, "_cuda_memoryStats", None)
        if stats_fn is not None:
            try:
                stats = stats_fn(self._index)
                return (
                    int(stats["allocated_bytes"]["all"]["current"]),
                    int(stats["reserved_bytes"]["all"]["current"]),
                )
            except (KeyError, TypeError, RuntimeError):
                pass
        cuda = self._torch.cuda
        return int(cuda.memory_allocated(self._index)), int(cuda.memory_reserved(self._index))


class FakeClock:
    """A host clock tests advance by hand (pyinstrument's FakeClock idea)."""

    def __init__(self, start_ns: int = 0) -> None:
        self.now_ns = start_ns

    def __call__(self) -> int:
        return self.now_ns

    def advance(self, ns: int) -> None:
        self.now_ns += ns


@dataclass(slots=True)
class _FakeEvent:
    index: int
    recorded_ns: int
    executes_ns: int


class FakeDevice:
    """A scripted asynchronous device.

    ``executes(index, recorded_ns) -> executes_ns`` says when the ``index``-th recorded marker
    executes on the device (host-clock ns); a marker never executes before it is recorded.
    ``query`` compares that with the fake clock; ``wait`` advances the clock to it, like a real
    blocking wait would. Like one real stream, a script should execute markers in the order they
    were recorded (non-decreasing times); the session relies on that.

    ``recorded``, ``queries`` and ``waits`` count calls, so tests can check that nothing waited.
    """

    kind = "fake"
    name = "fake device"

    def __init__(
        self,
        clock: FakeClock,
        executes: Callable[[int, int], int] | None = None,
        *,
        asynchronous: bool = True,
        memory: Callable[[], tuple[int, int] | None] | None = None,
        latency_ns: int = 0,
    ) -> None:
        self.clock = clock
        self._executes = executes or (lambda i, t: t)
        #: like a real GPU, a marker executes at least this long after it is recorded, and
        #: ``align()`` reports it as the round trip's uncertainty
        self.latency_ns = latency_ns
        self.asynchronous = asynchronous
        self._memory = memory
        self.recorded = 0
        self.queries = 0
        self.waits = 0

    def host_now_ns(self) -> int:
        return self.clock.now_ns

    def align(self) -> ClockAlignment:
        return ClockAlignment(
            method="fake", ref_host_ns=self.clock.now_ns, uncertainty_ns=self.latency_ns
        )

    def record(self) -> _FakeEvent:
        now = self.clock.now_ns
        executes = max(now + self.latency_ns, self._executes(self.recorded, now))
        ev = _FakeEvent(self.recorded, now, executes)
        self.recorded += 1
        return ev

    def query(self, event: Any) -> bool:
        self.queries += 1
        return bool(self.clock.now_ns >= event.executes_ns)

    def wait(self, event: Any) -> None:
        self.waits += 1
        self.clock.now_ns = max(self.clock.now_ns, event.executes_ns)

    def executed_at_ns(self, event: Any) -> int:
        return int(event.executes_ns)

    def memory(self) -> tuple[int, int] | None:
        return self._memory() if self._memory is not None else None


def get_device(device: str | Device | None = None, *, option: str | None = None) -> Device:
    """The device layer for ``device``.

    A :class:`Device` passes through; ``None`` picks CUDA/ROCm when torch sees one, else the CPU;
    a string is a torch device spec (``"cuda"``, ``"cuda:1"``, ``"cpu"``; ``"rocm"`` means the
    HIP build's ``cuda``). Raises :class:`~asynctrace.errors.CaptureError` for anything else.

    ``option``: the command-line option the spec came from (``"--device"``); errors then name
    it as typed (``--device cuda``) instead of the ``device=`` keyword of the Python API.
    """
    from asynctrace.errors import CaptureError

    if device is not None and not isinstance(device, str):
        if not isinstance(device, Device):
            raise CaptureError(
                f"device={device!r} is neither a device spec string nor an asynctrace Device "
                "(kind, name, asynchronous, host_now_ns, align, record, query, wait, "
                "executed_at_ns, memory)"
            )
        return device
    import torch

    spec = device or ("cuda" if torch.cuda.is_available() else "cpu")
    typed = spec
    if spec == "rocm" or spec.startswith("rocm:"):
        spec = "cuda" + spec[4:]
    if option is None:
        keyword, asked = f"device={spec!r}", f"device {spec!r}"
        use_cpu = "pass device='cpu' or leave device unset"
        unsupported = "device type"
    else:
        # the CLI's user typed an option, not a keyword: say it as they would type it
        keyword = asked = f"{option} {shlex.quote(typed)}"
        use_cpu = f"pass {option} cpu or leave {option} out"
        unsupported = f"{keyword}: device type"
    try:
        dev = torch.device(spec)
    except (RuntimeError, ValueError) as e:
        raise CaptureError(f"{keyword} is not a torch device spec ({e})") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise CaptureError(
                f"{asked} asked for, but torch {torch.__version__} sees no CUDA/ROCm device; "
                f"{use_cpu}"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise CaptureError(
                f"{asked} asked for, but torch sees {torch.cuda.device_count()} device(s)"
            )
        return CudaDevice(dev.index)
    if dev.type == "cpu":
        return CpuDevice()
    raise CaptureError(f"{unsupported} {dev.type!r} is not supported yet (cuda, rocm and cpu are)")
