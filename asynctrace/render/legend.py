"""One colour and one legend label per kind of time, for every view.

The matplotlib pictures (:mod:`asynctrace.render.plot`, hence the HTML report) and the
TensorBoard plugin's page (which receives :func:`legend` as JSON) draw with these, so a sync
stall is the same red everywhere and a legend says the same words.
"""

from __future__ import annotations

import msgspec

__all__ = [
    "BUSY_CNAME",
    "COLORS",
    "IDLE_CAUSE_CNAMES",
    "IDLE_CAUSE_COLORS",
    "IDLE_CAUSE_LABELS",
    "LABELS",
    "LegendEntry",
    "legend",
]

#: one colour per kind of time, shared by every picture, the HTML report and the plugin
COLORS: dict[str, str] = {
    "host": "#4E79A7",
    "op": "#76B7B2",
    "launch": "#4E79A7",
    "sync": "#E15759",
    "data": "#EDC948",
    "busy": "#59A14F",
    "idle": "#BAB0AC",
    "arrow": "#555555",
    "run_ahead": "#F28E2B",
    "queue": "#B07AA1",
}

#: device idle time by cause (the bound label's causes); "idle" stays the colour of idle time
#: whose cause is not split
IDLE_CAUSE_COLORS: dict[str, str] = {
    "host": "#A0CBE8",
    "sync": "#FF9D9A",
    "input": "#F1CE63",
    "dependency": "#D4A6C8",
    "unattributed": "#BAB0AC",
}

#: the legend's words for each idle cause (the plots, the HTML report, the plugin)
IDLE_CAUSE_LABELS: dict[str, str] = {
    "host": "device idle: host",
    "sync": "device idle: sync",
    "input": "device idle: input",
    "dependency": "device idle: dependency",
    "unattributed": "device idle: unattributed",
}

#: the nearest reserved colour name of the Chrome trace viewer (catapult's color_scheme) for
#: each idle cause, for an annotated trace's ``cname``; Perfetto ignores ``cname`` on purpose
#: and colours a slice by its name, which is the cause's
IDLE_CAUSE_CNAMES: dict[str, str] = {
    "host": "thread_state_runnable",  # blue (133, 160, 210)
    "sync": "terrible",  # red (180, 0, 0)
    "input": "yellow",  # (255, 255, 0)
    "dependency": "thread_state_uninterruptible",  # mauve (182, 125, 143)
    "unattributed": "generic_work",  # grey (125, 125, 125)
}

#: the Chrome trace viewer's colour name for device busy time: green, as "executing" is
#: everywhere
BUSY_CNAME = "thread_state_running"

#: the legend's words for each kind
LABELS: dict[str, str] = {
    "host": "host: issuing",
    "op": "operator run on host",
    "launch": "launch / issue (host)",
    "sync": "sync stall (host waits)",
    "data": "data wait (host)",
    "busy": "executing (device)",
    "idle": "device idle",
    "arrow": "queued → executed",
    "run_ahead": "run-ahead (ms)",
    "queue": "queue depth",
}


class LegendEntry(msgspec.Struct, frozen=True, kw_only=True):
    kind: str
    color: str
    label: str


def legend() -> list[LegendEntry]:
    """Every kind with its colour and label; idle causes as ``idle:<cause>``."""
    out = [LegendEntry(kind=k, color=c, label=LABELS.get(k, k)) for k, c in COLORS.items()]
    out += [
        LegendEntry(kind=f"idle:{k}", color=c, label=IDLE_CAUSE_LABELS[k])
        for k, c in IDLE_CAUSE_COLORS.items()
    ]
    return out
