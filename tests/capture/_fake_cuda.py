"""A scripted stand-in for ``torch.cuda``'s timing API, so that the CUDA device layer's logic
runs on every machine (the real API is checked by the GPU-only tests).

Modelled on torch.cuda.Event / Stream (torch/cuda/streams.py): an event executes when its
device's queue reaches it; ``query()`` never blocks; ``synchronize()`` waits for it;
``elapsed_time`` is in ms between two executed events of one device, and fails across devices.
"""

from __future__ import annotations

import pytest
import torch

from asynctrace.capture.devices import FakeClock

__all__ = ["FakeEvent", "FakeGpu", "FakeStream", "install"]


class FakeStream:
    def __init__(self, gpu: FakeGpu, device: int) -> None:
        self.gpu, self.device = gpu, device

    def synchronize(self) -> None:
        self.gpu.clock.now_ns = max(self.gpu.clock.now_ns, self.gpu.busy_until_ns[self.device])


class FakeEvent:
    """torch.cuda.Event's contract: executes when the device reaches it; elapsed_time in ms
    between two executed events of one device."""

    def __init__(self, gpu: FakeGpu, *, enable_timing: bool = False) -> None:
        assert enable_timing
        self.gpu = gpu
        self.device: int | None = None
        self.executes_ns: int | None = None

    def record(self, stream: FakeStream | None = None) -> None:
        s = stream if stream is not None else self.gpu.current_stream()
        self.device = s.device
        self.executes_ns = self.gpu.enqueue(s.device)

    def query(self) -> bool:
        assert self.executes_ns is not None
        return self.gpu.clock.now_ns >= self.executes_ns

    def synchronize(self) -> None:
        assert self.executes_ns is not None
        self.gpu.clock.now_ns = max(self.gpu.clock.now_ns, self.executes_ns)

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.query(), "elapsed_time needs two executed events"
        assert end.query(), "elapsed_time needs two executed events"
        if self.device != end.device:
            raise RuntimeError("Both events must be recorded on the same device")
        assert self.executes_ns is not None
        assert end.executes_ns is not None
        return (end.executes_ns - self.executes_ns) / 1e6


class FakeGpu:
    """Two devices with a queue each: a marker executes ``backlog_ns`` after the previous
    one, or ``latency_ns`` after it is recorded, whichever is later."""

    def __init__(self, clock: FakeClock, *, latency_ns: int = 5_000) -> None:
        self.clock = clock
        self.latency_ns = latency_ns
        self.backlog_ns = 0
        self.current = 0
        self.busy_until_ns = {0: 0, 1: 0}
        self.recorded_on: list[int] = []

    def enqueue(self, device: int) -> int:
        t = max(self.clock.now_ns + self.latency_ns, self.busy_until_ns[device] + self.backlog_ns)
        self.busy_until_ns[device] = t
        self.recorded_on.append(device)
        return t

    def current_stream(self, device: int | None = None) -> FakeStream:
        return FakeStream(self, self.current if device is None else device)


def install(monkeypatch: pytest.MonkeyPatch) -> FakeGpu:
    """Put a fake GPU in torch.cuda's place for one test (monkeypatch undoes it)."""
    gpu = FakeGpu(FakeClock(1_000_000))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: gpu.current)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: f"Fake GPU {i}")
    monkeypatch.setattr(torch.cuda, "current_stream", gpu.current_stream)
    monkeypatch.setattr(torch.cuda, "Event", lambda **kw: FakeEvent(gpu, **kw))
    monkeypatch.setattr(torch.version, "hip", None)
    return gpu
