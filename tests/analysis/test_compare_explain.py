"""``compare``'s explanation against cases whose answer is known: a real trace and a copy derived
from it (one kernel's durations doubled, one sync added), tallied independently from the raw
JSON; steps aligned by number with warm-up left out; the headline findings; the gate."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import msgspec
import pytest

from asynctrace.analysis._bound_model import WarmUp
from asynctrace.analysis.compare import Comparison, compare
from asynctrace.analysis.diagnosis import Finding
from asynctrace.analysis.report import Report, analyze
from asynctrace.files.sources import load_source
from asynctrace.records import SyncSite
from tests.analysis._derive import (
    derive,
    read_events,
    scaled,
    tally,
    tally_busy,
    tally_host_ops,
    write_trace,
)
from tests.conftest import shared_trace
from tests.export._records import make_steps, write_records_file

BERT = "tracelens_h100_bert_small_with_stack.json.gz"
GEMM = (
    "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>"
    "(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)"
)
SYNC_NS = 80_000


def _ns(us: float) -> int:
    return round(us * 1000)


def _pair(tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any], Comparison]:
    raw = read_events(shared_trace("kineto", BERT))
    # the host waits in the middle of the step's 30th activity
    changed, _ = derive(raw, double=GEMM, sync_in=30, sync_ns=SYNC_NS, site="train.py(42): item")
    a_path = write_trace(raw, tmp_path / "a.json")
    b_path = write_trace(changed, tmp_path / "b.json")
    a, b = (analyze(load_source(p)) for p in (a_path, b_path))
    return raw, changed, compare(a, b)


@pytest.mark.real_traces
def test_kernel_changes_equal_an_independent_tally(tmp_path: Path) -> None:
    raw, changed, c = _pair(tmp_path)
    ta, tb = tally(raw), tally(changed)
    # one stream, no overlap: each name's share of the busy time is its durations' sum
    e = c.explain
    assert e.a_steps == e.b_steps == 1
    got = {k.name: (k.a_busy_ns, k.b_busy_ns) for k in e.kernels}
    assert got == {n: (ta.get(n, 0), tb.get(n, 0)) for n in ta.keys() | tb.keys()}
    deltas = {k.name: k.delta_ns_per_step for k in e.kernels}
    doubled = sum(_ns(x["dur"]) for x in raw["traceEvents"]
                  if x.get("cat") == "kernel" and x["name"] == GEMM)  # fmt: skip
    assert deltas[GEMM] == doubled
    assert all(v == 0 for n, v in deltas.items() if n != GEMM)
    # sorted by the size of the change: the doubled kernel first
    assert e.kernels[0].name == GEMM
    # copies and memsets are there by their names
    assert {k.kind for k in e.kernels} >= {"kernel", "memcpy"}


@pytest.mark.real_traces
def test_the_parts_add_up(tmp_path: Path) -> None:
    _, _, c = _pair(tmp_path)
    e = c.explain
    # busy change = the sum of the kernel changes, exactly (integers over steps)
    assert sum(k.a_busy_ns for k in e.kernels) == e.busy.a_total_ns
    assert sum(k.b_busy_ns for k in e.kernels) == e.busy.b_total_ns
    per_step = sum(
        (Fraction(k.b_busy_ns, e.b_steps) - Fraction(k.a_busy_ns, e.a_steps) for k in e.kernels),
        Fraction(0),
    )
    assert per_step == Fraction(e.busy.b_total_ns, e.b_steps) - Fraction(
        e.busy.a_total_ns, e.a_steps
    )
    # the step's share of the timeline = busy + idle, and idle = the sum of its causes
    for side in ("a", "b"):
        total = getattr(e.step, f"{side}_total_ns")
        busy = getattr(e.busy, f"{side}_total_ns")
        idle = sum(getattr(v, f"{side}_total_ns") for v in e.idle_by_cause.values())
        assert total == busy + idle
    # the step grew by the doubled kernel and the sync's wait
    doubled = next(k for k in e.kernels if k.name == GEMM).delta_ns_per_step
    assert e.step.delta_ns_per_step == pytest.approx(doubled + SYNC_NS, abs=2)
    # the top items cover most of it: the sync's idle and the doubled kernel
    top = {i.name: i for i in e.top}
    assert set(top) == {GEMM, "sync idle"}
    assert top["sync idle"].detail == "cudaStreamSynchronize at train.py:42 added"
    assert sum(i.share_pct for i in e.top) == pytest.approx(e.covered_pct)
    assert e.covered_pct is not None
    assert e.covered_pct >= 80.0


@pytest.mark.real_traces
def test_an_added_sync_shows_with_its_site(tmp_path: Path) -> None:
    _, _, c = _pair(tmp_path)
    added = c.explain.sync_sites.added
    assert [(s.site, s.op, s.a_count, s.b_count) for s in added] == [
        ("train.py:42", "cudaStreamSynchronize", 0, 1)
    ]
    assert added[0].b_cost_ns_per_step >= SYNC_NS - 2
    assert c.explain.sync_sites.removed == []
    assert c.explain.idle_by_cause["sync"].delta_ns_per_step > 0


@pytest.mark.real_traces
def test_host_op_changes_equal_an_independent_tally(tmp_path: Path) -> None:
    raw, changed, c = _pair(tmp_path)
    ha, hb = tally_host_ops(raw), tally_host_ops(changed)
    want = {n: hb.get(n, 0) - ha.get(n, 0) for n in ha.keys() | hb.keys()}
    ops = [h for h in c.explain.host if h.kind == "op"]
    assert ops
    for h in ops:
        assert h.delta_ns_per_step == want[h.frame], h.frame
    # the largest changes, largest first: the op the sync ran inside grew by the sync's wait
    top = sorted(want.values(), key=abs, reverse=True)[: len(ops)]
    assert [h.delta_ns_per_step for h in ops] == top
    assert want["aten::item"] == SYNC_NS - 2
    assert ops[0].frame == "aten::item"


@pytest.mark.real_traces
def test_busy_is_the_sum_of_names_on_several_streams() -> None:
    # overlapping streams: each name's busy share (the first-started owns an overlap) adds up
    path = shared_trace("kineto", "hta_sampled_rank0.json.gz")
    r = analyze(load_source(path))
    assert r.trace is not None
    assert len({s for s in r.trace.activities.per_stream}) > 1
    # every activity lies inside the steps here: the tallies of the raw JSON need no clipping
    raw = read_events(path)
    assert {k.name: k.total_ns for k in r.trace.kernels} == tally(raw)
    assert {k.name: k.busy_ns for k in r.trace.kernels} == tally_busy(raw)
    assert sum(k.busy_ns for k in r.trace.kernels) == sum(s.busy_ns for s in r.step_bounds)
    assert sum(k.total_ns for k in r.trace.kernels) > sum(k.busy_ns for k in r.trace.kernels)
    # and the table survives the report's JSON form (a CI baseline)
    back = Report.from_json(r.to_json())
    assert back.trace is not None
    assert back.trace.kernels == r.trace.kernels


@pytest.mark.real_traces
def test_a_single_step_trace_scaled_is_judged_on_effect_size(tmp_path: Path) -> None:
    raw = read_events(shared_trace("kineto", BERT))
    a = analyze(load_source(write_trace(raw, tmp_path / "a.json")))
    b = analyze(load_source(write_trace(scaled(raw, 1.3), tmp_path / "b.json")))
    c = compare(a, b)
    assert c.outcome == "too few steps"
    assert c.gate.regression is True
    assert c.gate.judged_by == "effect size"
    assert "effect size alone" in c.gate.message
    back = compare(b, a)
    assert back.gate.regression is False
    assert back.gate.judged_by == "effect size"


def _records(tmp_path: Path, name: str, **kw: Any) -> Report:
    steps = kw.pop("steps")
    return analyze(load_source(write_records_file(tmp_path / f"{name}.records.jsonl", steps, **kw)))


def test_warmup_steps_are_left_out_and_said(tmp_path: Path) -> None:
    slow = make_steps(3, frontend_ns=50_000_000)
    steady = make_steps(30, frontend_ns=10_000_000, jitter_ns=100_000)
    steps = [
        msgspec.structs.replace(s, step=k, start_ns=k * 10_000_000)
        for k, s in enumerate([*slow, *steady])
    ]
    a = _records(tmp_path, "a", steps=steps)
    b = _records(tmp_path, "b", steps=steps)
    # a session's records find their slow leading steps themselves (the diagnosis' warm-up)
    assert a.warmup is not None
    assert a.warmup.steps == 3
    wa = msgspec.structs.replace(a, warmup=WarmUp(end_ns=0, span_ns=150_000_000, steps=3))
    # B as a report that says nothing of warm-up (an older baseline)
    c = compare(wa, msgspec.structs.replace(b, warmup=None))
    assert c.steps.a_warmup == 3
    assert c.steps.b_warmup == 0
    step = next(f for f in c.figures if f.figure == "step time")
    # A's three warm-up steps are out; B keeps them, so its steps 0-2 have no partner
    assert (step.a_n, step.b_n) == (30, 30)
    assert c.steps.by == "step number"
    assert c.steps.b_only == 3
    assert any("warm-up left out: 3 step(s) of A, 0 of B" in n for n in c.notes)
    assert c.outcome == "same"
    # both sessions' reports find the warm-up themselves, and both sides leave it out
    both = compare(a, b)
    assert next(f for f in both.figures if f.figure == "step time").a_n == 30
    assert any("warm-up left out: 3 step(s) of A, 3 of B" in n for n in both.notes)
    # without the warm-up rule the slow steps would be compared too
    bare = [msgspec.structs.replace(r, warmup=None) for r in (a, b)]
    assert next(f for f in compare(*bare).figures if f.figure == "step time").a_n == 33


def test_steps_are_matched_by_number(tmp_path: Path) -> None:
    base = make_steps(35, frontend_ns=10_000_000, jitter_ns=100_000)
    a = _records(tmp_path, "a", steps=base[:30])  # steps 0..29
    later = [msgspec.structs.replace(s, frontend_ns=s.frontend_ns + 2_000_000) for s in base[5:]]
    b = _records(tmp_path, "b", steps=later)  # steps 5..34, 2 ms slower each
    c = compare(a, b)
    assert c.steps.by == "step number"
    assert (c.steps.a_steps, c.steps.b_steps) == (25, 25)
    assert (c.steps.a_only, c.steps.b_only) == (5, 5)
    assert c.steps.paired_median_delta_ms == pytest.approx(2.0)
    assert c.steps.paired_slower_pct == 100.0
    assert c.outcome == "regression"
    assert c.gate.regression is True
    assert c.gate.judged_by == "noise test"


def test_steps_without_a_common_number_are_compared_as_sets(tmp_path: Path) -> None:
    base = make_steps(60, frontend_ns=10_000_000, jitter_ns=100_000)
    a = _records(tmp_path, "a", steps=base[:30])  # steps 0..29
    b = _records(tmp_path, "b", steps=base[30:])  # steps 30..59
    c = compare(a, b)
    assert c.steps.by == "none"
    assert c.steps.no_common is True
    assert (c.steps.a_steps, c.steps.b_steps) == (30, 30)
    assert c.outcome == "same"
    assert any("share no step number" in n for n in c.notes)


def _finding(code: str, cost_ns: int) -> Finding:
    return Finding(code=code, cost_ns=cost_ns, share=0.1, message=code, advice="")


def test_headline_findings_and_what_appeared(tmp_path: Path) -> None:
    steps = make_steps(30, frontend_ns=10_000_000)
    a = _records(tmp_path, "a", steps=steps)
    b = _records(tmp_path, "b", steps=steps)
    a = msgspec.structs.replace(
        a, diagnosis=[_finding("host-bound", 900), _finding("launch-overhead", 100)]
    )
    b = msgspec.structs.replace(
        b,
        diagnosis=[
            _finding("sync-bound", 1000),
            _finding("over-synchronized", 500),
            _finding("host-bound", 300),
        ],
    )
    bound = compare(a, b).explain.bound
    assert bound.a is not None
    assert bound.b is not None
    assert (bound.a.code, bound.b.code) == ("host-bound", "sync-bound")
    assert bound.appeared == ["over-synchronized", "sync-bound"]
    assert bound.vanished == ["launch-overhead"]
    # no diagnosis on either side (a report saved before it): no headline, nothing moved
    c, d = (msgspec.structs.replace(_records(tmp_path, n, steps=steps), diagnosis=[]) for n in "cd")
    plain = compare(c, d)
    assert plain.explain.bound.a is None
    assert plain.explain.bound.appeared == []


def test_a_linted_item_added_in_b_shows_as_added(tmp_path: Path) -> None:
    a = _records(tmp_path, "a", steps=make_steps(30), sync_detection="lint")
    item = SyncSite(site="train.py:57", op="Tensor.item", count=30, wait_ns=30_000, steps=30)
    b = _records(
        tmp_path, "b", steps=make_steps(30, sync_count=1), syncs=[item], sync_detection="lint"
    )
    ss = compare(a, b).explain.sync_sites
    assert [(s.site, s.op, s.b_count, s.b_count_per_step) for s in ss.added] == [
        ("train.py:57", "Tensor.item", 30, 1.0)
    ]
    assert ss.added[0].b_cost_ns_per_step == 1000.0
    assert ss.removed == ss.changed == []
    # the sessions have no kernel names: said so
    notes = compare(a, b).explain.notes
    assert any("session's records carry no kernel names" in n for n in notes)


def test_a_live_summary_longer_than_its_window_keeps_its_steady_steps() -> None:
    # 30 steps, the first two warm-up (40 and 9 ms, then 1 ms), summarized over a window of 10:
    # the summary holds steps 20..29, all steady, so the comparison takes all ten (as the
    # summary's bound does), not ten less the two warm-up steps it no longer holds
    from asynctrace.analysis.accumulate import StepAccumulator
    from asynctrace.analysis.compare import _parts, compare
    from asynctrace.analysis.report import session_report
    from asynctrace.records import SessionHeader, StepRecord

    ms = 1_000_000
    header = SessionHeader(
        name="w",
        host="h",
        pid=1,
        device_kind="fake",
        device_name="Fake GPU",
        asynchronous=True,
        started_unix_ns=0,
        sync_detection="cuda",
    )
    acc, t = StepAccumulator(window=10), 0
    for i, f in enumerate([40 * ms, 9 * ms] + [1 * ms] * 28):
        acc.add(StepRecord(step=i, start_ns=t, frontend_ns=f, device_ns=f))
        t += f
    r = session_report(acc, header=header, path="w.records.jsonl", sync_sites=[])
    assert r.warmup is not None
    assert r.warmup.steps == 2
    assert [s.step for s in r.steps] == list(range(20, 30))
    al = compare(r, r).steps
    assert (al.a_warmup, al.a_steps) == (0, 10)
    assert _parts(r).steps == 10
