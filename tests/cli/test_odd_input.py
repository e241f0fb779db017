"""Odd but possible input that once ended in a traceback or a wrong answer: names with
non-ASCII digits, symlink loops, deeply nested saved reports, out-of-range exit codes and
records versions, namespace packages under ``-m`` (docs/reliability.md, round 2)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

from asynctrace.cli import main
from asynctrace.errors import TraceFormatError
from asynctrace.records import SessionHeader, StepRecord, read_records
from asynctrace.traces.load import find_traces
from asynctrace.tracing import current_session

from .test_user_errors import TINY


def _one_line(capsys: pytest.CaptureFixture[str], command: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("\n") == 1, err
    assert err.startswith(f"asynctrace {command}: error: "), err
    return err


def test_a_superscript_digit_in_a_trace_name_sorts_and_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("1²2.json", "rank10.json", "rank2.json", "٣.json"):
        (tmp_path / name).write_text(json.dumps(TINY))
    names = [p.name for p in find_traces(tmp_path)]
    assert names.index("rank2.json") < names.index("rank10.json")
    assert set(names) == {"1²2.json", "rank10.json", "rank2.json", "٣.json"}
    assert main(["report", str(tmp_path), "--json"]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_annotate_on_a_symlink_loop_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loop = tmp_path / "loop.json"
    loop.symlink_to(tmp_path / "loop.json")
    assert main(["annotate", str(loop), "-o", str(tmp_path / "out.json")]) == 2
    assert "loop.json" in _one_line(capsys, "annotate")
    # as the output, the loop (a name, no file behind it) is replaced by the annotated trace
    src = tmp_path / "t.json"
    src.write_text(json.dumps(TINY))
    assert main(["annotate", str(src), "-o", str(loop)]) == 0
    assert not loop.is_symlink()
    assert "traceEvents" in json.loads(loop.read_text())


def test_compare_a_saved_report_nested_too_deeply_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = tmp_path / "deep.json"
    deep.write_bytes(b'{"schema_version": 1, "x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}")
    assert main(["compare", str(deep), str(deep)]) == 2
    err = _one_line(capsys, "compare")
    assert "deep.json" in err
    assert "nested too deeply" in err


def test_report_from_json_refuses_deep_nesting_as_a_format_error() -> None:
    from asynctrace.analysis.report import Report

    with pytest.raises(TraceFormatError, match="nested too deeply"):
        Report.from_json(b'{"schema_version": 1, "x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}")


# ------------------------------------------------------------------ exit statuses

CODES = ["2**63", "2**63 - 1", "2**64 + 5", "-2**70", "-2**63", "-2**63 - 1", "2**31", "-1", "300"]


def test_exit_statuses_match_a_real_python_for_every_int(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from asynctrace._commands._script import exit_code

    for code in CODES:
        python = subprocess.run([sys.executable, "-c", f"raise SystemExit({code})"], check=False)
        assert exit_code(SystemExit(eval(code))) == python.returncode, code
    # and through the command, for the one the attack used
    script = tmp_path / "big.py"
    script.write_text("raise SystemExit(2**63)\n")
    status = main(["run", "--dir", str(tmp_path / "t"), "--device", "cpu", str(script)])
    assert status == 255
    assert "the script exited with status 255" in capsys.readouterr().err


# ------------------------------------------------------------------ records versions


@pytest.mark.parametrize("version", [-7, 0])
def test_a_records_version_below_1_is_refused_as_invalid(
    tmp_path: Path, version: int, capsys: pytest.CaptureFixture[str]
) -> None:
    header = SessionHeader(
        name="t", host="h", pid=1, device_kind="fake", device_name="F", asynchronous=True,
        started_unix_ns=0, version=version,
    )  # fmt: skip
    p = tmp_path / "t.records.jsonl"
    p.write_bytes(
        msgspec.json.encode(header)
        + b"\n"
        + msgspec.json.encode(StepRecord(step=0, start_ns=0, frontend_ns=1))
    )
    with pytest.raises(TraceFormatError, match=f"version {version} is not a valid records"):
        read_records(p)
    assert main(["report", str(p)]) == 2
    err = _one_line(capsys, "report")
    assert "newer" not in err


# ------------------------------------------------------------------ -m on namespace packages

NS_MOD = """\
import json, sys
import torch

model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
main = sys.modules["__main__"]
print(json.dumps({
    "argv": sys.argv, "name": main.__name__, "spec": main.__spec__.name,
    "path0": sys.path[0], "pkg": main.__package__, "file": main.__file__,
}))
"""


@pytest.mark.parametrize("command", ["run", "check"])
def test_dash_m_runs_a_module_of_namespace_packages_as_python_does(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    mod = tmp_path / "ns1" / "ns2" / "mod.py"
    mod.parent.mkdir(parents=True)
    mod.write_text(textwrap.dedent(NS_MOD))
    monkeypatch.chdir(tmp_path)
    python = subprocess.run(
        [sys.executable, "-m", "ns1.ns2.mod", "x"], capture_output=True, text=True, check=True
    )
    expected = json.loads(python.stdout)
    status = main([command, "--dir", str(tmp_path / "t"), "-m", "ns1.ns2.mod", "x"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    seen = json.loads(
        next(
            line
            for line in (captured.out + captured.err).splitlines()
            if line.startswith('{"argv"')
        )
    )
    assert seen == expected
    assert seen["argv"] == [str(mod), "x"]
    assert "Traceback" not in captured.err
    assert not {"ns1", "ns1.ns2", "ns1.ns2.mod"} & set(sys.modules)
    assert current_session() is None
    if command == "run":
        rec = read_records(next((tmp_path / "t").glob("*.records.jsonl")))
        assert len(rec.steps) == 3
