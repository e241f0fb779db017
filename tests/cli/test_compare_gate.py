"""``asynctrace compare``: the regression gate's exit codes, the explanation in the first lines,
the Markdown summary, saved reports as baselines, and ``assert_no_regression``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import asynctrace
from asynctrace.cli import main
from tests.analysis._derive import read_events, scaled, write_trace
from tests.conftest import shared_trace
from tests.export._records import make_steps, write_records_file

BERT = "tracelens_h100_bert_small_with_stack.json.gz"


def _pair(tmp_path: Path, b_ms: float) -> tuple[Path, Path]:
    a = write_records_file(
        tmp_path / "a.records.jsonl",
        make_steps(30, frontend_ns=10_000_000, jitter_ns=300_000),
    )
    b = write_records_file(
        tmp_path / "b.records.jsonl",
        make_steps(30, frontend_ns=int(b_ms * 1e6), jitter_ns=300_000),
    )
    return a, b


def test_fail_on_regression_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _pair(tmp_path, 13.0)
    assert main(["compare", str(a), str(b), "--fail-on", "regression"]) == 1
    out = capsys.readouterr().out
    assert "gate (--fail-on regression): FAIL: regression" in " ".join(out.split())
    # without the gate the same comparison exits 0
    assert main(["compare", str(a), str(b)]) == 0
    capsys.readouterr()
    # an improvement, or no change, passes
    assert main(["compare", str(b), str(a), "--fail-on", "regression"]) == 0
    assert main(["compare", str(a), str(a), "--fail-on", "regression"]) == 0


def test_below_min_effect_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _pair(tmp_path, 10.5)  # +5 %: significant
    assert main(["compare", str(a), str(b), "--fail-on", "regression"]) == 1
    args = ["compare", str(a), str(b), "--fail-on", "regression", "--min-effect", "0.1"]
    assert main(args) == 0


def test_bad_input_stays_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, _ = _pair(tmp_path, 13.0)
    assert main(["compare", str(a), str(tmp_path / "missing.json"), "--fail-on", "regression"]) == 2
    t = tmp_path / "t.json"
    t.write_text('{"traceEvents": []}')
    assert main(["compare", str(a), str(t), "--fail-on", "regression"]) == 2
    err = capsys.readouterr().err
    assert "cannot compare records with trace" in err
    assert len(err.strip().splitlines()) == 2  # one line each
    assert "Traceback" not in err


def test_a_gate_without_comparable_step_times_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # deep mode on one side: step times are not comparable, flagged as before; the gate does
    # not pass silently
    steps = make_steps(30)
    a = write_records_file(tmp_path / "a.records.jsonl", steps)
    b = tmp_path / "b.records.jsonl"
    text = write_records_file(tmp_path / "x.records.jsonl", steps).read_text()
    first, rest = text.split("\n", 1)
    head = json.loads(first)
    head["profile"] = True
    b.write_text(json.dumps(head) + "\n" + rest)
    a_head = json.loads(a.read_text().split("\n", 1)[0])
    a_head["profile"] = False
    a.write_text(json.dumps(a_head) + "\n" + a.read_text().split("\n", 1)[1])
    assert main(["compare", str(a), str(b)]) == 0
    assert "capture settings that cost time differ (deep mode: A off, B on)" in " ".join(
        capsys.readouterr().out.split()
    )
    assert main(["compare", str(a), str(b), "--fail-on", "regression"]) == 2
    assert "not comparable" in capsys.readouterr().err


@pytest.mark.real_traces
def test_single_step_trace_scaled_fails_on_effect_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = read_events(shared_trace("kineto", BERT))
    a = write_trace(raw, tmp_path / "a.json")
    b = write_trace(scaled(raw, 1.3), tmp_path / "b.json")
    assert main(["compare", str(a), str(b), "--fail-on", "regression"]) == 1
    cap = capsys.readouterr()
    assert "judged on the effect size alone" in cap.err
    assert "B is: not judged: too few steps" in " ".join(cap.out.split())
    assert main(["compare", str(b), str(a), "--fail-on", "regression"]) == 0


@pytest.mark.real_traces
def test_text_says_what_explains_the_change_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = read_events(shared_trace("kineto", BERT))
    a = write_trace(raw, tmp_path / "a.json")
    b = write_trace(scaled(raw, 1.3), tmp_path / "b.json")
    assert main(["compare", str(a), str(b)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("step time 4.43 ms -> 5.75 ms, +1.33 ms (+30.0%)")
    assert "explained by: " in lines[1] or "explained by: " in lines[2]
    head = " ".join(" ".join(lines[:4]).split())
    assert "host idle" in head
    assert "% of the step's" in head


@pytest.mark.real_traces
def test_json_has_the_explanation_and_a_saved_report_is_a_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = read_events(shared_trace("kineto", BERT))
    a = write_trace(raw, tmp_path / "a.json")
    b = write_trace(scaled(raw, 1.3), tmp_path / "b.json")
    assert main(["report", str(a), "--json"]) == 0
    saved = tmp_path / "baseline.report.json"
    saved.write_text(capsys.readouterr().out)
    assert main(["compare", str(saved), str(b), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schema_version"] == 3
    assert set(out["explain"]) >= {"kernels", "idle_by_cause", "host", "sync_sites", "bound"}
    assert set(out["explain"]["idle_by_cause"]) == {
        "host", "sync", "input", "dependency", "unattributed"
    }  # fmt: skip
    assert set(out["explain"]["sync_sites"]) == {"added", "removed", "changed"}
    k = out["explain"]["kernels"][0]
    assert set(k) >= {"name", "a_ns_per_step", "b_ns_per_step", "delta_ns_per_step"}
    # every kernel ran 1.3× as long
    for k in out["explain"]["kernels"]:
        assert k["b_busy_ns"] == pytest.approx(1.3 * k["a_busy_ns"], abs=k["a_count"] + 1)
    assert out["gate"]["regression"] is True
    assert out["steps"]["by"] == "step number"


@pytest.mark.real_traces
def test_markdown_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = read_events(shared_trace("kineto", BERT))
    a = write_trace(raw, tmp_path / "a.json")
    b = write_trace(scaled(raw, 1.3), tmp_path / "b.json")
    args = ["compare", str(a), str(b), "--format", "markdown", "--fail-on", "regression"]
    assert main(args) == 1
    md = capsys.readouterr().out
    assert md.startswith("### asynctrace compare\n")
    assert "**❌ regression**" in md
    assert "| part | change per step | share of the change |" in md
    assert "host idle" in md
    assert len(md.splitlines()) < 25


def test_a_saved_session_report_is_a_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = _pair(tmp_path, 13.0)
    assert main(["report", str(a), "--json"]) == 0
    saved = tmp_path / "baseline.report.json"
    saved.write_text(capsys.readouterr().out)
    assert main(["compare", str(saved), str(b), "--fail-on", "regression", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "records"
    assert out["gate"]["judged_by"] == "noise test"
    assert out["gate"]["message"].startswith("regression: step time (+30.0%), significant")
    assert main(["compare", str(saved), str(a), "--fail-on", "regression"]) == 0


def test_json_and_format_conflict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _pair(tmp_path, 13.0)
    assert main(["compare", str(a), str(b), "--json", "--format", "markdown"]) == 2
    assert "--json" in capsys.readouterr().err


def test_assert_no_regression(tmp_path: Path) -> None:
    a, b = _pair(tmp_path, 13.0)
    with pytest.raises(AssertionError, match="regression"):
        asynctrace.assert_no_regression(a, b)
    c = asynctrace.assert_no_regression(b, a)
    assert c.outcome == "improvement"
    # reports work too, and min_effect is the gate's
    ra, rb = (
        asynctrace.analyze(asynctrace.load_source(a)),
        asynctrace.analyze(asynctrace.load_source(b)),
    )
    assert asynctrace.assert_no_regression(ra, rb, min_effect=0.5).gate.regression is False
    t = tmp_path / "t.json"
    t.write_text('{"traceEvents": []}')
    with pytest.raises(asynctrace.TraceFormatError, match="cannot compare"):
        asynctrace.assert_no_regression(a, t)
