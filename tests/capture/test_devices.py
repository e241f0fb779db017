"""The device layer: the fake's scripted semantics, the CPU's honesty, device selection."""

from __future__ import annotations

import pytest
import torch

from asynctrace.capture.devices import (
    ClockAlignment,
    CpuDevice,
    CudaDevice,
    Device,
    FakeClock,
    FakeDevice,
    get_device,
)
from asynctrace.errors import CaptureError
from tests.capture._fake_cuda import FakeEvent, FakeGpu, install


def test_fake_clock_advances_by_hand() -> None:
    clock = FakeClock(5)
    assert clock() == 5
    clock.advance(10)
    assert clock() == 15
    assert clock.now_ns == 15


def test_fake_device_scripts_execution_times() -> None:
    clock = FakeClock(100)
    seen: list[tuple[int, int]] = []

    def executes(i: int, recorded_ns: int) -> int:
        seen.append((i, recorded_ns))
        return recorded_ns + 50 * (i + 1)

    dev = FakeDevice(clock, executes)
    a = dev.record()
    clock.advance(10)
    b = dev.record()
    assert seen == [(0, 100), (1, 110)]
    assert dev.recorded == 2
    assert not dev.query(a)  # executes at 150, clock at 110
    clock.advance(40)
    assert dev.query(a)
    assert not dev.query(b)  # executes at 210
    assert dev.queries == 3
    assert dev.executed_at_ns(a) == 150
    assert dev.executed_at_ns(b) == 210
    assert dev.waits == 0
    dev.wait(b)  # a blocking wait returns when the marker executed
    assert clock() == 210
    assert dev.waits == 1
    dev.wait(a)  # already executed: the clock does not go back
    assert clock() == 210


def test_fake_device_never_executes_a_marker_before_it_is_recorded() -> None:
    clock = FakeClock(1_000)
    dev = FakeDevice(clock, lambda i, t: 0)
    ev = dev.record()
    assert dev.query(ev)
    assert dev.executed_at_ns(ev) == 1_000


def test_fake_device_defaults_and_memory() -> None:
    clock = FakeClock()
    dev = FakeDevice(clock)
    assert dev.asynchronous
    assert dev.memory() is None
    ev = dev.record()
    assert dev.query(ev)  # default script: executes when recorded
    assert dev.align() == ClockAlignment(method="fake", ref_host_ns=0, uncertainty_ns=0)
    assert FakeDevice(clock, memory=lambda: (1, 2)).memory() == (1, 2)
    assert not FakeDevice(clock, asynchronous=False).asynchronous


def test_cpu_device_is_synchronous_and_honest() -> None:
    clock = FakeClock(42)
    dev = CpuDevice(clock)
    assert dev.kind == "cpu"
    assert not dev.asynchronous
    assert dev.name.startswith("cpu (")
    ev = dev.record()
    # a CPU "marker" executes when it is recorded: the op before it already ran
    assert dev.query(ev)
    assert dev.executed_at_ns(ev) == 42
    clock.advance(7)
    dev.wait(ev)
    assert clock() == 49  # waiting costs nothing and moves nothing
    assert dev.host_now_ns() == 49
    assert dev.memory() is None
    align = dev.align()
    assert align.uncertainty_ns == 0
    assert align.ref_host_ns == 49


def test_cpu_device_default_clock_is_monotonic_ns() -> None:
    dev = CpuDevice()
    a = dev.host_now_ns()
    b = dev.host_now_ns()
    assert isinstance(a, int)
    assert b >= a


@pytest.mark.parametrize(
    "make",
    [lambda: CpuDevice(), lambda: FakeDevice(FakeClock())],
    ids=["cpu", "fake"],
)
def test_devices_satisfy_the_protocol(make: object) -> None:
    assert isinstance(make(), Device)  # type: ignore[operator]


def test_get_device_passes_a_device_through() -> None:
    dev = FakeDevice(FakeClock())
    assert get_device(dev) is dev


def test_get_device_cpu() -> None:
    assert isinstance(get_device("cpu"), CpuDevice)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-accelerator default")
def test_get_device_defaults_to_cpu_without_cuda() -> None:
    assert isinstance(get_device(None), CpuDevice)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without CUDA")
@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "rocm"])
def test_get_device_cuda_without_cuda_says_what_to_do(spec: str) -> None:
    with pytest.raises(CaptureError, match="sees no CUDA/ROCm device; pass device='cpu'"):
        get_device(spec)


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("not-a-device", "--device not-a-device is not a torch device spec"),
        ("no device", "--device 'no device' is not a torch device spec"),
        ("meta", "--device meta: device type 'meta' is not supported yet"),
    ],
)
def test_get_device_names_the_cli_option_it_came_from(spec: str, said: str) -> None:
    with pytest.raises(CaptureError) as e:
        get_device(spec, option="--device")
    assert str(e.value).startswith(said)
    assert "device=" not in str(e.value)
    # the Python API's message stays in its own terms
    with pytest.raises(CaptureError, match=r"^device(=| type )"):
        get_device(spec)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without CUDA")
def test_get_device_cuda_without_cuda_names_the_cli_option() -> None:
    with pytest.raises(CaptureError) as e:
        get_device("rocm", option="--device")
    assert str(e.value).startswith("--device rocm asked for, but torch ")
    assert str(e.value).endswith("; pass --device cpu or leave --device out")


@pytest.mark.parametrize("spec", ["meta", "not-a-device"])
def test_get_device_rejects_unsupported_specs(spec: str) -> None:
    with pytest.raises(CaptureError, match=repr(spec.split(":")[0]) + "|not a torch device"):
        get_device(spec)


def test_get_device_rejects_other_objects() -> None:
    with pytest.raises(CaptureError, match="neither a device spec string nor an asynctrace Device"):
        get_device(object())  # type: ignore[arg-type]


@pytest.mark.gpu
def test_cuda_device_times_real_events() -> None:  # pragma: no cover - GPU machines only
    dev = get_device("cuda")
    assert isinstance(dev, CudaDevice)
    align = dev.align()
    assert align.uncertainty_ns >= 0
    before = dev.host_now_ns()
    a = dev.record()
    x = torch.randn(2048, 2048, device="cuda")
    for _ in range(10):
        x = x @ x
    b = dev.record()
    dev.wait(b)
    assert dev.query(a)
    assert dev.query(b)
    ta, tb = dev.executed_at_ns(a), dev.executed_at_ns(b)
    assert tb > ta
    # executed after it was recorded, within the alignment's uncertainty
    assert ta >= before - align.uncertainty_ns - 1_000
    mem = dev.memory()
    assert mem is not None
    assert mem[0] >= x.numel() * 4
    assert mem[1] >= mem[0]


# ---------------------------------------------------------------- CudaDevice on a fake GPU
# CudaDevice's arithmetic (alignment, event times, memory) and its choice of stream run on
# every machine against a scripted stand-in for torch.cuda; the real API is checked by the
# test above on GPU machines.


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> FakeGpu:
    return install(monkeypatch)


def test_cuda_device_aligns_on_its_tightest_wait(fake_gpu: FakeGpu) -> None:
    waits = iter([9_000, 4_000, 7_000])
    fake_gpu.latency_ns = 4_000  # the device runs a marker 4 µs after it is recorded

    def clock() -> int:
        return fake_gpu.clock.now_ns

    dev = CudaDevice(clock=clock)
    # each round: the wake-up after the wait comes a scripted time after recording
    real_sync = FakeEvent.synchronize

    def sync_late(ev: FakeEvent) -> None:
        real_sync(ev)
        fake_gpu.clock.now_ns = ev.executes_ns + next(waits) - fake_gpu.latency_ns  # type: ignore[operator]

    fake_gpu.clock.now_ns = 1_000_000
    with pytest.MonkeyPatch.context() as m:
        m.setattr(FakeEvent, "synchronize", sync_late)
        align = dev.align(rounds=3)
    # the second round waited least (4 µs): its wake-up is the reference, its wait the bound
    assert align.uncertainty_ns == 4_000
    second_recorded = 1_000_000 + 9_000
    assert align.ref_host_ns == second_recorded + 4_000
    assert dev.name == "Fake GPU 0"
    assert dev.kind == "cuda"


def test_cuda_device_times_markers_on_the_host_clock(fake_gpu: FakeGpu) -> None:
    clock = fake_gpu.clock
    fake_gpu.latency_ns = 0  # the reference executes when recorded: alignment is exact
    dev = CudaDevice(clock=clock)
    align = dev.align(rounds=1)
    assert align.uncertainty_ns == 0

    fake_gpu.latency_ns = 2_500
    fake_gpu.backlog_ns = 1_000_000  # a queued millisecond of work before each marker
    clock.advance(10_000)
    a = dev.record()
    clock.advance(3_000)
    b = dev.record()
    assert not dev.query(a)
    assert not dev.query(b)
    dev.wait(b)
    assert dev.query(a)
    assert dev.query(b)
    # the device times on the host clock: a ran after the millisecond of backlog behind the
    # reference (t = 1 ms), b a millisecond after a, 1.987 ms after the host recorded it
    assert dev.executed_at_ns(a) == a.executes_ns == 2_000_000
    assert dev.executed_at_ns(b) == b.executes_ns == 3_000_000


def test_cuda_device_aligns_when_first_asked_for_a_time(fake_gpu: FakeGpu) -> None:
    fake_gpu.latency_ns = 0
    dev = CudaDevice(clock=fake_gpu.clock)
    ev = dev.record()
    dev.wait(ev)
    # no align() yet: the first conversion aligns (one wait), then converts
    assert dev.executed_at_ns(ev) == ev.executes_ns


def test_cuda_device_records_on_its_own_device_not_the_current_one(fake_gpu: FakeGpu) -> None:
    fake_gpu.latency_ns = 0
    dev = CudaDevice(1, clock=fake_gpu.clock)  # device="cuda:1" while device 0 is current
    dev.align(rounds=1)
    ev = dev.record()
    dev.wait(ev)
    assert fake_gpu.recorded_on == [1, 1]
    assert dev.executed_at_ns(ev) == ev.executes_ns  # same device as the reference: no error
    assert dev.name == "Fake GPU 1"


def test_cuda_device_reads_memory_from_the_allocator_stats(
    fake_gpu: FakeGpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    dev = CudaDevice(clock=fake_gpu.clock)
    stats = {
        "allocated_bytes": {"all": {"current": 3 << 20}},
        "reserved_bytes": {"all": {"current": 8 << 20}},
    }
    monkeypatch.setattr(torch._C, "_cuda_memoryStats", lambda i: stats, raising=False)
    assert dev.memory() == (3 << 20, 8 << 20)

    # without the fast path (another torch), or where it fails, the public functions answer
    monkeypatch.setattr(torch._C, "_cuda_memoryStats", lambda i: {}, raising=False)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda i=None: 1 << 20)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda i=None: 2 << 20)
    assert dev.memory() == (1 << 20, 2 << 20)
    monkeypatch.delattr(torch._C, "_cuda_memoryStats")
    assert dev.memory() == (1 << 20, 2 << 20)


def test_cuda_device_is_rocm_on_a_hip_build(
    fake_gpu: FakeGpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.version, "hip", "6.2.0")
    dev = CudaDevice(clock=fake_gpu.clock)
    assert dev.kind == "rocm"
    assert dev.asynchronous
    assert isinstance(dev, Device)
