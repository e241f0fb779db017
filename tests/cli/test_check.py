"""``asynctrace check``: a script run unchanged, its sync sites, headline and exit status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from asynctrace._commands.check import split_trailing_options
from asynctrace.cli import main

TRAIN = """\
import sys
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(8, 4), torch.randn(8, 1)
for step in range({steps}):
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    logged = loss.item()  # hidden sync
    {extra}
"""


def write_script(tmp_path: Path, *, steps: int = 10, extra: str = "pass") -> Path:
    path = tmp_path / "train.py"
    path.write_text(TRAIN.format(steps=steps, extra=extra))
    return path


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def check(tmp_path: Path, *argv: str) -> int:
    return main(["check", "--dir", str(tmp_path / "records"), *argv])


def test_a_hidden_item_per_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = write_script(tmp_path)
    assert check(tmp_path, str(script)) == 0
    out = capsys.readouterr().out
    site = f"{script}:{line_of(script, 'loss.item()')}"
    assert "10 steps (one per optimizer.step())" in out
    # the sync after the last optimizer.step() falls in no complete step, so 10 over 10 steps
    assert f"  {site}       10      1.00  aten::_local_scalar_dense" in out
    # the headline, right under the title, as the report of the records has it
    assert out.splitlines()[1].startswith("cpu-synchronous: the CPU runs every op synchronously")
    assert "verdict" not in out
    assert "records: " in out


def test_two_syncs_per_step_is_over_synchronized(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = write_script(tmp_path, extra="if loss > 1e9: print('diverged')")
    assert check(tmp_path, str(script), "--json") == 0
    result = json.loads(capsys.readouterr().out)
    item = f"{script}:{line_of(script, 'loss.item()')}"
    branch = f"{script}:{line_of(script, 'if loss > 1e9')}"
    assert [(s["site"], s["op"], s["count"]) for s in result["sync_sites"]] == [
        (item, "aten::_local_scalar_dense", 10),
        (branch, "aten::_local_scalar_dense", 10),
    ]
    # the report's diagnosis: on the CPU the headline is cpu-synchronous, the syncs follow
    codes = [f["code"] for f in result["diagnosis"]]
    assert codes[0] == "cpu-synchronous"
    (over,) = [f for f in result["diagnosis"] if f["code"] == "over-synchronized"]
    assert over["message"].startswith(
        f"over-synchronized: 2 syncs per step at {item} (aten::_local_scalar_dense ×10), "
        f"{branch} (aten::_local_scalar_dense ×10)"
    )
    assert "verdict" not in result
    assert result["max_syncs_in_a_step"] == 2
    assert result["script_exit_code"] == 0
    assert result["schema_version"] == 3
    assert next(iter(result)) == "schema_version"  # first, as in report --json


@pytest.mark.parametrize(("budget", "status"), [("0", 1), ("1", 0)])
def test_budget_sets_the_exit_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], budget: str, status: int
) -> None:
    script = write_script(tmp_path)
    # the spec's form: options after the script are still ours
    assert check(tmp_path, str(script), "--max-syncs-per-step", budget) == status
    out = capsys.readouterr().out
    if status:
        assert "budget exceeded: 9 of 10 step(s) had more than 0 sync(s)" in out
    else:
        assert "budget kept: 0 of 10 step(s)" in out


def test_script_arguments_and_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "args.py"
    script.write_text(
        textwrap.dedent(
            """\
            import sys
            print("argv", sys.argv[1:], __name__)
            sys.exit(int(sys.argv[1]))
            """
        )
    )
    assert check(tmp_path, str(script), "3", "--json", "--", "--json") == 3
    captured = capsys.readouterr()
    # with --json the script's prints go to stderr, so stdout stays one JSON document
    assert "argv ['3', '--json'] __main__" in captured.err
    result = json.loads(captured.out)
    assert (result["exit_code"], result["steps"]) == (3, 0)
    # no step: the run is judged as one; the CPU note is the verdict's, so check leaves it out
    assert result["notes"] == [
        {
            "code": "whole-run-one-step",
            "text": "no optimizer.step() completed a step: the whole run is judged as one step",
        }
    ]
    assert sys.argv[0] != str(script)


def test_a_failing_script_keeps_its_status_and_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "boom.py"
    script.write_text("raise RuntimeError('boom')\n")
    assert check(tmp_path, str(script)) == 1
    captured = capsys.readouterr()
    assert "RuntimeError: boom" in captured.err
    assert "the script exited with status 1" in captured.out


def test_missing_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check(tmp_path, str(tmp_path / "nope.py")) == 2
    assert "no such script" in capsys.readouterr().err


def test_split_trailing_options() -> None:
    assert split_trailing_options(["a", "--json", "--max-syncs-per-step=2", "b"]) == (
        ["a", "b"],
        2,
        True,
    )
    assert split_trailing_options(["--", "--json"]) == (["--json"], None, False)


def test_python_dash_m(tmp_path: Path) -> None:
    script = write_script(tmp_path, steps=3)
    proc = subprocess.run(
        [sys.executable, "-m", "asynctrace", "check", "--dir", str(tmp_path / "r"), str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "error"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"{script}:{line_of(script, 'loss.item()')}" in proc.stdout


ARGV_SCRIPT = "import sys\nprint('argv', sys.argv[1:])\n"


_OURS = ["--json", "--max-syncs-per-step", "0"]


@pytest.mark.parametrize(
    ("after_script", "script_gets", "as_json"),
    [
        # a `--` right after the script: argparse used to swallow it, and check took --json
        (["--", *_OURS], _OURS, False),
        (["--", "--", "x"], ["--", "x"], False),
        (["a", "--json", "--", "--json"], ["a", "--json"], True),
        (["--json", "a"], ["a"], True),
    ],
)
def test_everything_after_the_first_double_dash_goes_to_the_script(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    after_script: list[str],
    script_gets: list[str],
    as_json: bool,
) -> None:
    script = tmp_path / "argv.py"
    script.write_text(ARGV_SCRIPT)
    assert check(tmp_path, str(script), *after_script) == 0
    captured = capsys.readouterr()
    # with --json the script's prints go to stderr
    assert f"argv {script_gets!r}" in (captured.err if as_json else captured.out)
    if as_json:
        assert json.loads(captured.out)["max_syncs_per_step"] is None
    else:
        assert "budget" not in captured.out


def test_the_headline_is_the_one_the_report_of_the_records_shows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from asynctrace.analysis.report import analyze
    from asynctrace.files.sources import load_source
    from asynctrace.render.diagnosis import diagnosis_text

    script = write_script(tmp_path, extra="if loss > 1e9: print('diverged')")
    assert check(tmp_path, str(script)) == 0
    out = capsys.readouterr().out.splitlines()
    (records,) = (tmp_path / "records").glob("*.records.jsonl")
    shown = diagnosis_text(analyze(load_source(records)).diagnosis)
    # one headline: the report's diagnosis, word for word, under the title and nothing else
    assert out[1 : 1 + len(shown)] == shown
    assert out[1 + len(shown)] == "sync sites:"
    assert not any(line.startswith(("verdict:", "  also:")) for line in out)


def test_reported_stacks_start_at_the_script_and_hold_no_asynctrace_frame(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import asynctrace

    script = tmp_path / "reads.py"
    script.write_text(
        textwrap.dedent(
            """\
            import torch

            def read(t):
                return t.item()  # sync

            read(torch.ones(()))  # call
            """
        )
    )
    assert check(tmp_path, str(script), "--json") == 0
    (site,) = json.loads(capsys.readouterr().out)["sync_sites"]
    assert site["site"] == f"{script}:{line_of(script, '# sync')}"
    # the user's two frames, not runpy's nor those of the command that ran the script
    assert site["stack"] == [
        f"{script}:{line_of(script, '# sync')} in read",
        f"{script}:{line_of(script, '# call')} in <module>",
    ]
    package = Path(asynctrace.__file__).resolve().parent
    for frame in site["stack"]:
        path = Path(frame.rpartition(" in ")[0].rpartition(":")[0]).resolve()
        assert not path.is_relative_to(package), frame


def test_a_script_that_changes_folder_is_still_judged_from_its_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = write_script(tmp_path, steps=4)
    script.write_text(
        'import os\nos.makedirs("outputs")\nos.chdir("outputs")\n' + script.read_text()
    )
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--json", "--dir", "records", "train.py"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["steps"] == 4
    # the records were written, so each step is judged (not the run as one) ...
    assert [n["code"] for n in result["notes"]] == []
    assert result["max_syncs_in_a_step"] == 1
    (records,) = (tmp_path / "records").glob("*.records.jsonl")
    assert result["records_path"] == f"records/{records.name}"
    # ... and sites are said from where check was typed, not from where the script went
    assert [s["site"] for s in result["sync_sites"]] == [f"train.py:{line_of(script, 'item()')}"]


def test_json_stdout_is_only_the_result_whatever_writes_to_descriptor_1(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "noisy.py"
    script.write_text(
        "import os, subprocess, sys\n"
        "os.write(1, b'fd 1\\n')\n"
        "subprocess.run([sys.executable, '-c', 'print(\"child\")'], check=True)\n"
    )
    assert check(tmp_path, "--json", str(script)) == 0
    captured = capfd.readouterr()
    assert json.loads(captured.out)["script_exit_code"] == 0
    assert "fd 1\n" in captured.err
    assert "child\n" in captured.err


def test_dash_m_checks_a_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "steps.py").write_text("STEPS = 4\n")
    train = TRAIN.replace("import sys\n", "import sys\nfrom .steps import STEPS\n").format(
        steps="STEPS", extra="print(sys.argv[1:]) if step == 0 else None"
    )
    (pkg / "train.py").write_text(train)
    monkeypatch.chdir(tmp_path)
    path_before = list(sys.path)
    # --json after the module is check's, as after a script; after a -- it is the module's
    status = check(tmp_path, "-m", "pkg.train", "--json", "--max-syncs-per-step", "0", "--", "a")
    assert status == 1
    captured = capsys.readouterr()
    assert "['a']" in captured.err  # the module's prints go to stderr under --json
    result = json.loads(captured.out)
    assert result["script"] == "-m pkg.train"
    assert result["steps"] == 4
    assert result["over_budget_steps"] > 0
    assert result["sync_sites"][0]["site"] == f"pkg/train.py:{line_of(pkg / 'train.py', 'item()')}"
    assert sys.path == path_before
    assert "pkg" not in sys.modules


def test_dash_m_missing_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert check(tmp_path, "-m", "no_such_module_here") == 2
    err = capsys.readouterr().err
    assert err.startswith("asynctrace check: error: -m no_such_module_here: no such module")
    assert err.count("\n") == 1


def test_without_records_the_budget_judges_the_summarys_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records that cannot be written leave the summary's steps: the budget judges those, not
    the whole run as one step (which would say no step completed)."""
    from asynctrace.records.writer import RecordsWriter

    def refuse(self: RecordsWriter) -> None:
        raise PermissionError(13, "Permission denied", str(self.path))

    from asynctrace.errors import AsyncTraceWarning

    monkeypatch.setattr(RecordsWriter, "open", refuse)
    script = write_script(tmp_path)
    with pytest.warns(AsyncTraceWarning, match="could not write the session records"):
        assert check(tmp_path, str(script), "--max-syncs-per-step", "1", "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["records_path"] is None
    assert result["steps"] == 10
    codes = [n["code"] for n in result["notes"]]
    assert "whole-run-one-step" not in codes
    assert result["over_budget_steps"] == 0
    assert result["max_syncs_in_a_step"] == 1


def test_without_records_a_run_longer_than_the_window_is_judged_over_the_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no records, the summary keeps its last ``window`` steps only: the budget judges
    those, and a note says how many of the run's steps that was; the sites' counts, over the
    whole run, are per step of the run. Here steps 1 to 5 of 10 sync three times (the syncs
    after an ``optimizer.step()`` fall in the next step), the last 4 once: a budget of 1 passes
    over the 4 it can see."""
    import asynctrace.tracing
    from asynctrace.errors import AsyncTraceWarning
    from asynctrace.records.writer import RecordsWriter

    def refuse(self: RecordsWriter) -> None:
        raise PermissionError(13, "Permission denied", str(self.path))

    real_trace = asynctrace.tracing.trace

    def trace_with_a_short_window(name: str, **options: Any) -> asynctrace.tracing.Session:
        return real_trace(name, window=4, **options)

    monkeypatch.setattr(RecordsWriter, "open", refuse)
    monkeypatch.setattr(asynctrace.tracing, "trace", trace_with_a_short_window)
    script = write_script(tmp_path, extra="if step < 5:\n        loss.item()\n        loss.item()")
    with pytest.warns(AsyncTraceWarning, match="could not write the session records"):
        assert check(tmp_path, str(script), "--max-syncs-per-step", "1", "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["records_path"] is None
    assert result["steps"] == 10
    notes = {n["code"]: n["text"] for n in result["notes"]}
    assert "last 4 of 10 steps" in notes["budget-over-window"]
    assert result["over_budget_steps"] == 0
    assert result["max_syncs_in_a_step"] == 1
    # the hidden .item() is called in every iteration: 10 over the run's 10 steps
    assert [(s["count"], s["per_step"]) for s in result["sync_sites"]] == [
        (10, 1.0),
        (5, 0.5),
        (5, 0.5),
    ]

    # the same run with its records judges all 10 steps: the 5 of three syncs fail the budget
    monkeypatch.undo()
    monkeypatch.setattr(asynctrace.tracing, "trace", trace_with_a_short_window)
    assert check(tmp_path, str(script), "--max-syncs-per-step", "1", "--json") == 1
    result = json.loads(capsys.readouterr().out)
    assert result["over_budget_steps"] == 5
    assert result["max_syncs_in_a_step"] == 3
    assert [s["per_step"] for s in result["sync_sites"]] == [1.0, 0.5, 0.5]
    assert "budget-over-window" not in {n["code"] for n in result["notes"]}
