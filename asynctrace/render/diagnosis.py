"""The diagnosis as every view shows it: the headline (``diagnosis[0]``: its message, its next
step, its evidence), then the other findings, ranked. One implementation: the text report, the
exit summary, the TensorBoard text and the HTML page take these parts and add only their
markup (formatting only)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from asynctrace.analysis.diagnosis import Finding
from asynctrace.records.units import format_ns

__all__ = ["DiagnosisView", "diagnosis_text", "diagnosis_view", "evidence_items"]

#: other findings a view lists under the headline
_SHOWN: int = 6


def evidence_items(evidence: Mapping[str, int | float | str]) -> list[tuple[str, str]]:
    """(name, value) of a finding's evidence as people read it: the unit out of the name and
    into the value (``region_ns`` → ``region``, ``4.43 ms``; ``busy_pct`` → ``busy``, ``7%``)."""
    out = []
    for key, value in evidence.items():
        if key.endswith("_ns") and isinstance(value, int | float):
            name, text = key[:-3], format_ns(value)
        elif key.endswith("_pct") and isinstance(value, int | float):
            name, text = key[:-4], f"{value:.3g}%"
        elif isinstance(value, float):
            name, text = key, f"{value:g}"
        else:
            name, text = key, str(value)
        out.append((name.replace("_", " "), text))
    return out


class DiagnosisView(msgspec.Struct, frozen=True, kw_only=True):
    """What a view shows of a diagnosis, in order."""

    #: the headline's code, message and next step ("" without a diagnosis)
    code: str
    message: str
    advice: str
    evidence: list[tuple[str, str]]
    #: the other findings: (code, message, what it costs as read: "12.3 ms, 8%")
    rest: list[tuple[str, str, str]]
    #: findings left out of ``rest``
    more: int = 0


def _cost(f: Finding) -> str:
    if f.cost_ns <= 0:
        return "no step time"
    return f"{format_ns(f.cost_ns)}, {100 * f.share:.0f}%"


def diagnosis_view(diagnosis: Sequence[Finding], *, shown: int = _SHOWN) -> DiagnosisView:
    """The headline and the ranked rest of ``diagnosis`` (``Report.diagnosis``,
    ``Report.diagnosis`` of a session)."""
    if not diagnosis:
        return DiagnosisView(code="", message="", advice="", evidence=[], rest=[])
    head, *rest = diagnosis
    return DiagnosisView(
        code=head.code,
        message=head.message,
        advice=head.advice,
        evidence=evidence_items(head.evidence),
        rest=[(f.code, f.message, _cost(f)) for f in rest[:shown]],
        more=max(0, len(rest) - shown),
    )


def diagnosis_text(diagnosis: Sequence[Finding], *, shown: int = _SHOWN) -> list[str]:
    """The diagnosis as plain text lines: the headline, ``next step:``, ``evidence:``, then one
    ``then:`` line per other finding with what it costs (views escape them for their
    markup)."""
    v = diagnosis_view(diagnosis, shown=shown)
    if not v.message:
        return []
    lines = [v.message]
    if v.advice:
        lines.append(f"  next step: {v.advice}")
    if v.evidence:
        lines.append("  evidence: " + "; ".join(f"{k} {val}" for k, val in v.evidence))
    lines += [f"  then: {message} [{cost}]" for _, message, cost in v.rest]
    if v.more:
        lines.append(f"  … and {v.more} more finding(s) in --json")
    return lines
