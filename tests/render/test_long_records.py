"""Long records files are drawn from their downsampled series: in seconds, and the picture
says that it is downsampled and by how much."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from asynctrace.analysis.report import analyze_detail
from asynctrace.records import SessionHeader, SessionSummary, StepRecord, read_records

pytest.importorskip("matplotlib")


def _write(path: Path, n: int) -> Path:
    enc = msgspec.json.Encoder()
    header = SessionHeader(
        name="long", host="h", pid=1, device_kind="fake", device_name="Fake GPU",
        asynchronous=True, started_unix_ns=0,
    )  # fmt: skip
    with open(path, "wb") as f:
        f.write(enc.encode(header) + b"\n")
        t = 0
        for i in range(n):
            fe = 20_000 + (i * 7919) % 5000 + (400_000 if i % 997 == 0 else 0)
            step = StepRecord(
                step=i, start_ns=t, frontend_ns=fe, data_wait_ns=i % 1500,
                device_ns=18_000 + i % 4000, run_ahead_ns=(i * 31) % 100_000,
                in_flight=i % 4, sync_count=i % 2, sync_wait_ns=(i % 2) * 3000,
            )  # fmt: skip
            f.write(enc.encode(step) + b"\n")
            t += fe
        f.write(enc.encode(SessionSummary(steps=n, wall_ns=t)) + b"\n")
    return path


def test_the_picture_of_a_long_run_says_it_is_downsampled(tmp_path: Path) -> None:
    from asynctrace.render import plot

    rec = analyze_detail(read_records(_write(tmp_path / "a.records.jsonl", 5000)))
    fig = plot.overview_figure(rec)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    binned = [t for t in titles if "downsampled: 5,000 steps in 1,667 bins of 3" in t]
    assert len(binned) == 2, titles  # the step bars and the run-ahead
    short = analyze_detail(read_records(_write(tmp_path / "b.records.jsonl", 50)))
    assert not any("downsampled" in ax.get_title() for ax in plot.overview_figure(short).axes)


def test_the_page_of_a_long_run_shows_its_first_steps_and_downsampled_pictures(
    tmp_path: Path,
) -> None:
    from asynctrace.analysis.report import analyze_detail
    from asynctrace.render.html import report_html

    page = report_html(analyze_detail(read_records(_write(tmp_path / "a.records.jsonl", 5000))))
    assert "<h2>Steps (5000, from the session&#x27;s records)</h2>" in page
    assert '<p class="meta">first 200 steps shown</p>' in page
    assert '<tr><td class="l">199</td>' in page
    assert '<tr><td class="l">200</td>' not in page
    # the pictures are drawn from the binned series, and say so
    assert "downsampled: 5,000 steps in 1,667 bins of 3" in page
    assert len(page) < 3_000_000


#: runs its arguments as a command and prints that command's peak RSS (KiB) and CPU seconds
_PEAK_OF = (
    "import resource, subprocess, sys; "
    "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
    "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
    "print(u.ru_maxrss, u.ru_utime + u.ru_stime); sys.exit(code)"
)


@pytest.mark.slow
def test_200k_steps_plot_and_render_as_html_in_bounded_time(tmp_path: Path) -> None:
    path = _write(tmp_path / "long.records.jsonl", 200_000)
    for args in (
        ["plot", str(path), "-o", str(tmp_path / "s.png"), "--view", "steps"],
        ["plot", str(path), "-o", str(tmp_path / "o.svg")],
        ["report", str(path), "--html", str(tmp_path / "r.html")],
    ):
        # the command's own peak, from a wrapper of its own: RUSAGE_CHILDREN of this process
        # is the largest child of the whole test run (a TensorBoard server, a Dask worker)
        r = subprocess.run(
            [sys.executable, "-c", _PEAK_OF, sys.executable, "-m", "asynctrace", *args],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr
        # its CPU time, not the wall clock a loaded machine stretches. Generous: ~3 s here on an
        # idle machine (was: minutes and ~1 GB at 20k steps)
        peak, cpu = r.stdout.split()[-2:]
        assert float(cpu) < 60, (args, cpu)
        peak_kib = int(peak)
        assert peak_kib < 1_000_000, (args, peak_kib)
    assert "downsampled" in (tmp_path / "r.html").read_text()
