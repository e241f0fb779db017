from __future__ import annotations

from pathlib import Path

import asynctrace
from asynctrace._frames import _OWN_MODULES
from asynctrace.analysis.steps import step_windows
from asynctrace.analysis.syncs import find_syncs, is_user_frame, site_of
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.model import RangeKind, RuntimeKind
from tests.analysis._traces import launches_trace


def test_device_sync_records_not_counted_again() -> None:
    s = find_syncs(launches_trace())
    assert (s.count, s.total_ns, s.device_records) == (1, 100, 1)
    (site,) = s.sites
    assert (site.site, site.op, site.count, site.total_ns) == ("", "cudaStreamSynchronize", 1, 100)


def test_innermost_user_frame_on_same_thread() -> None:
    b = TraceBuilder()
    b.range("ProfilerStep#7", 0, 1000, kind=RangeKind.STEP, step=7)
    b.python_frame("train.py(10): main", 0, 1000, tid=1)
    b.python_frame("train.py(20): step", 100, 400, tid=1)
    b.python_frame("model.py(5): loss", 100, 300, tid=1)  # same start: shorter one is inner
    b.python_frame("/v/site-packages/torch/cuda/__init__.py(800): synchronize", 200, 100, tid=1)
    b.python_frame("<built-in method item of Tensor object at 0x1>", 205, 90, tid=1)
    b.python_frame("other.py(1): elsewhere", 0, 1000, tid=2)
    b.runtime("cudaDeviceSynchronize", 210, 80, kind=RuntimeKind.SYNC, tid=1)
    b.runtime("cudaDeviceSynchronize", 450, 20, kind=RuntimeKind.SYNC, tid=1)
    b.runtime("cudaMemcpy", 600, 30, kind=RuntimeKind.BLOCKING_MEMCPY, tid=1)
    b.runtime("cudaStreamSynchronize", 220, 5, kind=RuntimeKind.SYNC, tid=3)
    b.runtime("cudaStreamSynchronize", 2000, 5, kind=RuntimeKind.SYNC, tid=3)
    t = b.build()
    s = find_syncs(t, windows=step_windows(t))
    sites = [(x.site, x.op, x.count, x.total_ns, x.steps) for x in s.sites]
    assert sites == [
        ("model.py:5", "cudaDeviceSynchronize", 1, 80, 1),
        ("train.py:10", "cudaMemcpy", 1, 30, 1),
        ("train.py:20", "cudaDeviceSynchronize", 1, 20, 1),
        ("", "cudaStreamSynchronize", 2, 10, 1),
    ]
    assert [c.step for c in s.calls] == [7, 7, 7, 7, None]
    assert (s.count, s.total_ns) == (5, 140)


def test_frame_helpers() -> None:
    assert site_of("a/b.py(12): f") == "a/b.py:12"
    assert site_of("<built-in function x>") == "<built-in function x>"
    assert is_user_frame("train.py(1): f")
    assert not is_user_frame("/usr/lib/python3/site-packages/x.py(1): f")
    assert not is_user_frame("torch/nn/modules/module.py(1): _call_impl")
    assert not is_user_frame("<built-in method item>")
    assert not is_user_frame("/src/asynctrace/capture/session.py(3): step")


def test_user_frames_by_whole_folder_names() -> None:
    # folders that merely contain "torch" or "asynctrace" are the user's own
    assert is_user_frame("/home/u/pytorch/train.py(12): main")
    assert is_user_frame("/home/u/asynctrace_runs/train.py(12): main")
    assert is_user_frame("/home/u/asynctrace/train.py(12): main")
    assert is_user_frame("torch_utils.py(3): f")
    assert is_user_frame("train.py(3): torch_step_for_asynctrace")
    assert is_user_frame("C:\\work\\mytorch\\train.py(3): f")
    assert is_user_frame("<ipython-input-3-0123abcd>(5): <module>")
    # torch, installed packages, asynctrace's own modules, the interpreter's
    assert not is_user_frame("C:\\py\\Lib\\site-packages\\torch\\nn\\functional.py(3): f")
    assert not is_user_frame("/opt/conda/lib/python3.11/dist-packages/x.py(1): f")
    assert not is_user_frame("/src/torch/_tensor.py(1): item")
    assert not is_user_frame("asynctrace/capture/session.py(3): step")
    assert not is_user_frame("/x/asynctrace/cli.py(3): main")
    assert not is_user_frame("<frozen runpy>(88): _run_code")


def test_own_modules_list_the_package() -> None:
    pkg = Path(asynctrace.__file__).parent
    names = {p.name for p in pkg.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert names == _OWN_MODULES
