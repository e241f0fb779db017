"""``asynctrace run script.py [args…]``: an unchanged script, stepped by its optimizer steps."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from asynctrace._commands.run import parse_step_range
from asynctrace.analysis.report import REPORT_SCHEMA_VERSION, Report
from asynctrace.capture import ranges
from asynctrace.cli import main
from asynctrace.errors import AsyncTraceError, AsyncTraceWarning
from asynctrace.records import read_records
from asynctrace.tracing import current_session

SCRIPT = """
import json, sys, time
import torch

out = sys.argv[1]
steps = int(sys.argv[2])
end = sys.argv[3] if len(sys.argv) > 3 else "ok"
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
stamps = [time.perf_counter_ns()]
for i in range(steps):
    time.sleep((2, 6, 4)[i % 3] / 1e3)
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    stamps.append(time.perf_counter_ns())
    opt.zero_grad()
with open(out, "w") as f:
    json.dump({"name": __name__, "argv": sys.argv, "stamps": stamps}, f)
print("script done")
if end == "exit3":
    sys.exit(3)
if end == "raise":
    raise ValueError("script failed")
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    p = tmp_path / "train.py"
    p.write_text(textwrap.dedent(SCRIPT))
    return p


def _records(d: Path) -> Path:
    (path,) = d.glob("*.records.jsonl")
    return path


def test_runs_the_script_as_main_with_a_step_per_optimizer_step(
    tmp_path: Path, script: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.json"
    d = tmp_path / "traces"
    argv_before = list(sys.argv)
    status = main(["run", "--dir", str(d), "--device", "cpu", str(script), str(out), "5"])
    assert status == 0
    assert sys.argv == argv_before
    assert current_session() is None
    assert ranges.open_ranges() == 0
    seen = json.loads(out.read_text())
    assert seen["name"] == "__main__"
    assert seen["argv"] == [str(script), str(out), "5"]

    stdout = capsys.readouterr().out
    assert "script done" in stdout
    assert ": 5 step(s), " in stdout
    rec = read_records(_records(d))
    assert rec.header.name == "train"
    assert rec.complete
    assert [s.step for s in rec.steps] == [0, 1, 2, 3, 4]
    # step 0 runs from the session's start to the first optimizer.step(); each later step from
    # one optimizer.step() to the next. The script's own stamps bracket each boundary: step i
    # ends inside iteration i's optimizer.step(), after stamps[i] and before stamps[i + 1]. So
    # the checks hold by order, however long the process is descheduled (they had 1 ms of
    # slack, and failed on a loaded machine).
    stamps = seen["stamps"]
    for i, s in enumerate(rec.steps):
        # iteration i's sleep lies wholly inside step i
        assert s.frontend_ns >= (2, 6, 4)[i % 3] * 1_000_000
        if i > 0:
            assert s.start_ns == rec.steps[i - 1].start_ns + rec.steps[i - 1].frontend_ns
            assert s.frontend_ns < stamps[i + 1] - stamps[i - 1], (i, s.frontend_ns, stamps)
    # steps 1..4 together: from inside iteration 0's optimizer.step() to inside iteration 4's
    between = sum(s.frontend_ns for s in rec.steps[1:])
    assert stamps[4] - stamps[1] < between < stamps[5] - stamps[0], (between, stamps)


def test_keeps_the_scripts_exit_status(
    tmp_path: Path, script: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "t"
    args = ["run", "--dir", str(d), "--device", "cpu", str(script), str(tmp_path / "o"), "2"]
    assert main([*args, "exit3"]) == 3
    captured = capsys.readouterr()
    assert ": 2 step(s), " in captured.out
    assert "status 3" in captured.err
    rec = read_records(_records(d))
    assert len(rec.steps) == 2
    assert rec.summary is not None
    assert rec.summary.error is None


def test_a_failing_script_exits_1_and_its_session_records_the_error(
    tmp_path: Path, script: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "t"
    args = ["run", "--dir", str(d), "--device", "cpu", str(script), str(tmp_path / "o"), "3"]
    assert main([*args, "raise"]) == 1
    captured = capsys.readouterr()
    assert "ValueError: script failed" in captured.err
    assert ": 3 step(s), " in captured.out
    rec = read_records(_records(d))
    assert len(rec.steps) == 3
    assert rec.summary is not None
    assert rec.summary.error == "ValueError: script failed"
    assert current_session() is None


def test_json_summary(tmp_path: Path, script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", "--json", "--name", "j", "--dir", str(tmp_path), "--device", "cpu"]
    assert main([*args, str(script), str(tmp_path / "o"), "4"]) == 0
    captured = capsys.readouterr()
    report = Report.from_json(captured.out)
    assert report.source.session is not None
    assert report.source.session.name == "j"
    assert report.source.events == 4
    assert "script done" in captured.err  # the script's prints keep stdout clean


def test_json_summary_is_the_report_of_the_records_it_wrote(
    tmp_path: Path, script: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["run", "--json", "--dir", str(tmp_path), "--device", "cpu"]
    assert main([*args, str(script), str(tmp_path / "o"), "4"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["schema_version"] == REPORT_SCHEMA_VERSION
    path = _records(tmp_path)
    assert run["source"]["path"] == str(path)
    # the report of that file, by the same command that reads any: the same object
    assert main(["report", "--json", str(path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert run == report
    assert run["source"]["events"] == len(run["steps"]) == 4
    assert run["figures"]["frontend_ns"]["count"] == 4


def test_nsys_capture_on_cpu_is_a_noop_with_a_warning(tmp_path: Path, script: Path) -> None:
    args = ["run", "--nsys-capture", "1:3", "--dir", str(tmp_path), "--device", "cpu"]
    with pytest.warns(AsyncTraceWarning, match="no CUDA/ROCm device"):
        assert main([*args, str(script), str(tmp_path / "o"), "4"]) == 0
    assert len(read_records(_records(tmp_path)).steps) == 4


def test_parse_step_range() -> None:
    assert parse_step_range("10:20") == range(10, 20)
    assert parse_step_range("7") == range(7, 8)
    for bad in ("a:b", "5:5", "-1:3", "3:1"):
        with pytest.raises(AsyncTraceError, match="nsys-capture"):
            parse_step_range(bad)


def test_missing_script_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(tmp_path / "nope.py")]) == 2
    assert "no such script" in capsys.readouterr().err


def test_console_exit_status_in_a_real_process(tmp_path: Path, script: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "asynctrace",
            "run",
            "--dir",
            str(tmp_path),
            "--device",
            "cpu",
            str(script),
            str(tmp_path / "o"),
            "2",
            "exit3",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr
    assert ": 2 step(s), " in proc.stdout


@pytest.mark.parametrize(
    ("after_script", "script_gets"),
    [
        (["--", "--json"], ["--json"]),
        # only the first `--` separates: argparse took one, then run dropped the script's own
        (["--", "--", "x"], ["--", "x"]),
        (["a", "--", "b"], ["a", "--", "b"]),
    ],
)
def test_a_double_dash_right_after_the_script_is_dropped_and_the_rest_kept(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    after_script: list[str],
    script_gets: list[str],
) -> None:
    script = tmp_path / "argv.py"
    script.write_text("import sys\nprint('argv', sys.argv[1:])\n")
    assert main(["run", "--dir", str(tmp_path), "--device", "cpu", str(script), *after_script]) == 0
    out = capsys.readouterr().out
    assert f"argv {script_gets!r}" in out
    assert not out.startswith("{")  # a --json after `--` is the script's


def test_a_run_without_optimizer_steps_says_what_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = tmp_path / "loop.py"
    plain.write_text("import torch\nfor _ in range(3):\n    torch.ones(2).sum()\n")
    assert main(["run", "--dir", str(tmp_path), "--device", "cpu", str(plain)]) == 0
    # the hint follows the summary's "no steps" (rich may wrap it: joined into one line)
    out = " ".join(capsys.readouterr().out.split())
    note = out[out.index("no steps: ") :]
    # a second asynctrace.trace() under run fails (sessions do not nest): not what to suggest
    assert "use asynctrace.trace() in the script" not in note
    assert "asynctrace.current_session().step()" in note
    assert "plain python" in note

    # what the note suggests works under run, and without it
    stepped = tmp_path / "stepped.py"
    stepped.write_text(
        textwrap.dedent(
            """\
            import asynctrace, torch
            for _ in range(3):
                torch.ones(2).sum()
                session = asynctrace.current_session()
                if session is not None:
                    session.step()
            """
        )
    )
    assert main(["run", "--json", "--dir", str(tmp_path), "--device", "cpu", str(stepped)]) == 0
    assert Report.from_json(capsys.readouterr().out).source.events == 3
    subprocess.run([sys.executable, str(stepped)], check=True, timeout=120)


# ------------------------------------------------------- as `python script.py args` would run it
def _run(tmp_path: Path, script: str | Path, *args: str, opts: tuple[str, ...] = ()) -> int:
    return main(["run", "--dir", str(tmp_path / "t"), "--device", "cpu", *opts, str(script), *args])


def test_the_script_sees_what_python_gives_its_main(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = tmp_path / "src"
    real.mkdir()
    (real / "sibling.py").write_text("WHERE = 'src'\n")
    (real / "main.py").write_text(
        textwrap.dedent(
            """\
            import json, sys
            import sibling
            print(json.dumps({
                "argv": sys.argv, "file": __file__, "path0": sys.path[0], "pkg": __package__,
                "builtins_is_module": type(__builtins__).__name__ == "module",
                "loader": type(__loader__).__name__, "sibling": sibling.WHERE,
                "main_file": sys.modules["__main__"].__file__,
            }))
            """
        )
    )
    linked = tmp_path / "bin"
    linked.mkdir()
    (linked / "entry.py").symlink_to(real / "main.py")
    monkeypatch.chdir(tmp_path)
    python = subprocess.run(
        [sys.executable, "bin/entry.py", "x"], capture_output=True, text=True, check=True
    )
    expected = json.loads(python.stdout)
    assert _run(tmp_path, "bin/entry.py", "x") == 0
    seen = json.loads(capsys.readouterr().out.splitlines()[0])
    # argv[0] as typed, __file__ through the link, sys.path[0] where the link leads
    assert seen == expected
    assert seen["argv"] == ["bin/entry.py", "x"]
    assert seen["file"] == str(tmp_path / "bin" / "entry.py")
    assert seen["path0"] == str(real)


def test_an_uncaught_exception_shows_the_scripts_frames_through_its_excepthook(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "fail.py"
    script.write_text(
        textwrap.dedent(
            """\
            import sys, traceback
            def hook(kind, value, tb):
                print("HOOK", kind.__name__, file=sys.stderr)
                traceback.print_exception(kind, value, tb)
            sys.excepthook = hook  # as rich.traceback.install() or a logger does
            def fail():
                raise ValueError("boom")
            fail()
            """
        )
    )
    assert _run(tmp_path, script) == 1
    err = capsys.readouterr().err
    assert "HOOK ValueError" in err
    assert "ValueError: boom" in err
    frames = [line for line in err.splitlines() if line.lstrip().startswith("File ")]
    # only the script's frames, as python shows them: not the runner's, not runpy's
    assert [f.split(",")[0].strip() for f in frames] == [f'File "{script}"'] * 2


def test_a_syntax_error_is_pythons_own_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "bad.py"
    script.write_text("print('hi'\n")
    assert _run(tmp_path, script) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.startswith(f'  File "{script}", line 1\n')
    assert "SyntaxError: '(' was never closed" in err


def test_ctrl_c_shows_where_and_still_prints_the_summary(
    tmp_path: Path, script: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    interrupted = tmp_path / "interrupted.py"
    interrupted.write_text(
        script.read_text().replace(
            'if end == "raise":',
            'if end == "ctrl-c":\n    raise KeyboardInterrupt\nif end == "raise":',
        )
    )
    assert _run(tmp_path, interrupted, str(tmp_path / "o"), "3", "ctrl-c") == 130
    captured = capsys.readouterr()
    assert "KeyboardInterrupt" in captured.err
    assert f'File "{interrupted}"' in captured.err
    assert ": 3 step(s), " in captured.out
    rec = read_records(_records(tmp_path / "t"))
    assert rec.complete
    assert rec.summary is not None
    assert rec.summary.error == "KeyboardInterrupt"


@pytest.mark.parametrize(("code", "status"), [("256 + 7", 7), ("-1", 255), ("True", 1)])
def test_the_exit_status_is_the_one_the_process_gets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], code: str, status: int
) -> None:
    script = tmp_path / "exits.py"
    script.write_text(f"import sys\nsys.exit({code})\n")
    assert _run(tmp_path, script) == status
    assert f"the script exited with status {status}\n" in capsys.readouterr().err


def test_records_are_written_when_the_script_changes_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "hydra.py"
    script.write_text(
        textwrap.dedent(
            """\
            import os, torch
            os.makedirs("outputs/run1")
            os.chdir("outputs/run1")  # as Hydra does
            model = torch.nn.Linear(4, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(3):
                model(torch.randn(8, 4)).sum().backward()
                opt.step()
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--dir", "traces", "--device", "cpu", str(script)]) == 0
    out = capsys.readouterr().out
    path = _records(tmp_path / "traces")
    assert out.startswith(f"traces/{path.name} (")
    rec = read_records(path)
    assert rec.complete
    assert len(rec.steps) == 3


def test_json_stdout_is_only_the_summary_whatever_writes_to_descriptor_1(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "noisy.py"
    script.write_text(
        textwrap.dedent(
            """\
            import os, subprocess, sys
            print("print")
            print("dunder", file=sys.__stdout__, flush=True)
            os.write(1, b"fd 1\\n")
            subprocess.run([sys.executable, "-c", "print('child')"], check=True)
            """
        )
    )
    assert _run(tmp_path, script, opts=("--json",)) == 0
    captured = capfd.readouterr()
    assert Path(Report.from_json(captured.out).source.path).name.startswith("noisy.")
    for line in ("print", "dunder", "fd 1", "child"):
        assert f"{line}\n" in captured.err


def test_a_folder_with_a_main_runs_as_python_runs_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "__main__.py").write_text("import sys\nprint('app', __name__, sys.argv[1:])\n")
    assert _run(tmp_path, app, "a") == 0
    assert "app __main__ ['a']" in capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    assert _run(tmp_path, tmp_path / "empty") == 2
    assert "without a __main__.py" in capsys.readouterr().err


LATE = """
import atexit, pickle, sys, threading, time

class Checkpoint:
    pass

def save(when):
    print(when, type(pickle.loads(pickle.dumps(Checkpoint()))).__name__, sys.argv[1:], flush=True)

def background():
    time.sleep(0.5)  # still running when the script's last line is done
    save("thread")

threading.Thread(target=background).start()
atexit.register(save, "atexit")
"""


def test_what_runs_after_the_last_line_still_finds_the_scripts_main(tmp_path: Path) -> None:
    script = tmp_path / "late.py"
    script.write_text(LATE)
    args = ["run", "--dir", str(tmp_path), "--device", "cpu", str(script), "a"]
    python = subprocess.run(
        [sys.executable, str(script), "a"], capture_output=True, text=True, timeout=120
    )
    proc = subprocess.run(
        [sys.executable, "-m", "asynctrace", *args], capture_output=True, text=True, timeout=120
    )
    assert python.returncode == proc.returncode == 0, proc.stderr
    for line in python.stdout.splitlines():
        assert line in proc.stdout.splitlines()
    assert "thread Checkpoint ['a']" in proc.stdout
    assert "atexit Checkpoint ['a']" in proc.stdout


def _package(tmp_path: Path) -> Path:
    """``pkg`` in ``tmp_path``: ``pkg.train`` (a relative import, optimizer steps, its view of
    ``__main__``) and ``pkg/__main__.py`` running it."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "settings.py").write_text("STEPS = 3\n")
    (pkg / "train.py").write_text(
        textwrap.dedent(
            """\
            import json, sys
            import torch
            from .settings import STEPS

            model = torch.nn.Linear(4, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(STEPS):
                model(torch.randn(8, 4)).sum().backward()
                opt.step()
            main = sys.modules["__main__"]
            print(json.dumps({
                "argv": sys.argv, "name": main.__name__, "spec": main.__spec__.name,
                "path0": sys.path[0], "pkg": main.__package__,
            }))
            if "--fail" in sys.argv:
                sys.exit(4)
            """
        )
    )
    (pkg / "__main__.py").write_text("from . import train\n")
    return pkg


def test_dash_m_runs_a_module_as_python_dash_m_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pkg = _package(tmp_path)
    monkeypatch.chdir(tmp_path)
    python = subprocess.run(
        [sys.executable, "-m", "pkg.train", "--lr", "0.1"],
        capture_output=True,
        text=True,
        check=True,
    )
    expected = json.loads(python.stdout)
    path_before = list(sys.path)

    status = main(["run", "--dir", "traces", "-m", "pkg.train", "--lr", "0.1"])
    assert status == 0
    out = capsys.readouterr().out
    seen = json.loads(out.splitlines()[0])
    assert seen == expected
    assert seen["argv"] == [str(pkg / "train.py"), "--lr", "0.1"]
    assert seen["path0"] == str(tmp_path)
    assert ": 3 step(s), " in out
    rec = read_records(_records(tmp_path / "traces"))
    assert rec.header.name == "train"
    assert len(rec.steps) == 3
    assert sys.path == path_before
    assert not {"pkg", "pkg.train", "pkg.settings"} & set(sys.modules)
    assert current_session() is None


def test_dash_m_runs_a_packages_main_named_after_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pkg = _package(tmp_path)
    monkeypatch.chdir(tmp_path)
    # everything after -m NAME is the module's, --json and a -- included
    status = main(["run", "--dir", "traces", "-m", "pkg", "--json", "--", "--fail"])
    assert status == 4
    captured = capsys.readouterr()
    seen = json.loads(captured.out.splitlines()[0])
    assert seen["argv"] == [str(pkg / "__main__.py"), "--json", "--", "--fail"]
    assert seen["spec"] == "pkg.__main__"
    assert ": 3 step(s), " in captured.out
    assert "the script exited with status 4" in captured.err
    assert read_records(_records(tmp_path / "traces")).header.name == "pkg"


def test_a_missing_module_is_a_one_line_error_before_any_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _package(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--dir", "traces", "-m", "pkg.nope", "x"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"asynctrace run: error: -m pkg.nope: no such module (none importable from {tmp_path} "
        "or sys.path)\n"
    )
    assert not (tmp_path / "traces").exists()
    assert "pkg" not in sys.modules


def test_neither_script_nor_module_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["run", "--json"])
    assert e.value.code == 2
    assert "give a script to run, or -m MODULE" in capsys.readouterr().err
