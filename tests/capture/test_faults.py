"""Capture faults: whatever ends or disturbs a session, the completed steps are on disk, complete
and valid, every global is restored (the autouse leak fixture in conftest.py checks the rest),
NVTX is balanced, and the user's exception comes out unchanged. Output folders that cannot be
written are a warning (training continues) unless ``strict=True``."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.optim.optimizer as torch_optimizer
from torch.utils.data import DataLoader

from asynctrace.capture import _clock, ranges
from asynctrace.capture import session as session_module
from asynctrace.capture.devices import FakeClock, FakeDevice
from asynctrace.capture.profiler import Profile
from asynctrace.cli import main
from asynctrace.errors import AsyncTraceWarning, CaptureError
from asynctrace.records import RECORDS_SUFFIX, Records, read_records
from asynctrace.records import writer as _writer
from asynctrace.records.names import records_file_name
from asynctrace.records.writer import RecordsWriter
from asynctrace.tracing import Session, current_session, trace
from tests.capture._datasets import SlowDataset

T0 = 1_000_000


def fake_session(tmp_path: Path, clock: FakeClock, **kw: Any) -> Session:
    kw.setdefault("print_summary", False)
    kw.setdefault("device", FakeDevice(clock, lambda i, t: t + 300))
    return Session(kw.pop("name", "f"), dir=tmp_path, **kw)


def only_records(d: Path) -> Records:
    files = sorted(d.glob("*" + RECORDS_SUFFIX))
    assert len(files) == 1, files
    assert not list(d.glob("*.tmp"))
    return read_records(files[0])


@pytest.fixture
def nvtx_log(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every NVTX push/pop the session makes, in order (as if a tool were attached)."""
    events: list[str] = []
    real_push, real_pop = ranges._push, ranges._pop

    def push(handle: Any) -> None:
        events.append(f"push {handle.name}")
        real_push(handle)

    def pop() -> None:
        events.append("pop")
        real_pop()

    monkeypatch.setattr(ranges, "_push", push)
    monkeypatch.setattr(ranges, "_pop", pop)
    monkeypatch.setattr(ranges, "nvtx_attached", lambda: True)
    return events


def balanced(events: list[str]) -> bool:
    depth = 0
    for e in events:
        depth += -1 if e == "pop" else 1
        if depth < 0:
            return False
    return depth == 0


# ---------------------------------------------------------------- how a session can end
ENDINGS: list[tuple[str, Callable[[], BaseException], str | None]] = [
    ("exception", lambda: RuntimeError("boom"), "RuntimeError: boom"),
    ("keyboard-interrupt", KeyboardInterrupt, "KeyboardInterrupt"),
    ("sys-exit-3", lambda: SystemExit(3), "SystemExit: 3"),
    # an ordinary end of a program: not an error
    ("sys-exit-0", lambda: SystemExit(0), None),
]


def _train_then_fail(s: Session, clock: FakeClock, exc: BaseException, *, fail_at: int) -> None:
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(10):
        clock.advance(1_000)
        if i == fail_at:
            raise exc
        model(torch.ones(1, 2)).sum().backward()
        opt.step()  # the session's step boundary (optimizer_steps=True)


@pytest.mark.parametrize(("label", "make", "error"), ENDINGS, ids=[e[0] for e in ENDINGS])
@pytest.mark.parametrize("form", ["with", "decorator"])
def test_an_ending_keeps_completed_steps_and_restores_everything(
    tmp_path: Path,
    nvtx_log: list[str],
    label: str,
    make: Callable[[], BaseException],
    error: str | None,
    form: str,
) -> None:
    clock = FakeClock(T0)
    exc = make()
    options: dict[str, Any] = {
        "dir": tmp_path,
        "device": FakeDevice(clock, lambda i, t: t + 300),
        "print_summary": False,
        "optimizer_steps": True,
        "detect_syncs": "lint",
    }
    hooks_before = len(torch_optimizer._global_optimizer_post_hooks)
    if form == "with":
        s = trace("ending", **options)

        def run() -> None:
            with s:
                _train_then_fail(s, clock, exc, fail_at=4)

    else:
        s = trace("ending", **options)

        @s
        def run() -> None:
            assert current_session() is s
            _train_then_fail(s, clock, exc, fail_at=4)

    with pytest.raises(type(exc)) as info:
        run()
    assert info.value is exc  # the very object, not a wrapper
    assert current_session() is None
    assert len(torch_optimizer._global_optimizer_post_hooks) == hooks_before
    assert torch._C._len_torch_dispatch_stack() == 0
    assert balanced(nvtx_log)
    assert nvtx_log[:2] == ["push step 0", "pop"]
    rec = only_records(tmp_path)
    assert rec.complete
    assert [r.step for r in rec.steps] == [0, 1, 2, 3]
    assert [r.frontend_ns for r in rec.steps] == [1_000] * 4
    assert [r.device_ns for r in rec.steps] == [1_000] * 4
    assert rec.summary is not None
    assert rec.summary.error == error
    assert s.summary().source.error == error
    assert s.summary().source.events == 4


def test_a_device_error_inside_a_step_boundary_leaves_nvtx_balanced(
    tmp_path: Path, nvtx_log: list[str]
) -> None:
    clock = FakeClock(T0)

    class Failing(FakeDevice):
        def memory(self) -> tuple[int, int] | None:
            if self.recorded == 4:  # read at the end of step 2, after its end marker
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
            return (1, 2)

    s = fake_session(tmp_path, clock, device=Failing(clock, lambda i, t: t + 300))
    with pytest.raises(RuntimeError, match="illegal memory access"), s:  # noqa: PT012 - a loop
        for _ in range(5):
            clock.advance(1_000)
            s.step()
    assert balanced(nvtx_log), nvtx_log
    rec = only_records(tmp_path)
    assert [r.step for r in rec.steps] == [0, 1]
    assert rec.summary is not None
    assert rec.summary.error is not None
    assert rec.summary.error.startswith("RuntimeError: CUDA error")


def test_keyboard_interrupt_inside_record_keeps_the_steps_before(
    tmp_path: Path, nvtx_log: list[str]
) -> None:
    clock = FakeClock(T0)

    class Interrupted(FakeDevice):
        def record(self) -> Any:
            if self.recorded == 3:  # Ctrl-C lands while step 2 records its end marker
                raise KeyboardInterrupt
            return super().record()

    s = fake_session(tmp_path, clock, device=Interrupted(clock, lambda i, t: t + 300))
    with pytest.raises(KeyboardInterrupt), s:  # noqa: PT012 - a loop
        for _ in range(5):
            clock.advance(1_000)
            s.step()
    assert balanced(nvtx_log)
    rec = only_records(tmp_path)
    assert [r.step for r in rec.steps] == [0, 1]
    assert rec.summary is not None
    assert rec.summary.error == "KeyboardInterrupt"


def test_keyboard_interrupt_with_profiler_and_tensorboard_stops_both(tmp_path: Path) -> None:
    x = torch.randn(16, 16)
    with (  # noqa: PT012 - the training loop
        pytest.raises(KeyboardInterrupt),
        trace(
            "ki",
            dir=tmp_path,
            device="cpu",
            print_summary=False,
            profile=Profile(wait=0, warmup=1, active=5, annotate=False),
            tensorboard=True,
        ) as s,
    ):
        for i in range(4):
            x = x @ x.T / 16
            if i == 2:
                assert torch.autograd.profiler._is_profiler_enabled
                raise KeyboardInterrupt
            s.step()
    assert not torch.autograd.profiler._is_profiler_enabled
    rec = only_records(tmp_path)
    assert [r.step for r in rec.steps] == [0, 1]
    assert rec.summary is not None
    assert rec.summary.error == "KeyboardInterrupt"
    # the window cut short is still written, as is the TensorBoard file
    assert len(list((tmp_path / "ki").glob("*.pt.trace.json.gz"))) == 1
    assert len(list((tmp_path / "ki").glob("*/events.out.tfevents.*"))) == 1
    assert not list(tmp_path.rglob("*.tmp*"))


def test_cuda_sync_hooks_are_restored_after_keyboard_interrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the CUDA detector's globals, on a CPU build: torch's sync debug mode is faked
    mode = {"value": 0}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: mode["value"])
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda v: mode.__setitem__("value", v))
    filters_before = list(warnings.filters)
    show_before = warnings.showwarning
    sync_before = torch.cuda.synchronize
    clock = FakeClock(T0)
    s = fake_session(tmp_path, clock, detect_syncs="cuda")
    with pytest.raises(KeyboardInterrupt), s:  # noqa: PT012 - checked while active
        assert mode["value"] == "warn"
        assert warnings.showwarning is not show_before
        assert torch.cuda.synchronize is not sync_before
        clock.advance(10)
        s.step()
        raise KeyboardInterrupt
    assert mode["value"] == 0
    assert warnings.filters == filters_before
    assert warnings.showwarning is show_before
    assert torch.cuda.synchronize is sync_before
    assert only_records(tmp_path).summary is not None


# ---------------------------------------------------------------- asynctrace run
RUN_SCRIPT = """
import sys
import torch
import torch.optim.optimizer as torch_optimizer

model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(5):
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
    if i == 2:
        if sys.argv[1] == "exit3":
            sys.exit(3)
        if sys.argv[1] == "interrupt":
            raise KeyboardInterrupt
        if sys.argv[1] == "raise":
            raise ValueError("script failed")
"""


@pytest.mark.parametrize(
    ("end", "status", "error"),
    [
        # run_script catches sys.exit inside the session: an ordinary end, its status passed on
        ("exit3", 3, None),
        ("raise", 1, "ValueError: script failed"),
        ("interrupt", 130, "KeyboardInterrupt"),
    ],
)
def test_asynctrace_run_ends(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    end: str,
    status: int,
    error: str | None,
) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(RUN_SCRIPT))
    out = tmp_path / "out"
    hooks_before = len(torch_optimizer._global_optimizer_post_hooks)
    code = main(["run", "--dir", str(out), "--detect", "lint", str(script), end])
    assert code == status
    assert current_session() is None
    assert len(torch_optimizer._global_optimizer_post_hooks) == hooks_before
    rec = only_records(out)
    assert rec.complete
    # three optimizer steps ended steps 0-2; what followed the third is no complete step
    assert [r.step for r in rec.steps] == [0, 1, 2]
    assert rec.summary is not None
    assert rec.summary.error == error
    capsys.readouterr()


# ---------------------------------------------------------------- read-only and full folders
@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder nothing can be written into, for real: chmod where we are not root, the
    immutable attribute where we are (root ignores permissions)."""
    d = tmp_path / "ro"
    d.mkdir()
    if os.geteuid() != 0:
        d.chmod(0o555)
        undo = ["chmod", "755", str(d)]
    else:
        try:
            done = subprocess.run(["chattr", "+i", str(d)], capture_output=True, check=False)
        except FileNotFoundError:
            pytest.skip("running as root without chattr: cannot make a folder read-only")
        if done.returncode:
            pytest.skip(f"chattr +i failed: {done.stderr.decode().strip()}")
        undo = ["chattr", "-i", str(d)]
    try:
        try:
            (d / "probe").touch()
        except OSError:
            pass
        else:
            pytest.skip("this file system ignores read-only folders")
        yield d
    finally:
        subprocess.run(undo, check=False)


def _three_steps(s: Session, clock: FakeClock) -> None:
    with s:
        for _ in range(3):
            clock.advance(100)
            s.step()


@pytest.mark.parametrize("sub", ["", "sub"])
def test_read_only_folder_warns_and_training_continues(read_only_dir: Path, sub: str) -> None:
    clock = FakeClock(T0)
    s = fake_session(read_only_dir / sub if sub else read_only_dir, clock)
    with pytest.warns(AsyncTraceWarning, match="could not write the session records"):
        _three_steps(s, clock)
    assert s.records_path is None
    assert s.summary().source.events == 3
    assert any(n.code == "records-not-written" for n in s.summary().notes)
    assert list(read_only_dir.iterdir()) == []


def test_read_only_folder_with_strict_fails_before_training(read_only_dir: Path) -> None:
    s = fake_session(read_only_dir, FakeClock(T0), strict=True, optimizer_steps=True)
    with pytest.raises(CaptureError, match="could not write the session records"), s:
        pytest.fail("the body must not run")


def test_read_only_folder_with_tensorboard_and_profile_warns_for_each(
    read_only_dir: Path,
) -> None:
    x = torch.randn(8, 8)
    with (  # noqa: PT031 - the training loop
        pytest.warns(AsyncTraceWarning) as caught,
        trace(
            "ro",
            dir=read_only_dir,
            device="cpu",
            print_summary=False,
            tensorboard=True,
            profile=Profile(wait=0, warmup=1, active=2),
        ) as s,
    ):
        for _ in range(3):
            x = x @ x
            s.step()
    messages = " | ".join(str(w.message) for w in caught)
    assert "TensorBoard events" in messages
    assert "profiler traces" in messages
    assert "session records" in messages
    assert s.summary().source.events == 3
    assert not torch.autograd.profiler._is_profiler_enabled


@pytest.mark.parametrize("extra", ["tensorboard", "profile"])
def test_read_only_folder_extras_with_strict_raise(read_only_dir: Path, extra: str) -> None:
    options: dict[str, Any] = {"tensorboard": True} if extra == "tensorboard" else {"profile": True}
    with (
        pytest.raises(CaptureError, match=r"(cannot|could not) write"),
        trace(
            "ro",
            dir=read_only_dir,
            device="cpu",
            print_summary=False,
            write=False,
            strict=True,
            **options,
        ),
    ):
        pytest.fail("the body must not run")


class _FullDisk:
    """Stands in for the records writer's file object: accepts ``room`` bytes, then ENOSPC."""

    def __init__(self, real: Any, room: int) -> None:
        self.real = real
        self.room = room

    def write(self, data: Any) -> int:
        n = min(len(data), self.room)
        if n == 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= n
        return int(self.real.write(bytes(data[:n])))

    def flush(self) -> None:
        self.real.flush()

    def close(self) -> None:
        self.real.close()


@pytest.fixture
def disk_room(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Call with a byte count: records files opened from then on fill the disk after it."""

    def set_room(room: int) -> None:
        real_open = RecordsWriter.open

        def open_on_small_disk(self: RecordsWriter) -> None:
            real_open(self)
            self._file = _FullDisk(self._file, room)  # type: ignore[assignment]

        monkeypatch.setattr(RecordsWriter, "open", open_on_small_disk)
        # the session hands its steps on, and the writer writes them, 4 at a time
        monkeypatch.setattr(_clock, "BATCH", 4)
        monkeypatch.setattr(_writer, "_BATCH", 4)

    return set_room


# header ~450 B; a step line ~200 B: the disk fills at the header, mid-run, or at the summary
@pytest.mark.parametrize("room", [0, 100, 1_500, 4_200], ids=["empty", "header", "mid", "end"])
def test_full_disk_warns_once_and_training_continues(
    tmp_path: Path, disk_room: Callable[[int], None], room: int
) -> None:
    disk_room(room)
    clock = FakeClock(T0)
    s = fake_session(tmp_path, clock)
    with pytest.warns(AsyncTraceWarning, match="No space left on device") as caught, s:  # noqa: PT031
        for _ in range(20):
            clock.advance(100)
            s.step()
    assert len([w for w in caught if issubclass(w.category, AsyncTraceWarning)]) == 1
    assert s.records_path is None
    assert s.summary().source.events == 20
    written = [n for n in s.summary().notes if n.code == "records-not-written"]
    # said once, though both the failed sink and the records' own error know it
    assert [n.text for n in written] == ["records not written: No space left on device"]
    # no partial file left to take the space the job needs for its checkpoints
    assert list(tmp_path.iterdir()) == []


def test_full_disk_with_strict_raises_in_the_step(
    tmp_path: Path, disk_room: Callable[[int], None]
) -> None:
    disk_room(1_500)
    clock = FakeClock(T0)
    s = fake_session(tmp_path, clock, strict=True)
    done = 0
    with pytest.raises(CaptureError, match="No space left on device"), s:  # noqa: PT012
        for _ in range(20):
            clock.advance(100)
            s.step()
            done += 1
    assert 0 < done < 20
    assert list(tmp_path.iterdir()) == []


class _FullEventFile:
    """Stands in for the TensorBoard writer's event file on a full disk."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def write(self, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def close(self) -> None:
        self.real.close()


def test_tensorboard_disk_full_mid_run_warns_and_training_continues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # no filterwarnings for PytestUnhandledThreadExceptionWarning: a writer thread that dies
    # with a traceback beside the warning fails this test (tensorboard's own thread did)
    hooked: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", hooked.append)
    clock = FakeClock(T0)
    s = fake_session(tmp_path, clock, tensorboard=True, device=FakeDevice(clock))
    with (  # noqa: PT031 - the training loop
        pytest.warns(AsyncTraceWarning, match="could not write TensorBoard events") as caught,
        s,
    ):
        tb = s._tensorboard._writer  # type: ignore[union-attr]
        assert tb is not None
        tb._file = _FullEventFile(tb._file)  # type: ignore[assignment]
        for _ in range(50):
            clock.advance(100)
            s.step()
            # the writer thread fails on its own schedule; wait for it once
            if s.step_index == 2:
                deadline = time.monotonic() + 5
                while tb._error is None and time.monotonic() < deadline:
                    time.sleep(0.01)
    assert len([w for w in caught if issubclass(w.category, AsyncTraceWarning)]) == 1
    assert s.summary().source.events == 50
    assert any(n.code == "tensorboard-failed" for n in s.summary().notes)
    assert len(read_records(s.records_path).steps) == 50  # type: ignore[arg-type]
    assert hooked == []
    assert "Traceback" not in capfd.readouterr().err


# ---------------------------------------------------------------- nesting and threads
def test_nested_decorated_functions_are_a_clear_error(tmp_path: Path) -> None:
    clock = FakeClock(T0)

    @trace("inner", dir=tmp_path, device=FakeDevice(clock), print_summary=False)
    def inner() -> None:
        pytest.fail("must not run")

    outer = fake_session(tmp_path, clock, name="outer")
    with outer:
        with pytest.raises(CaptureError, match="'outer' is already active; sessions do not nest"):
            inner()
        clock.advance(5)
        outer.step()
    assert current_session() is None
    assert [r.frontend_ns for r in only_records(tmp_path).steps] == [5]


def _sgd() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Linear(2, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def test_sessions_in_two_threads_each_count_only_their_own_optimizer_steps(
    tmp_path: Path,
) -> None:
    plans = {"a": (7, 1_000), "b": (4, 3_000)}  # optimizer steps, frontend ns per step
    barrier = threading.Barrier(2, timeout=30)
    results: dict[str, Any] = {}
    errors: list[BaseException] = []

    def worker(label: str) -> None:
        try:
            n, step_ns = plans[label]
            clock = FakeClock(T0)
            model, opt = _sgd()
            s = fake_session(tmp_path, clock, name=label, optimizer_steps=True)
            with s:
                barrier.wait()  # both sessions are active from here on
                results[label + " current"] = current_session() is s
                for i in range(max(p[0] for p in plans.values())):
                    if i < n:
                        clock.advance(step_ns)
                        model(torch.ones(1, 2)).sum().backward()
                        opt.step()
                    time.sleep(0.001)  # interleave the two threads' steps
                barrier.wait()
            results[label] = s
        except BaseException as e:
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(k,)) for k in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert current_session() is None
    for label, (n, step_ns) in plans.items():
        assert results[label + " current"]
        s = results[label]
        rec = read_records(s.records_path)
        assert rec.complete
        assert rec.header.name == label
        assert [r.frontend_ns for r in rec.steps] == [step_ns] * n


def test_a_session_object_cannot_run_in_two_threads_at_once(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    s = fake_session(tmp_path, clock)
    caught: list[BaseException] = []

    def enter_again() -> None:
        try:
            with s:
                pass
        except BaseException as e:
            caught.append(e)

    with s:
        t = threading.Thread(target=enter_again)
        t.start()
        t.join(30)
        clock.advance(1)
        s.step()
    assert len(caught) == 1
    assert isinstance(caught[0], CaptureError)
    assert "one session per thread" in str(caught[0])
    assert s.summary().source.events == 1


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"detect_syncs": "lint"}, "lint sync detection is already running in another thread"),
        ({"profile": True}, "torch.profiler is process-wide"),
    ],
)
def test_process_wide_parts_serve_one_thread_at_a_time(
    tmp_path: Path, options: dict[str, Any], match: str
) -> None:
    clock = FakeClock(T0)
    caught: list[BaseException] = []

    def second() -> None:
        try:
            with fake_session(tmp_path / "b", clock, name="b", **options):
                pass
        except BaseException as e:
            caught.append(e)

    with fake_session(tmp_path / "a", clock, name="a", **options) as a:
        t = threading.Thread(target=second)
        t.start()
        t.join(30)
        clock.advance(1)
        a.step()
    assert len(caught) == 1
    assert isinstance(caught[0], CaptureError)
    assert match in str(caught[0])
    assert not (tmp_path / "b").exists() or not list((tmp_path / "b").glob("*" + RECORDS_SUFFIX))
    assert a.summary().source.events == 1


def _in_thread(fn: Callable[[], object]) -> BaseException | None:
    caught: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as e:
            caught.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    return caught[0] if caught else None


def test_a_lint_session_cannot_be_ended_from_another_thread(tmp_path: Path) -> None:
    # was: RuntimeError "pop from empty mode stack", the lint mode left on the entering
    # thread's stack for good, the Tensor wrappers left installed and the records left as .tmp
    clock = FakeClock(T0)
    s = fake_session(tmp_path, clock, detect_syncs="lint")
    tolist = torch.Tensor.tolist
    s.__enter__()
    try:
        clock.advance(10)
        s.step()
        caught = _in_thread(lambda: s.__exit__(None, None, None))
        assert isinstance(caught, CaptureError)
        assert "end it in that thread" in str(caught)
        # nothing changed: still active and still detecting, so this thread can end it
        assert current_session() is s
        assert torch._C._len_torch_dispatch_stack() == 1
        torch.ones(1).sum().item()
        assert sum(site.count for site in s.sync_sites()) == 1
    finally:
        s.__exit__(None, None, None)
    assert torch.Tensor.tolist is tolist
    rec = only_records(tmp_path)
    assert rec.complete
    assert [r.step for r in rec.steps] == [0]


DEEP_MODE_OTHER_THREAD = """
import sys, threading
import torch
from asynctrace.capture.profiler import Profile
from asynctrace.tracing import Session
from asynctrace.errors import CaptureError

s = Session("t", dir=sys.argv[2], device="cpu", print_summary=False, detect_syncs="off",
            profile=Profile(wait=0, warmup=1, active=3, annotate=False))
caught = []

def other():
    try:
        s.step() if sys.argv[1] == "step" else s.__exit__(None, None, None)
    except CaptureError as e:
        caught.append(e)

with s:
    x = torch.randn(8, 8)
    for _ in range(2):
        x = x @ x
        s.step()
    assert torch.autograd.profiler._is_profiler_enabled  # recording, started in this thread
    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert len(caught) == 1, caught
    print("refused:", caught[0])
    s.step()
assert not torch.autograd.profiler._is_profiler_enabled
print("steps", s.summary().source.events)
"""


@pytest.mark.parametrize("call", ["step", "exit"])
def test_deep_mode_is_never_stopped_from_another_thread(tmp_path: Path, call: str) -> None:
    # torch.profiler stopped from another thread than the one that started recording kills
    # the process (SIGSEGV, torch 2.x): was what a step() or the end from another thread did.
    # Run in a child, so that a regression fails this test instead of the whole test run.
    script = tmp_path / "deep.py"
    script.write_text(DEEP_MODE_OTHER_THREAD)
    out = tmp_path / "out"
    root = str(Path(__file__).parents[2])  # this checkout's asynctrace, not an installed one
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    r = subprocess.run(
        [sys.executable, str(script), call, str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    refused = [line for line in r.stdout.splitlines() if line.startswith("refused:")]
    assert len(refused) == 1
    assert "deep mode (profile=)" in refused[0]
    assert "steps 3" in r.stdout
    assert len(list((out / "t").glob("*.pt.trace.json.gz"))) == 1
    assert only_records(out).complete


# ---------------------------------------------------------------- failures while ending
def test_an_interrupt_while_a_deep_mode_window_is_written_still_finishes_the_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a second Ctrl-C while the window cut short by the first is exported (seconds for a
    # large trace): was a records file left as .tmp holding the header only
    from asynctrace.capture import profiler

    def interrupted(self: Any, prof: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(profiler.DeepProfiler, "_write", interrupted)
    s = trace(
        "p",
        dir=tmp_path,
        device="cpu",
        print_summary=False,
        profile=Profile(wait=0, warmup=1, active=5, annotate=False),
    )
    first = RuntimeError("boom")
    with pytest.raises(KeyboardInterrupt) as info, s:  # noqa: PT012 - a loop
        for _ in range(3):
            s.step()
        raise first
    assert info.value.__context__ is first
    assert not torch.autograd.profiler._is_profiler_enabled
    rec = only_records(tmp_path)
    assert rec.complete
    assert [r.step for r in rec.steps] == [0, 1, 2]
    assert rec.summary is not None
    assert rec.summary.error == "RuntimeError: boom"


def test_an_interrupt_while_waiting_for_the_device_at_exit_keeps_every_step(
    tmp_path: Path,
) -> None:
    clock = FakeClock(T0)

    class Interrupted(FakeDevice):
        def wait(self, event: Any) -> None:
            raise KeyboardInterrupt  # Ctrl-C during the wait for the last steps' markers

    # each marker executes 10 µs after it is recorded: the last steps are pending at exit
    s = fake_session(tmp_path, clock, device=Interrupted(clock, lambda i, t: t + 10_000))
    with pytest.raises(KeyboardInterrupt), s:  # noqa: PT012 - a loop
        for _ in range(4):
            clock.advance(1_000)
            s.step()
    rec = only_records(tmp_path)
    assert rec.complete
    assert [r.step for r in rec.steps] == [0, 1, 2, 3]
    assert [r.frontend_ns for r in rec.steps] == [1_000] * 4
    assert [r.device_ns for r in rec.steps].count(None) >= 1
    assert rec.summary is not None
    assert rec.summary.error == "KeyboardInterrupt"
    assert any(n.code == "exit-wait-interrupted" for n in rec.summary.notes)


@pytest.mark.parametrize("user_error", [False, True])
def test_a_global_that_fails_to_restore_still_finishes_the_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user_error: bool
) -> None:
    from asynctrace.capture import syncs

    real_stop = syncs.SyncDetector.stop

    def failing_stop(self: syncs.SyncDetector) -> None:
        real_stop(self)
        raise RuntimeError("restore failed")

    monkeypatch.setattr(syncs.SyncDetector, "stop", failing_stop)
    clock = FakeClock(T0)
    s = fake_session(tmp_path, clock, detect_syncs="lint")
    with contextlib.ExitStack() as stack:
        if user_error:
            # ours never masks the user's exception: a warning instead
            stack.enter_context(pytest.raises(ValueError, match="user"))
            stack.enter_context(pytest.warns(AsyncTraceWarning, match="restore failed"))
        else:
            stack.enter_context(pytest.raises(RuntimeError, match="restore failed"))
        with s:
            clock.advance(10)
            s.step()
            if user_error:
                raise ValueError("user")
    assert current_session() is None
    rec = only_records(tmp_path)
    assert rec.complete
    assert [r.step for r in rec.steps] == [0]
    assert rec.summary is not None
    assert rec.summary.error == (
        "ValueError: user" if user_error else "RuntimeError: restore failed"
    )


def test_a_traced_generator_closed_early_ends_normally(tmp_path: Path) -> None:
    # breaking out of a loop over a generator that traces its own iteration closes it with
    # GeneratorExit: was recorded as the run's error, and the summary not printed
    clock = FakeClock(T0)
    s = fake_session(tmp_path, clock)

    def batches() -> Iterator[int]:
        with s:
            for i in range(100):
                yield i
                clock.advance(10)
                s.step()

    for b in batches():
        if b == 3:
            break
    rec = only_records(tmp_path)
    assert [r.step for r in rec.steps] == [0, 1, 2]
    assert rec.summary is not None
    assert rec.summary.error is None


# ---------------------------------------------------------------- DataLoader workers
@pytest.mark.slow
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers(tmp_path: Path, context: str) -> None:
    n, delay_s = 8, 0.03
    loader = DataLoader(
        SlowDataset(n, delay_s),
        batch_size=1,
        num_workers=2,
        multiprocessing_context=context,
    )
    got_ns: list[int] = []
    end_ns: list[int] = []
    items: list[list[int]] = []
    with trace("dl", dir=tmp_path, device="cpu", print_summary=False) as s:
        batches = s.steps(loader)  # the workers start here, before the first step
        end_ns.append(time.perf_counter_ns())
        for batch in batches:
            got_ns.append(time.perf_counter_ns())
            items.append(batch[0].tolist())
            end_ns.append(time.perf_counter_ns())
    rec = only_records(tmp_path)
    assert rec.complete
    assert [r.step for r in rec.steps] == list(range(n))
    assert sorted(i for i, _, _ in items) == list(range(n))
    # every item came from a worker, and no worker saw an active session
    assert all(pid != os.getpid() for _, pid, _ in items)
    assert [inherited for _, _, inherited in items] == [0] * n
    # data wait, against the loop's own clock (the CPU device's: perf_counter_ns): each step's
    # wait sits inside the gap from the previous body's end to its batch's arrival
    uncovered: list[int] = []
    for r, got, before in zip(rec.steps, got_ns, end_ns[:n], strict=True):
        gap = got - before
        assert 0 < r.data_wait_ns <= gap
        assert r.data_wait_ns <= r.frontend_ns
        uncovered.append(gap - r.data_wait_ns)
    # and covers nearly all of it: the rest is the step boundary's own work, tens of µs. A
    # loaded machine may deschedule the loop right there in a few steps, not in most (each
    # step was held to 2 ms, and could fail on a loaded machine)
    assert sorted(uncovered)[n // 2] < 2_000_000, uncovered
    # two workers, delay_s per item and nothing else to do: the loop waits for most of it
    total = sum(r.data_wait_ns for r in rec.steps)
    assert total >= (n // 2 - 1) * delay_s * 1e9


# ---------------------------------------------------------------- files
def test_same_name_and_clock_never_overwrites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time, "time_ns", lambda: 1_700_000_000_000_000_000)
    clock = FakeClock(T0)
    steps = [2, 3, 4]
    paths = []
    for n in steps:
        s = fake_session(tmp_path, clock, name="same")
        with s:
            for _ in range(n):
                clock.advance(10)
                s.step()
        paths.append(s.records_path)
    assert len(set(paths)) == 3
    assert [len(read_records(p).steps) for p in paths] == steps  # type: ignore[arg-type]
    # the later names moved their time_ns on by a ns, keeping the file name's fields
    assert [p.name.split(".")[-3] for p in paths] == [  # type: ignore[union-attr]
        "1700000000000000000",
        "1700000000000000001",
        "1700000000000000002",
    ]


def test_same_name_while_the_first_is_still_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time, "time_ns", lambda: 42)
    clock = FakeClock(T0)
    first = fake_session(tmp_path, clock, name="same")
    second = fake_session(tmp_path, clock, name="same")
    done = threading.Event()

    def run_second() -> None:
        with second:
            clock.advance(1)
            second.step()
        done.set()

    with first:  # its .tmp is open while the second session starts and ends
        t = threading.Thread(target=run_second)
        t.start()
        t.join(30)
        assert done.is_set()
        for _ in range(3):
            clock.advance(1)
            first.step()
    assert first.records_path != second.records_path
    assert len(read_records(first.records_path).steps) == 3  # type: ignore[arg-type]
    assert len(read_records(second.records_path).steps) == 1  # type: ignore[arg-type]


def test_a_file_of_another_run_is_never_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time, "time_ns", lambda: 7)
    name = records_file_name("x", pid=os.getpid(), rank=None, time_ns=7)
    other = tmp_path / name
    other.write_bytes(b"another run's records")
    (tmp_path / "x.tmp").write_bytes(b"unrelated")
    clock = FakeClock(T0)
    s = fake_session(tmp_path, clock, name="x")
    with s:
        clock.advance(1)
        s.step()
    assert other.read_bytes() == b"another run's records"
    assert s.records_path is not None
    assert s.records_path != other
    assert s.records_path.parent == tmp_path


def test_profiler_traces_never_overwrite_and_are_renamed_into_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time, "time_ns", lambda: 5)
    x = torch.randn(8, 8)
    for _ in range(2):
        with trace(
            "p",
            dir=tmp_path,
            device="cpu",
            print_summary=False,
            write=False,
            profile=Profile(wait=0, warmup=1, active=1, annotate=False),
        ) as s:
            for _ in range(2):
                x = x @ x / 8
                s.step()
    traces = sorted(p.name for p in (tmp_path / "p").iterdir())
    assert len(traces) == 2
    assert all(t.endswith(".pt.trace.json.gz") for t in traces)
    assert [t.split(".")[1] for t in traces] == ["5", "6"]


@pytest.mark.parametrize("name", ["../../x", "/etc/passwd", "..", "a/../../b"])
def test_names_from_user_input_stay_inside_the_folder(tmp_path: Path, name: str) -> None:
    out = tmp_path / "deep" / "out"
    x = torch.randn(4, 4)
    with trace(
        name,
        dir=out,
        device="cpu",
        print_summary=False,
        tensorboard=True,
        profile=Profile(wait=0, warmup=1, active=1, annotate=False, run=name),
    ) as s:
        for _ in range(2):
            x = x @ x / 4
            s.step()
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written
    for p in written:
        assert out in p.parents, p
        assert ".." not in p.relative_to(out).parts
    assert s.records_path is not None
    assert s.records_path.parent == out
    assert len(list(out.rglob("*.pt.trace.json.gz"))) == 1
    assert len(list(out.rglob("events.out.tfevents.*"))) == 1


def test_forked_child_sees_no_session_and_cannot_write(tmp_path: Path) -> None:
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    clock = FakeClock(T0)
    s = fake_session(tmp_path, clock)
    with s:
        clock.advance(10)
        s.step()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through the pipe
            code = 0
            try:
                report = [current_session() is None, not session_module._active, not s._active]
                try:
                    s.step()
                    report.append(False)
                except CaptureError:
                    report.append(True)
                os.write(w, bytes(int(b) for b in report))
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        seen = os.read(r, 16)
        os.close(r)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert seen == b"\x01\x01\x01\x01"
        assert current_session() is s  # the parent's session is untouched
        clock.advance(10)
        s.step()
    rec = only_records(tmp_path)
    assert [r.frontend_ns for r in rec.steps] == [10, 10]


def test_forked_child_inherits_none_of_the_sessions_hooks(tmp_path: Path) -> None:
    # a DataLoader worker forked during a lint session: was left with the lint's dispatch mode
    # (every op of the worker through Python, for nobody), the Tensor wrappers and the
    # optimizer hook
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    clock = FakeClock(T0)
    s = fake_session(tmp_path, clock, detect_syncs="lint", optimizer_steps=True)
    tolist = torch.Tensor.tolist
    hooks_before = len(torch_optimizer._global_optimizer_post_hooks)
    with s:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through the pipe
            code = 0
            try:
                report = [
                    torch._C._len_torch_dispatch_stack() == 0,
                    torch.Tensor.tolist is tolist,
                    len(torch_optimizer._global_optimizer_post_hooks) == hooks_before,
                ]
                os.write(w, bytes(int(b) for b in report))
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        seen = os.read(r, 16)
        os.close(r)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert seen == b"\x01\x01\x01"
        # the parent's are untouched
        assert torch._C._len_torch_dispatch_stack() == 1
        assert torch.Tensor.tolist is not tolist
        torch.ones(1).sum().item()
        assert sum(site.count for site in s.sync_sites()) == 1
    assert torch.Tensor.tolist is tolist


def test_atomic_records_no_final_name_before_the_end(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    s = fake_session(tmp_path, clock)
    with s:
        clock.advance(1)
        s.step()
        assert list(tmp_path.glob("*" + RECORDS_SUFFIX)) == []
        (tmp,) = tmp_path.glob("*.tmp")
        assert tmp.name.endswith(RECORDS_SUFFIX + ".tmp")
    assert list(tmp_path.glob("*.tmp")) == []
    assert only_records(tmp_path).complete
