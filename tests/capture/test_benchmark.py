"""Benchmark: returned vs done, pinned to the ns with a scripted device."""

from __future__ import annotations

import io

import pytest
import torch

from asynctrace.capture.benchmark import Benchmark, BenchmarkResult
from asynctrace.capture.devices import CpuDevice, CudaDevice, FakeClock, FakeDevice
from asynctrace.errors import CaptureError
from tests.capture._fake_cuda import FakeGpu, install


def test_async_device_returned_and_done_to_the_ns() -> None:
    clock = FakeClock(1_000)
    # marker 0 (entry) executes at 1_500 (backlog), marker 1 (exit) at 9_000
    dev = FakeDevice(clock, lambda i, t: {0: 1_500, 1: 9_000}[i])
    out = io.StringIO()
    with Benchmark("torch", device=dev, file=out) as b:
        clock.advance(1_300)  # the block queues work and returns after 1.3 µs
    assert b.returned_ns == 1_300
    assert b.done_ns == 8_000  # 9_000 - 1_000
    r = b.result
    assert r is not None
    assert r.device_ns == 7_500  # 9_000 - 1_500
    assert r.backlog_ns == 500
    assert (r.returned_s, r.done_s) == (1.3e-6, 8e-6)
    assert out.getvalue() == "torch: 0.0000 sec, done 0.0000 sec\n"
    # it waited once, for the exit marker, after the block: the host clock moved to its time
    assert dev.waits == 1
    assert clock.now_ns == 9_000


def test_waits_only_at_exit() -> None:
    clock = FakeClock()
    dev = FakeDevice(clock, lambda i, t: t + 5_000)
    with Benchmark("x", device=dev, file=None):
        assert dev.waits == 0
        assert dev.recorded == 1
    assert dev.waits == 1
    assert dev.recorded == 2


def test_printed_line_matches_the_books_format() -> None:
    clock = FakeClock()
    dev = FakeDevice(clock, lambda i, t: t + 3_600_000 if i == 1 else t)
    out = io.StringIO()
    with Benchmark("torch", device=dev, file=out):
        clock.advance(1_300_000)
    assert out.getvalue() == "torch: 0.0013 sec, done 0.0049 sec\n"


def test_default_description_is_done() -> None:
    clock = FakeClock()
    out = io.StringIO()
    with Benchmark(device=FakeDevice(clock), file=out):
        clock.advance(2_000_000)
    assert out.getvalue().startswith("Done: 0.0020 sec")


def test_synchronous_device_says_done_equals_returned() -> None:
    clock = FakeClock(10)
    out = io.StringIO()
    with Benchmark("numpy", device=CpuDevice(clock), file=out) as b:
        clock.advance(1_070_400_000)
    assert b.returned_ns == b.done_ns == 1_070_400_000
    assert b.result is not None
    assert b.result.device_ns is None
    assert out.getvalue() == "numpy: 1.0704 sec, done 1.0704 sec (= returned: cpu is synchronous)\n"


def test_synchronous_fake_device() -> None:
    clock = FakeClock()
    dev = FakeDevice(clock, asynchronous=False)
    with Benchmark("s", device=dev, file=None) as b:
        clock.advance(42)
    assert (b.returned_ns, b.done_ns) == (42, 42)
    assert dev.waits == 0


def test_exception_in_block_propagates_without_waiting() -> None:
    clock = FakeClock()
    dev = FakeDevice(clock, lambda i, t: t + 1_000_000)
    out = io.StringIO()
    b = Benchmark("x", device=dev, file=out)
    with pytest.raises(ValueError, match="boom"), b:
        raise ValueError("boom")
    assert dev.waits == 0
    assert out.getvalue() == ""
    with pytest.raises(CaptureError, match="completed"):
        _ = b.done_s


def test_result_json_form() -> None:
    clock = FakeClock()
    with Benchmark("j", device=FakeDevice(clock, lambda i, t: t + 7), file=None) as b:
        clock.advance(3)
    assert b.result is not None
    j = b.result.to_json()
    assert j["returned_ns"] == 3
    assert j["done_ns"] == 10  # exit marker recorded at 3, executes 7 later
    assert BenchmarkResult(**j) == b.result


def test_real_cpu_backend() -> None:
    torch = pytest.importorskip("torch")
    a = torch.randn(200, 200)
    with Benchmark("torch", device="cpu", file=None) as b:
        for _ in range(3):
            a = torch.mm(a, a) / 200
    assert b.result is not None
    assert not b.result.asynchronous
    assert b.done_ns == b.returned_ns > 0


# ---------------------------------------------------------------- CUDA, on a fake GPU
# Benchmark through CudaDevice against the scripted torch.cuda of _fake_cuda.py (one queue per
# device; events execute when the device reaches them; elapsed_time in ms between two executed
# events of one device, as torch.cuda.Event documents).


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> FakeGpu:
    return install(monkeypatch)


def test_cuda_returned_done_device_and_backlog(fake_gpu: FakeGpu) -> None:
    clock = fake_gpu.clock
    fake_gpu.latency_ns = 0
    # a fresh device: Benchmark does not align it up front, so the first result aligns after
    # the block, against markers recorded before the reference (a negative elapsed_time)
    dev = CudaDevice(clock=clock)
    t0 = clock.now_ns
    fake_gpu.busy_until_ns[0] = t0 + 2_000_000  # work queued before the block: 2 ms
    out = io.StringIO()
    with Benchmark("torch", device=dev, file=out) as b:
        fake_gpu.busy_until_ns[0] += 3_000_000  # the block queues 3 ms of work ...
        clock.advance(500_000)  # ... and returns after 0.5 ms
    r = b.result
    assert r is not None
    assert (r.returned_ns, r.done_ns) == (500_000, 5_000_000)
    assert r.device_ns == 3_000_000  # entry marker at 2 ms, exit marker at 5 ms
    assert r.backlog_ns == 2_000_000
    assert (r.device_kind, r.asynchronous) == ("cuda", True)
    assert out.getvalue() == "torch: 0.0005 sec, done 0.0050 sec\n"
    # the host blocked once, after the block, until the exit marker executed (the alignment's
    # waits after it are for empty markers)
    assert clock.now_ns == t0 + 5_000_000
    assert fake_gpu.recorded_on[:2] == [0, 0]


def test_cuda_exception_in_the_block_does_not_wait(fake_gpu: FakeGpu) -> None:
    clock = fake_gpu.clock
    dev = CudaDevice(clock=clock)
    fake_gpu.busy_until_ns[0] = clock.now_ns + 9_000_000
    before = clock.now_ns
    with pytest.raises(ValueError, match="boom"), Benchmark("x", device=dev, file=None):
        raise ValueError("boom")
    assert clock.now_ns == before  # no wait for the queued 9 ms while unwinding
    assert len(fake_gpu.recorded_on) == 1


@pytest.mark.gpu
def test_cuda_benchmark_on_a_real_gpu() -> None:  # pragma: no cover - GPU machines only
    # a fresh device: the first result aligns after the block, so the reference event is
    # recorded after both markers and elapsed_time(reference, marker) is negative
    dev = CudaDevice()
    a = torch.randn(2048, 2048, device="cuda")
    with Benchmark("torch", device=dev, file=None) as b:
        for _ in range(10):
            a = torch.mm(a, a) / 2048
    r = b.result
    assert r is not None
    assert r.done_ns >= r.returned_ns > 0
    assert r.device_ns is not None
    assert r.device_ns > 0
    assert r.backlog_ns is not None
