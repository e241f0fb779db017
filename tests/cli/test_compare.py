"""``asynctrace compare``: deltas, verdict changes and the noise test, on known inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asynctrace.analysis.compare import compare_values, mann_whitney_p
from asynctrace.cli import main
from tests.conftest import shared_trace
from tests.export._records import make_steps, write_records_file


def test_mann_whitney_matches_the_textbook_value() -> None:
    # scipy.stats.mannwhitneyu([1,2,3],[4,5,6], method="asymptotic") -> 0.08085559837005...
    assert mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.0808555983700523, rel=1e-12)
    assert mann_whitney_p([5, 5, 5], [5, 5, 5]) == 1.0
    # with ties: z = (|U − n1 n2/2| − ½)/σ, σ² = n1 n2/12 · ((n+1) − Σ(t³−t)/(n(n−1)))
    import math

    a, b = [1, 2, 2, 3], [2, 3, 4, 4, 5]
    u1 = sum((x > y) + 0.5 * (x == y) for x in a for y in b)
    ties = [1, 3, 2, 2, 1]  # 1, 2×3, 3×2, 4×2, 5
    n1, n2, n = 4, 5, 9
    var = n1 * n2 / 12 * ((n + 1) - sum(t**3 - t for t in ties) / (n * (n - 1)))
    z = (abs(u1 - n1 * n2 / 2) - 0.5) / math.sqrt(var)
    assert mann_whitney_p(a, b) == pytest.approx(math.erfc(z / math.sqrt(2)), rel=1e-12)


def test_noise_rules() -> None:
    base = [10.0, 10.2, 9.8] * 10
    assert compare_values("x", "ms", base, [v * 0.7 for v in base]).change == "improvement"
    assert compare_values("x", "ms", base, [v * 1.3 for v in base]).change == "regression"
    assert compare_values("x", "ms", base, list(base)).change == "same"
    # significant but below the 2 % effect floor
    assert compare_values("x", "ms", base, [v * 1.01 for v in base]).change == "same"
    assert compare_values("x", "ms", base[:3], base[:3]).change == "too few steps"
    assert compare_values("x", "ms", base, [v * 2 for v in base], better=None).change == "changed"
    assert compare_values("x", "ms", [], base).change == "n/a"


def _pair(tmp_path: Path) -> tuple[Path, Path]:
    a = write_records_file(
        tmp_path / "a.records.jsonl",
        make_steps(30, frontend_ns=10_000_000, jitter_ns=300_000, sync_count=1,
                   sync_wait_ns=4_000_000, run_ahead_ns=0, in_flight=0),
    )  # fmt: skip
    b = write_records_file(
        tmp_path / "b.records.jsonl",
        make_steps(30, frontend_ns=7_000_000, jitter_ns=300_000, run_ahead_ns=5_000_000,
                   in_flight=2),
    )  # fmt: skip
    return a, b


def test_compare_records_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _pair(tmp_path)
    assert main(["compare", str(a), str(b), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "records"
    assert out["outcome"] == "improvement"
    fig = {f["figure"]: f for f in out["figures"]}
    assert fig["step time"]["a_median"] == 10.0
    assert fig["step time"]["b_median"] == 7.0
    assert fig["step time"]["delta"] == pytest.approx(-3.0)
    assert fig["step time"]["delta_pct"] == pytest.approx(-30.0)
    assert fig["syncs per step"]["change"] == "improvement"
    assert fig["sync wait"]["b_median"] == 0.0
    assert fig["run-ahead"]["change"] == "changed"
    assert fig["device"]["change"] == "same"
    assert "Mann-Whitney" in out["noise"]
    # B vs A is the mirror image
    assert main(["compare", str(b), str(a), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["outcome"] == "regression"


def test_compare_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _pair(tmp_path)
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "B is: improvement (step time)" in out
    assert "noise: two-sided Mann-Whitney U" in out


def test_compare_text_prints_names_verbatim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a folder name with rich markup and an emoji code must come out as written
    odd = tmp_path / "run [red]x :thumbs_up:"
    odd.mkdir()
    a, b = _pair(odd)
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "[red]x :thumbs_up:" in " ".join(out.split())  # (the title may wrap)


@pytest.mark.real_traces
def test_compare_traces_and_saved_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = shared_trace("kineto", "hta_v100_ns_resolution_rank0.json.gz")
    assert main(["report", str(a), "--json"]) == 0
    saved = tmp_path / "a.report.json"
    saved.write_text(capsys.readouterr().out)
    assert main(["compare", str(saved), str(a), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "trace"
    assert out["outcome"] == "same"
    assert all(f["delta"] in (0, None) for f in out["figures"])
    assert out["verdict_changed"] is False


def test_mixed_kinds_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, _ = _pair(tmp_path)
    t = tmp_path / "t.json"
    t.write_text('{"traceEvents": []}')
    assert main(["compare", str(a), str(t)]) == 2
    assert "cannot compare" in capsys.readouterr().err


def test_too_few_steps_is_not_judged_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 3 steps against 3 steps 30 % faster: too few for the noise test, so no outcome, not "same"
    a = write_records_file(tmp_path / "a.records.jsonl", make_steps(3, frontend_ns=10_000_000))
    b = write_records_file(tmp_path / "b.records.jsonl", make_steps(3, frontend_ns=7_000_000))
    assert main(["compare", str(a), str(b), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "too few steps"
    assert main(["compare", str(a), str(b)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "B is: not judged: too few steps (3 and 3; the noise test needs 5 on each side)" in text
    assert "B is: same" not in text


def test_sync_figures_of_different_detectors_are_not_compared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `check` (lint: 1 sync per step found) against `run` (auto: nothing detected on CPU) is not
    # "every sync removed"
    a = write_records_file(
        tmp_path / "a.records.jsonl", make_steps(30, sync_count=1), sync_detection="lint"
    )
    b = write_records_file(tmp_path / "b.records.jsonl", make_steps(30), sync_detection="off")
    assert main(["compare", str(a), str(b), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    fig = {f["figure"]: f for f in out["figures"]}
    assert fig["syncs per step"]["change"] == "not comparable"
    assert fig["sync wait"]["change"] == "not comparable"
    # the lint costs time too: step times are not judged either (below)
    assert out["notes"][0].startswith("sync detection differs (A: lint, B: off)")
    assert main(["compare", str(a), str(b)]) == 0
    assert "note: sync detection differs (A: lint, B: off)" in capsys.readouterr().out
    # the same detector (or a file that does not say) compares as before
    c = write_records_file(tmp_path / "c.records.jsonl", make_steps(30), sync_detection="lint")
    assert main(["compare", str(a), str(c), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["notes"] == []
    assert {f["figure"]: f for f in out["figures"]}["syncs per step"]["change"] == "improvement"


def _header(**settings: object) -> str:
    """A records header as a session writes it, with the capture settings given."""
    head = {
        "type": "header", "schema": "asynctrace.records", "version": 1, "name": "train",
        "host": "h", "pid": 1, "device_kind": "cpu", "device_name": "cpu", "asynchronous": False,
        "started_unix_ns": 1_700_000_000_000_000_000, **settings,
    }  # fmt: skip
    return json.dumps(head)


def _hand_made(path: Path, frontend_ms: float, **settings: object) -> Path:
    lines = [_header(**settings)]
    for i in range(30):
        ns = int(frontend_ms * 1e6) + (i % 3) * 100_000
        lines.append(json.dumps({"type": "step", "step": i, "start_ns": i * ns, "frontend_ns": ns}))
    lines.append(json.dumps({"type": "summary", "steps": 30, "wall_ns": 1}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_step_times_of_runs_captured_differently_are_not_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A: the lint and deep mode on; B: bare. B's 59 % less step time is the capture's cost
    a = _hand_made(
        tmp_path / "a.records.jsonl", 22.6, sync_detection="lint", profile=True,
        tensorboard=False, live=False,
    )  # fmt: skip
    b = _hand_made(
        tmp_path / "b.records.jsonl", 9.3, sync_detection="off", profile=False,
        tensorboard=False, live=False,
    )  # fmt: skip
    assert main(["compare", str(a), str(b), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # before: "improvement", with only the detector noted
    assert out["outcome"] == "not comparable"
    fig = {f["figure"]: f for f in out["figures"]}
    for name in ("step time", "frontend", "device", "data wait", "sync wait", "run-ahead"):
        assert fig[name]["change"] == "not comparable", name
    assert fig["step time"]["delta_pct"] == pytest.approx(-58.6, abs=0.1)  # still shown
    assert out["notes"][1] == (
        "capture settings that cost time differ (sync detector: A lint, B off; deep mode: A on, "
        "B off): step times are not comparable; compare runs captured the same way"
    )
    assert main(["compare", str(a), str(b)]) == 0
    text = capsys.readouterr().out
    assert "B is: not judged: step times not comparable" in text
    assert "note: capture settings that cost time differ (sync detector: A lint" in text


@pytest.mark.parametrize("setting", ["tensorboard", "live", "profile"])
def test_each_costly_setting_alone_makes_step_times_not_comparable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setting: str
) -> None:
    a = _hand_made(tmp_path / "a.records.jsonl", 10.0, **{setting: True})
    b = _hand_made(tmp_path / "b.records.jsonl", 7.0, **{setting: False})
    assert main(["compare", str(a), str(b), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "not comparable"
    (note,) = out["notes"]
    assert "A on, B off" in note


def test_the_same_settings_or_old_files_compare_as_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    same = {"sync_detection": "off", "profile": False, "tensorboard": True, "live": False}
    a = _hand_made(tmp_path / "a.records.jsonl", 10.0, **same)
    b = _hand_made(tmp_path / "b.records.jsonl", 7.0, **same)
    assert main(["compare", str(a), str(b), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["outcome"], out["notes"]) == ("improvement", [])
    # a file written before the settings were kept says nothing: not judged as different
    old = _hand_made(tmp_path / "old.records.jsonl", 7.0)
    assert main(["compare", str(a), str(old), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["outcome"] == "improvement"
