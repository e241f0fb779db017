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

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm device")


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


@needs_cuda
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
