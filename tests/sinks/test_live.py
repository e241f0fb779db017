"""``trace(live=True)``'s status line on a terminal: kept to the terminal's width, and drawn
again below the script's own output instead of running into it."""

from __future__ import annotations

import io
import os
import pty
import sys
from pathlib import Path

import pytest

from asynctrace.records import StepRecord
from asynctrace.sinks.live import LiveStatus

#: the checkout under test (the child must import this asynctrace, not an installed one)
ROOT = Path(__file__).resolve().parents[2]


class FakeTty(io.StringIO):
    """A terminal as far as the status line can tell: a tty, no file descriptor."""

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        raise io.UnsupportedOperation("no descriptor")


def screen(raw: str) -> list[str]:
    """What a terminal shows for ``raw``: carriage return, erase-to-end-of-line, newline."""
    lines = [""]
    col = 0
    i = 0
    while i < len(raw):
        if raw.startswith("\x1b[K", i):
            lines[-1] = lines[-1][:col]
            i += 3
            continue
        ch = raw[i]
        if ch == "\r":
            col = 0
        elif ch == "\n":
            lines.append("")
            col = 0
        else:
            cur = lines[-1]
            lines[-1] = cur[:col] + ch + cur[col + 1 :]
            col += 1
        i += 1
    return lines


def _rec(step: int) -> StepRecord:
    return StepRecord(step=step, start_ns=0, frontend_ns=1_500_000, device_ns=1_400_000)


def test_the_line_keeps_to_the_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    tty = FakeTty()
    live = LiveStatus("train", stream=tty)
    live.start()
    try:
        live.update(_rec(3), now_ns=0)
    finally:
        live.stop()
    shown = [line for line in screen(tty.getvalue().replace("\x1b[K", "")) if line]
    # before: rich drew the whole ~90-column line, wrapped at 80 columns
    assert shown == [live.line(_rec(3))[:39]]
    assert "\n" not in tty.getvalue()


def test_the_scripts_prints_go_on_their_own_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    tty = FakeTty()
    monkeypatch.setattr(sys, "stdout", tty)
    monkeypatch.setattr(sys, "stderr", tty)
    live = LiveStatus("train", stream=tty)
    live.start()
    try:
        live.update(_rec(1), now_ns=0)
        print("tensor(2.3089)")
        print("half a line", end="")
        live.update(_rec(2), now_ns=2_000_000_000)  # the cursor is mid-line: not drawn
        print(" and its end")
        live.update(_rec(3), now_ns=4_000_000_000)
        shown = screen(tty.getvalue())
    finally:
        live.stop()
    # before: "… syncs 0tensor(2.3089)"
    assert shown == [
        "tensor(2.3089)",
        "half a line and its end",
        live.line(_rec(3)),
    ]
    # stop() clears the line and gives the streams back
    assert screen(tty.getvalue())[-1] == ""
    assert sys.stdout is tty
    assert sys.stderr is tty


def test_stop_leaves_a_stream_the_script_set_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    tty = FakeTty()
    monkeypatch.setattr(sys, "stdout", tty)
    live = LiveStatus("train", stream=tty)
    live.start()
    theirs = io.StringIO()
    sys.stdout = theirs
    live.stop()
    assert sys.stdout is theirs


def test_on_a_real_pty(tmp_path: Path) -> None:
    """The session end to end in a child on a pseudo-terminal of 60 columns."""
    script = tmp_path / "live.py"
    script.write_text(
        "import asynctrace, torch\n"
        f"with asynctrace.trace('p', dir={str(tmp_path)!r}, live=True, print_summary=False)"
        " as s:\n"
        "    for i in s.steps(range(3)):\n"
        "        asynctrace.sinks.live._REFRESH_NS = 0\n"
        "        print(torch.tensor(2.3089))\n"
    )
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        import fcntl
        import struct
        import termios

        fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 60, 0, 0))
        env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="", TERM="xterm")
        os.execve(sys.executable, [sys.executable, str(script)], env)
    raw = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        raw += chunk
    os.waitpid(pid, 0)
    text = raw.decode().replace("\r\n", "\n")
    shown = screen(text)
    assert shown.count("tensor(2.3089)") == 3, shown
    assert all(len(line) < 60 for line in shown)
    assert not any("syncs" in line and "tensor" in line for line in shown)
