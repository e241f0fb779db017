"""User errors on every command: one line on stderr and status 2, never a traceback, nothing
written over an input or left half-written; and odd but valid input (names that are not UTF-8,
"$" in a name, a records file cut mid-line) handled, not failed on."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import msgspec
import pytest

from asynctrace.cli import main
from asynctrace.records import SessionHeader, StepRecord

TINY = {
    "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1,
         "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 10, "dur": 5, "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 20, "dur": 50,
         "args": {"stream": 7, "correlation": 1, "device": 0}},
    ],
    "deviceProperties": [{"id": 0, "name": "GPU"}],
}  # fmt: skip

OK_SCRIPT = "from pathlib import Path\nPath(__file__).with_name('ran').write_text('yes')\n"


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    p = tmp_path / "tiny.json"
    p.write_text(json.dumps(TINY))
    return p


def _one_line(capsys: pytest.CaptureFixture[str], command: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("\n") == 1, err
    assert err.startswith(f"asynctrace {command}: error: "), err
    return err


def _usage_error(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2
    return _one_line(capsys, args[0])


def _odd_name(tmp_path: Path, raw: bytes) -> Path:
    """A file name with bytes that are not UTF-8 (surrogate escapes in Python)."""
    p = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), raw)))
    try:
        p.write_text("")
    except (OSError, UnicodeEncodeError):
        pytest.skip("this file system takes only UTF-8 names")
    return p


# ------------------------------------------------------------------ paths the OS refuses


@pytest.mark.parametrize(
    "args",
    [
        ["report", "{long}"],
        ["plot", "{long}", "-o", "{out}.png"],
        ["annotate", "{long}", "-o", "{out}.json"],
        ["compare", "{long}", "{long}"],
        ["run", "{long}.py"],
    ],
)
def test_a_name_too_long_is_one_line(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long = str(tmp_path / ("a" * 300 + ".json"))
    argv = [a.format(long=long, out=tmp_path / "out") for a in args]
    assert main(argv) == 2
    assert "too long" in _one_line(capsys, args[0])


def test_compare_refuses_a_fifo_and_a_folder(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "a.json"
    os.mkfifo(fifo)  # read whole, it would block forever
    assert main(["compare", str(fifo), str(trace)]) == 2
    assert "not a regular file" in _one_line(capsys, "compare")
    assert main(["compare", str(tmp_path), str(trace)]) == 2
    assert "is a folder" in _one_line(capsys, "compare")


# ------------------------------------------------------------------ outputs


@pytest.mark.parametrize(
    ("command", "out_name"),
    [("annotate", "out.json.gz"), ("plot", "out.png"), ("report", "out.html")],
)
def test_an_output_that_cannot_be_written_is_one_line_and_leaves_nothing(
    command: str, out_name: str, trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def argv(out: Path) -> list[str]:
        return [command, str(trace), "--html" if command == "report" else "-o", str(out)]

    before = trace.read_bytes()
    assert main(argv(tmp_path / "missing" / out_name)) == 2
    assert "does not exist" in _one_line(capsys, command)
    (tmp_path / out_name).mkdir()
    assert main(argv(tmp_path / out_name)) == 2
    assert "is a folder" in _one_line(capsys, command)
    # the input itself: refused before anything is written over it
    same = trace.with_suffix(Path(out_name).suffix)
    os.link(trace, same)
    assert main(argv(same)) == 2
    assert "is the input" in _one_line(capsys, command)
    assert trace.read_bytes() == before
    assert list(tmp_path.glob("*.tmp")) == []


def test_an_output_that_is_no_regular_file_is_written_into_not_replaced(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `-o /dev/null` or `-o /dev/stdout`: a rename over it would replace the device (as root)
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as f:
            got.append(f.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert main(["annotate", str(trace), "-o", str(fifo)]) == 0
    reader.join(timeout=30)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert b"asynctrace" in got[0]
    assert list(tmp_path.glob("*.tmp")) == []


def test_run_check_and_demo_refuse_a_folder_they_cannot_write_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text(OK_SCRIPT)
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    for command in ("run", "check"):
        assert main([command, "--dir", str(not_a_folder), str(script)]) == 2
        assert "--dir" in _one_line(capsys, command)
        assert main([command, "--dir", str(not_a_folder / "sub"), str(script)]) == 2
        assert "cannot write there" in _one_line(capsys, command)
    assert not (tmp_path / "ran").exists()  # the script never started
    assert main(["demo", "--quick", "--out", str(not_a_folder)]) == 2
    assert "--out" in _one_line(capsys, "demo")


# ------------------------------------------------------------------ option values


@pytest.mark.parametrize(
    "args",
    [
        ["report", "t.json", "--queue-cap", "0"],
        ["report", "t.json", "--queue-cap", "-1"],
        ["report", "t.json", "--top", "-1"],
        ["report", "t.json", "--top", "abc"],
        ["compare", "a.json", "b.json", "--alpha", "nan"],
        ["compare", "a.json", "b.json", "--alpha", "0"],
        ["compare", "a.json", "b.json", "--alpha", "1"],
        ["compare", "a.json", "b.json", "--min-effect", "-0.1"],
        ["compare", "a.json", "b.json", "--min-effect", "inf"],
        ["plot", "t.json"],  # no -o
    ],
)
def test_bad_option_values_are_one_line(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert f"asynctrace {args[0]} --help" in _usage_error(args, capsys)


@pytest.mark.parametrize(
    "args",
    [
        ["plot", "t.json", "-o", "t.png", "--kind", "timeline"],
        ["report", "t.json", "--stpes"],
        ["compare", "a.json", "b.json", "extra.json"],
    ],
)
def test_an_unknown_option_is_said_by_its_command(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # argparse's top-level parser finds the leftovers; the command's own help is what to read
    err = _usage_error(args, capsys)
    assert "unrecognized arguments: " in err
    assert f"(see asynctrace {args[0]} --help)" in err


def test_a_capture_window_to_a_huge_step_is_not_built_step_by_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text(OK_SCRIPT)
    assert main(["run", "--dir", str(tmp_path), "--nsys-capture", f"1:{10**20}", str(script)]) == 0
    assert (tmp_path / "ran").exists()


# ------------------------------------------------------------------ run and check


def test_a_cuda_only_option_on_cpu_is_one_line_and_leaves_no_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    script = tmp_path / "train.py"
    script.write_text(OK_SCRIPT)
    for command in ("run", "check"):
        assert main([command, "--detect", "cuda", "--dir", str(tmp_path), str(script)]) == 2
        assert "needs a CUDA/ROCm device" in _one_line(capsys, command)
    assert not (tmp_path / "ran").exists()
    assert list(tmp_path.glob("*.records.jsonl*")) == []


def test_a_script_that_closes_stdout_still_gets_its_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "closes.py"
    script.write_text("import io, sys\nsys.stdout.close()\n")
    old = sys.stdout
    sys.stdout = io_out = open(os.devnull, "w")  # noqa: SIM115 - the script closes it
    try:
        assert main(["run", "--dir", str(tmp_path), str(script)]) == 0
    finally:
        sys.stdout = old
    assert io_out.closed
    assert "Traceback" not in capsys.readouterr().err


def test_run_and_check_a_script_whose_name_is_not_utf8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = _odd_name(tmp_path, b"tr\xffain.py")
    script.write_text("print('hi')\n")
    assert main(["run", "--json", "--dir", str(tmp_path), str(script)]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert report["source"]["session"]["name"] == "tr?ain"
    assert main(["check", "--json", "--dir", str(tmp_path), str(script)]) == 0
    assert json.loads(capsys.readouterr().out)["exit_code"] == 0


# ------------------------------------------------------------------ odd but valid input


def test_names_that_are_not_utf8_or_hold_dollars(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    odd = _odd_name(tmp_path, b"r\xff\xfe.json")
    odd.write_bytes(trace.read_bytes())
    assert main(["report", str(odd), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["source"]["path"].endswith("r??.json")
    assert main(["compare", str(odd), str(trace), "--json"]) == 0
    # (--json: the text report goes through the console script's stdout, checked below)
    assert main(["report", str(odd), "--json", "--html", str(tmp_path / "r.html")]) == 0
    assert "r??.json" in (tmp_path / "r.html").read_text()
    # the plot's title quotes the name: no matplotlib math ("$\\frac$"), no surrogates
    for name in (odd, tmp_path / "a$\\frac$b.json"):
        name.write_bytes(trace.read_bytes())
        assert main(["plot", str(name), "-o", str(tmp_path / "p.png")]) == 0
    capsys.readouterr()


def test_a_strict_locale_prints_a_name_that_is_not_utf8(trace: Path, tmp_path: Path) -> None:
    odd = _odd_name(tmp_path, b"r\xff.json")
    odd.write_bytes(trace.read_bytes())
    r = subprocess.run(
        [sys.executable, "-m", "asynctrace", "report", str(odd)],
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": "utf-8:strict"},
        timeout=120,
    )
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert b"r\xff.json" in r.stdout


def _records_lines() -> list[bytes]:
    header = SessionHeader(
        name="train",
        host="h",
        pid=1,
        device_kind="fake",
        device_name="Fake GPU",
        asynchronous=True,
        started_unix_ns=0,
    )
    steps = [StepRecord(step=i, start_ns=i * 10, frontend_ns=10) for i in range(4)]
    return [msgspec.json.encode(x) + b"\n" for x in (header, *steps)]


def test_records_cut_mid_line_or_left_as_tmp_read_as_a_killed_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = b"".join(_records_lines())
    cut = tmp_path / "train.records.jsonl"
    cut.write_bytes(data[:-20])  # the writer killed inside the last step's line
    assert main(["report", str(cut), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert (len(obj["steps"]), obj["source"]["complete"]) == (3, False)
    # what a killed session leaves: its .tmp, named on the command line
    tmp = tmp_path / "killed.records.jsonl.tmp"
    tmp.write_bytes(data)
    assert main(["report", str(tmp)]) == 0
    assert "incomplete" in capsys.readouterr().out
    assert main(["plot", str(tmp), "-o", str(tmp_path / "r.png"), "--view", "steps"]) == 0
    # garbage in a line that ends is still an error
    bad = tmp_path / "bad.records.jsonl"
    bad.write_bytes(data + b"{not json\n")
    assert main(["report", str(bad)]) == 2
    assert "line 6" in _one_line(capsys, "report")


def test_plot_says_which_steps_there_are(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "p.png")
    assert main(["plot", str(trace), "-o", out, "--view", "timeline", "--steps", "5:9"]) == 2
    assert "the steps are 0 to 0" in _one_line(capsys, "plot")
    empty = tmp_path / "empty.json"
    empty.write_text('{"traceEvents": []}')
    assert main(["plot", str(empty), "-o", out]) == 2
    assert "--steps" not in _one_line(capsys, "plot")


@pytest.mark.parametrize("command", ["run", "demo"])
@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("not-a-device", "--device not-a-device is not a torch device spec"),
        ("meta", "--device meta: device type 'meta' is not supported yet"),
        ("cuda", "--device cuda asked for, but torch "),
    ],
)
def test_a_bad_device_is_named_as_the_option_typed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, spec: str, said: str
) -> None:
    import torch

    if spec == "cuda" and torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    script = tmp_path / "train.py"
    script.write_text(OK_SCRIPT)
    out = tmp_path / "out"
    if command == "run":
        argv = ["run", "--device", spec, "--dir", str(out), str(script)]
    else:
        argv = ["demo", "--device", spec, "--quick", "--out", str(out)]
    assert main(argv) == 2
    err = _one_line(capsys, command)
    assert said in err
    assert "device=" not in err
    assert "device '" not in err
    if spec == "cuda":
        assert "pass --device cpu or leave --device out" in err
    assert not (tmp_path / "ran").exists()
    assert not out.exists()  # refused before anything was written
