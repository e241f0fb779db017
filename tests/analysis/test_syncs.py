from __future__ import annotations

import os
from pathlib import Path

import asynctrace
from asynctrace._frames import _OWN_MODULES, is_standing_in_for_user, launchers
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


def test_enclosing_frame_thousands_of_frames_back() -> None:
    # the loop's frame starts before 5000 finished sibling calls: found through the block
    # maxima, not only among the frames just before the sync
    b = TraceBuilder()
    b.python_frame("train.py(3): loop", 0, 100_000, tid=1)
    for k in range(5000):
        b.python_frame(f"model.py({k % 7 + 1}): forward", 10 + 10 * k, 5, tid=1)
    b.python_frame("model.py(99): tail", 50_100, 10, tid=1)  # ended before the sync
    b.runtime("cudaDeviceSynchronize", 60_000, 50, kind=RuntimeKind.SYNC, tid=1)
    b.runtime("cudaDeviceSynchronize", 49_993, 1, kind=RuntimeKind.SYNC, tid=1)  # in a sibling
    b.runtime("cudaDeviceSynchronize", 100_001, 1, kind=RuntimeKind.SYNC, tid=1)  # after all
    s = find_syncs(b.build())
    assert [c.site for c in s.calls] == ["model.py:1", "train.py:3", ""]  # 4998 % 7 + 1 = 1


def test_frames_with_the_same_span_resolve_whatever_the_event_order() -> None:
    # two user frames with identical start and end cannot be told apart by time; the site must
    # not depend on which came first in the file
    sites = set()
    for order in ([0, 1, 2], [2, 1, 0], [1, 0, 2]):
        b = TraceBuilder()
        frames = [
            ("train.py(10): main", 0, 1000),
            ("a.py(1): wrapper", 100, 500),
            ("b.py(2): wrapped", 100, 500),
        ]
        for k in order:
            name, start, dur = frames[k]
            b.python_frame(name, start, dur, tid=1)
        b.runtime("cudaDeviceSynchronize", 200, 10, kind=RuntimeKind.SYNC, tid=1)
        sites.add(find_syncs(b.build()).calls[0].site)
    assert sites == {"b.py:2"}


def test_the_commands_register_their_frames() -> None:
    # the session's sync locator knows no path of the command line: the commands say which of
    # their files launch a user's script and which stand for the user's own loop
    import asynctrace._commands
    import asynctrace.cli

    commands = Path(asynctrace._commands.__file__).parent
    assert str(commands) + os.sep in launchers()
    assert asynctrace.cli.__file__ in launchers()
    assert is_standing_in_for_user(str(commands / "_demo_loops.py"))
    assert not is_standing_in_for_user(str(commands / "run.py"))
