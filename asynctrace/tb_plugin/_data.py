"""The plugin's data: runs found in a logdir, and the JSON answers of its routes.

No tensorboard or werkzeug here (``_plugin.py`` wraps these in WSGI routes), so everything is
testable as plain functions. Nothing is computed here either: every file is read by
:func:`~asynctrace.files.sources.load_source` and analysed by
:func:`~asynctrace.analysis.report.analyze_detail`, one path for traces and records; its report
is passed through as JSON (new Report fields show up with no change here), the bars and step
windows are :mod:`asynctrace.render.views` of the analysis, a comparison is
:func:`asynctrace.analysis.compare.compare` of two reports of any kinds. What the page reads
(the diagnosis, the bound, the per-step figures, the sync sites, the bars' and events'
durations) comes formatted by the views every other output uses
(:func:`~asynctrace.render.diagnosis.diagnosis_view`, :func:`~asynctrace.render.text.bound_text`,
:func:`~asynctrace.render.rows.shown_figure_rows`, :func:`~asynctrace.render.text.site_rows`,
:func:`~asynctrace.render.compare.comparison_rows`,
:func:`~asynctrace.records.units.format_ns`): the page lays text out, and draws with the raw
numbers.

Runs: a folder under the logdir holding session records (``*.records.jsonl``) or traces
(``*.pt.trace.json[.gz]``, ``*.json.gz``, ``*.sqlite``) is a run, named by its path relative to
the logdir; a file directly in the logdir is a run by itself. A run's files are its *sources*
(ranks, a session's records beside its deep-mode traces). Annotated copies and summaries that
asynctrace writes beside a trace are not sources
(:data:`asynctrace.records.names.DERIVED_SUFFIXES`).

Only what lies inside the logdir is listed or served: every path is resolved (links followed)
and checked against the logdir's real path, so a link to ``/etc/passwd`` or to a folder
outside is refused with a JSON error and nothing of its target. A name that is not UTF-8
(JSON cannot hold it) is not listed; ``/runs`` notes it, escaped. A name the file system
refuses (too long) or a folder tree of any depth is a refused request or a skipped entry, never
an HTTP error.

Loaded files are kept in a bounded LRU cache keyed by (path, mtime, size): the second request
for a step window of a 400 MB trace reads nothing and parses nothing.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from asynctrace.errors import TraceFormatError
from asynctrace.files.sources import source_kind
from asynctrace.records.units import format_ns
from asynctrace.render.compare import ComparisonRow, comparison_rows
from asynctrace.render.diagnosis import DiagnosisView
from asynctrace.render.legend import LegendEntry, legend
from asynctrace.render.output import fs_name, is_utf8, utf8
from asynctrace.render.views import DEFAULT_MAX_EVENTS, MAX_EVENTS, StepBars, TimelineWindow

if TYPE_CHECKING:
    from asynctrace.analysis.report import Analysis, Report
    from asynctrace.render.views import TimelineIndex

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_CACHE_ENTRIES",
    "PLUGIN_SCHEMA_VERSION",
    "BarText",
    "LoadCache",
    "PluginData",
    "ReportAnswer",
    "RunEntry",
    "RunListing",
    "SourceEntry",
    "WindowAnswer",
]

#: version of the plugin's own JSON wrappers (the Report inside carries its own); 2: what the
#: page reads comes formatted (ReportAnswer's diagnosis, bound_lines, figure_rows, sync_title,
#: sync_rows, bar_text; WindowAnswer's host_text, device_text); 3: CompareAnswer's
#: figure_rows, as ``asynctrace compare`` prints them
PLUGIN_SCHEMA_VERSION = 3
#: loaded files kept in memory at most
DEFAULT_CACHE_ENTRIES = 6
#: and their models' bytes at most (a 400 MB trace's columns take ~170 MB); the newest file
#: stays even when it alone is larger
DEFAULT_CACHE_BYTES = 2 << 30
#: how long is_active() trusts its last walk of the logdir
_ACTIVE_TTL_S = 10.0
#: entries /runs says it left out, at most (then how many more)
_MAX_NOTED = 20


def _utf8_fields(obj: object) -> object:
    """``obj`` with "?" for what UTF-8 cannot hold in every string of it (Structs, lists,
    dicts; ``msgspec.Raw`` is JSON already)."""
    if isinstance(obj, str):
        return utf8(obj)
    if isinstance(obj, list):
        return [_utf8_fields(v) for v in obj]
    if isinstance(obj, dict):
        return {_utf8_fields(k): _utf8_fields(v) for k, v in obj.items()}
    if isinstance(obj, msgspec.Struct):
        return msgspec.structs.replace(
            obj, **{f: _utf8_fields(getattr(obj, f)) for f in obj.__struct_fields__}
        )
    return obj


def _encode(obj: object) -> bytes:
    """``obj`` as JSON; a file name that is not UTF-8 (a logdir's, in a message) shows "?" for
    its odd bytes rather than fail the answer."""
    try:
        return msgspec.json.encode(obj)
    except UnicodeEncodeError:
        return msgspec.json.encode(_utf8_fields(obj))


def _inside(real: str, real_root: str) -> bool:
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


class SourceEntry(msgspec.Struct, frozen=True, kw_only=True):
    #: path relative to the logdir, with "/" (the id the other routes take)
    path: str
    run: str
    kind: str  # "records" or "trace"
    size_bytes: int
    mtime_ns: int
    #: why the file could not be read, when an earlier request found out (else None)
    error: str | None = None


class RunEntry(msgspec.Struct, frozen=True, kw_only=True):
    run: str
    sources: list[SourceEntry]


class RunListing(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int = PLUGIN_SCHEMA_VERSION
    logdir: str
    runs: list[RunEntry]
    legend: list[LegendEntry]
    notes: list[str] = msgspec.field(default_factory=list)


class StepRef(msgspec.Struct, frozen=True, kw_only=True):
    step: int
    name: str


class BarText(msgspec.Struct, frozen=True, kw_only=True):
    """The durations the step bars' tooltips read, formatted (:func:`format_ns`), in the
    order of :class:`~asynctrace.render.views.StepBars`: ``host[i][j]`` is
    ``bars[i].host[j].dur_ns``. The bars are drawn from the raw ns."""

    host: list[list[str]]
    device: list[list[str]]
    #: ``run_ahead_ns[i]`` ("-" where not measured)
    run_ahead: list[str]


def bar_text(bars: StepBars) -> BarText:
    return BarText(
        host=[[format_ns(p.dur_ns) for p in b.host] for b in bars.bars],
        device=[[format_ns(p.dur_ns) for p in b.device] for b in bars.bars],
        run_ahead=[format_ns(v) for v in bars.run_ahead_ns],
    )


class ReportAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """``/report``: one source's report (a trace's or a session's ``Report``, as its own
    JSON), its step bars, the steps a window can show, and what the page reads of it as the
    other views write it."""

    schema_version: int = PLUGIN_SCHEMA_VERSION
    path: str
    run: str
    kind: str
    ok: bool
    error: str | None = None
    report: msgspec.Raw | None = None
    #: the verdict as one line, its code said once (``VerdictInfo.line``, as every view)
    verdict_line: str | None = None
    bars: StepBars | None = None
    #: the steps /step_window can show (traces with steps only)
    windows: list[StepRef] = msgspec.field(default_factory=list)
    #: the headline and the ranked rest (``diagnosis_view``: at most six, then ``more``)
    diagnosis: DiagnosisView | None = None
    #: the bound's figures as lines (``bound_text``; empty without a bound)
    bound_lines: list[str] = msgspec.field(default_factory=list)
    #: (figure, mean, median, p90) as printed (``figure_rows``)
    figure_rows: list[tuple[str, str, str, str]] = msgspec.field(default_factory=list)
    #: the sync sites' heading, and (site, op, count, wait, steps) as printed (``site_rows``)
    sync_title: str | None = None
    sync_rows: list[tuple[str, str, str, str, str]] = msgspec.field(default_factory=list)
    bar_text: BarText | None = None


class WindowAnswer(TimelineWindow, frozen=True, kw_only=True):
    """``/step_window``: the :class:`~asynctrace.render.views.TimelineWindow`, and the
    durations its tooltips read (:func:`format_ns`; ``host_text[i]`` is ``host[i].dur_ns``)."""

    schema_version: int = PLUGIN_SCHEMA_VERSION
    host_text: list[str]
    device_text: list[str]


class ErrorAnswer(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int = PLUGIN_SCHEMA_VERSION
    ok: bool = False
    error: str


class CompareAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """``/compare``: two sources' :class:`~asynctrace.analysis.compare.Comparison`, both
    verdicts as one line each, and its figure table as the terminal prints it."""

    schema_version: int = PLUGIN_SCHEMA_VERSION
    ok: bool
    a: str
    b: str
    error: str | None = None
    #: :class:`asynctrace.analysis.compare.Comparison` as its JSON
    comparison: msgspec.Raw | None = None
    verdict_line_a: str | None = None
    verdict_line_b: str | None = None
    #: (figure, A median, B median, delta, p, judged) as printed (``comparison_rows``)
    figure_rows: list[ComparisonRow] = msgspec.field(default_factory=list)


class _Shown(msgspec.Struct, frozen=True, kw_only=True):
    """What the page reads of one report, formatted once per loaded file."""

    diagnosis: DiagnosisView
    bound_lines: list[str]
    figure_rows: list[tuple[str, str, str, str]]
    sync_title: str
    sync_rows: list[tuple[str, str, str, str, str]]
    bar_text: BarText


def _shown(report: Report, bars: StepBars) -> _Shown:
    from asynctrace.render.diagnosis import diagnosis_view
    from asynctrace.render.rows import bound_scope, shown_bound, shown_figure_rows
    from asynctrace.render.text import bound_text, site_rows

    syncs = report.trace.syncs if report.trace is not None else None
    title = (
        "Sync sites"
        if syncs is None
        else f"Sync sites ({syncs.count} syncs, {format_ns(syncs.total_ns)})"
    )
    # shown where every view shows it (not for a synchronous run: no device timeline)
    bound = shown_bound(report)
    return _Shown(
        diagnosis=diagnosis_view(report.diagnosis),
        bound_lines=[] if bound is None else bound_text(bound, scope=bound_scope(report)),
        figure_rows=[(r.label, r.mean, r.median, r.p90) for r in shown_figure_rows(report)],
        sync_title=title,
        sync_rows=site_rows(report),
        bar_text=bar_text(bars),
    )


@dataclass
class _Loaded:
    """One file, read and analysed once."""

    report_json: bytes
    verdict_line: str
    bars: StepBars
    shown: _Shown
    analysis: Analysis
    #: step number -> its index in the report's steps (what a step window is asked by)
    index: dict[int, int]
    #: the trace's arrays every step window slices (made on the first window, then kept)
    timeline: TimelineIndex | None = None

    @property
    def nbytes(self) -> int:
        """The model's columns and the report's JSON (what the cache's byte bound counts)."""
        n = len(self.report_json)
        detail = self.analysis.trace
        if detail is None:
            return n + 200 * len(self.analysis.report.steps)
        t = detail.trace
        n += sum(
            tab.nbytes()
            for tab in (t.runtime, t.activities, t.ranges, t.python_frames, t.device_syncs)
        )
        if self.timeline is not None:
            at = self.timeline
            n += sum(a.nbytes for a in at.end_max.values())
            n += at.launching.nbytes + at.syncing.nbytes + at.ops.nbytes + at.matched.nbytes
        return n + sum(len(x) for x in t.strings)


class _Failure(msgspec.Struct, frozen=True):
    """Why a file could not be read, kept in the cache like a loaded file."""

    path: str
    reason: str

    def error(self) -> TraceFormatError:
        return TraceFormatError(self.path, self.reason)


def _failure(path: Path, e: Exception) -> _Failure:
    if isinstance(e, TraceFormatError):
        return _Failure(e.path, e.reason)
    # not a format error we know: still a reason on the page, never a broken page
    return _Failure(str(path), f"{type(e).__name__}: {e}")


def _load(path: Path) -> _Loaded:
    from asynctrace.analysis.report import analyze_detail
    from asynctrace.files.sources import load_source
    from asynctrace.render.views import step_bars

    # every sync call is in the trace; the page lists the sites
    analysis = analyze_detail(load_source(path), keep_sync_calls=False)
    report = analysis.report
    bars = step_bars(report)
    return _Loaded(
        report_json=_encode(report),
        verdict_line=report.verdict.line,
        bars=bars,
        shown=_shown(report, bars),
        analysis=analysis,
        index={s.step: i for i, s in enumerate(report.steps)},
    )


class LoadCache:
    """Loaded files, least recently used dropped first, keyed by (path, mtime, size): a file
    that changes is read again. A failure is remembered under the same key. Thread-safe; two
    requests for the same file wait for one load."""

    def __init__(
        self, max_entries: int = DEFAULT_CACHE_ENTRIES, max_bytes: int = DEFAULT_CACHE_BYTES
    ) -> None:
        self.max_entries = max(1, max_entries)
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, int, int], _Loaded | _Failure] = OrderedDict()
        self._loading: dict[tuple[str, int, int], threading.Lock] = {}
        self._lock = threading.Lock()
        #: files read so far (tests check that a second request reads nothing)
        self.loads = 0

    @staticmethod
    def key(path: Path) -> tuple[str, int, int]:
        st = path.stat()
        return (str(path), st.st_mtime_ns, st.st_size)

    def known_error(self, path: Path) -> str | None:
        try:
            k = self.key(path)
        except OSError:
            return None
        with self._lock:
            v = self._entries.get(k)
        return str(v.error()) if isinstance(v, _Failure) else None

    def _evict(self) -> None:
        """Drop the least recently used files beyond the bounds (the caller holds the lock)."""

        def size(v: _Loaded | _Failure) -> int:
            return len(v.reason) if isinstance(v, _Failure) else v.nbytes

        total = sum(size(v) for v in self._entries.values())
        while len(self._entries) > 1 and (
            len(self._entries) > self.max_entries or total > self.max_bytes
        ):
            _, v = self._entries.popitem(last=False)
            total -= size(v)

    def get(self, path: Path) -> _Loaded:
        """The loaded file; raises :class:`TraceFormatError` with the reason if unreadable."""
        try:
            k = self.key(path)
        except OSError as e:
            raise TraceFormatError(str(path), f"cannot read: {e.strerror or e}") from None
        with self._lock:
            v = self._entries.get(k)
            if v is None:
                gate = self._loading.setdefault(k, threading.Lock())
            else:
                self._entries.move_to_end(k)
        if v is None:
            with gate:
                with self._lock:
                    v = self._entries.get(k)
                if v is None:
                    try:
                        v = _load(path)
                    except Exception as e:  # the page shows why, and never breaks
                        v = _failure(path, e)
                    with self._lock:
                        self.loads += 1
                        self._entries[k] = v
                        self._loading.pop(k, None)
                        self._evict()
        if isinstance(v, _Failure):
            raise v.error()
        return v


class PluginData:
    """Everything the routes answer, for one logdir."""

    def __init__(
        self,
        logdir: str | os.PathLike[str] | None,
        *,
        cache_entries: int = DEFAULT_CACHE_ENTRIES,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        self.logdir = Path(logdir).expanduser() if logdir else None
        self.cache = LoadCache(cache_entries, cache_bytes)
        self._active: tuple[float, bool] | None = None

    # ------------------------------------------------------------------ listing

    def _real_root(self) -> str | None:
        """The logdir's real path (links resolved), None without a logdir folder."""
        root = self.logdir
        if root is None:
            return None
        real = os.path.realpath(root)
        return real if os.path.isdir(real) else None

    def _walk(self, left_out: list[str] | None = None) -> Iterator[tuple[str, str, str, Path]]:
        """(run, kind, path relative to the logdir, real path) of every source under the
        logdir, in a stable order (a folder's files, then its folders, by name).

        A loop over a stack, not recursion: a tree of any depth is walked. Folder links are not
        followed (as ``os.walk``); a file link is listed only where it resolves inside the
        logdir. A name that is not UTF-8, a link out of the logdir and a folder that cannot be
        read are left out; the first two are said in ``left_out``.
        """
        root, real_root = self.logdir, self._real_root()
        if root is None or real_root is None:
            return
        stack: list[tuple[str, str]] = [(os.fspath(root), "")]
        while stack:
            folder, rel = stack.pop()
            try:
                with os.scandir(folder) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError:
                continue  # unreadable, gone, or a path too long to open
            subfolders: list[tuple[str, str]] = []
            for entry in entries:
                name = entry.name
                entry_rel = f"{rel}/{name}" if rel else name
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if not name.startswith((".", "__")):
                            if is_utf8(name):
                                subfolders.append((entry.path, entry_rel))
                            elif left_out is not None:
                                left_out.append(f"{fs_name(entry_rel)}/: not UTF-8")
                        continue
                    kind = source_kind(name)
                    if kind is None:
                        continue
                    if not is_utf8(name):
                        if left_out is not None:
                            left_out.append(f"{fs_name(entry_rel)}: the name is not UTF-8")
                        continue
                    real = os.path.realpath(entry.path)
                    if not _inside(real, real_root):
                        if left_out is not None:
                            left_out.append(f"{entry_rel}: a link to outside the logdir")
                        continue
                    if not os.path.isfile(real):
                        continue
                except OSError:
                    continue  # a name the file system refuses, a file gone meanwhile
                yield (rel or name), kind, entry_rel, Path(real)
            stack.extend(reversed(subfolders))

    def is_active(self) -> bool:
        now = time.monotonic()
        if self._active is not None and now - self._active[0] < _ACTIVE_TTL_S:
            return self._active[1]
        active = next(self._walk(), None) is not None
        self._active = (now, active)
        return active

    def runs(self) -> RunListing:
        root = self.logdir
        notes: list[str] = []
        if root is None:
            notes.append("TensorBoard was started without --logdir: nothing to list")
        elif self._real_root() is None:
            notes.append(f"{fs_name(str(root))}: not a directory")
        runs: dict[str, list[SourceEntry]] = {}
        left_out: list[str] = []
        for run, kind, rel, real in self._walk(left_out):
            try:
                st = real.stat()
            except OSError:
                continue
            runs.setdefault(run, []).append(
                SourceEntry(
                    path=rel,
                    run=run,
                    kind=kind,
                    size_bytes=st.st_size,
                    mtime_ns=st.st_mtime_ns,
                    error=self.cache.known_error(real),
                )
            )
        for why in left_out[:_MAX_NOTED]:
            notes.append(f"not listed: {why}")
        if len(left_out) > _MAX_NOTED:
            notes.append(f"not listed: {len(left_out) - _MAX_NOTED} more")
        return RunListing(
            logdir=fs_name(str(root)) if root is not None else "",
            runs=[RunEntry(run=r, sources=s) for r, s in runs.items()],
            legend=legend(),
            notes=notes,
        )

    def runs_json(self) -> bytes:
        """``/runs`` as JSON."""
        return _encode(self.runs())

    # ------------------------------------------------------------------ one source

    def resolve(self, rel: str) -> tuple[Path, str, str]:
        """(real path, kind, run) of a source named by its path relative to the logdir;
        refuses anything outside the logdir (through a link too), in a folder the listing
        leaves out, or not a source."""
        root, real_root = self.logdir, self._real_root()
        if root is None or real_root is None:
            raise TraceFormatError(rel, "no logdir")
        parts = Path(rel).parts
        if not rel or "\x00" in rel or Path(rel).is_absolute() or ".." in parts:
            raise TraceFormatError(rel, "not a path inside the logdir")
        if any(part.startswith((".", "__")) for part in parts[:-1]):
            raise TraceFormatError(rel, "not a records file or trace in the logdir")
        path = root / rel
        kind = source_kind(path.name)
        try:
            real = os.path.realpath(path)
        except OSError as e:  # a name too long, a loop of links
            raise TraceFormatError(rel, f"cannot open: {e.strerror or e}") from None
        if not _inside(real, real_root):
            raise TraceFormatError(rel, "a link to outside the logdir: not served")
        is_file = os.path.isfile(real)  # False for a name the file system refuses
        if kind is None or not is_file:
            raise TraceFormatError(rel, "not a records file or trace in the logdir")
        parent = Path(rel).parent.as_posix()
        return Path(real), kind, (path.name if parent == "." else parent)

    def report(self, rel: str) -> bytes:
        try:
            path, kind, run = self.resolve(rel)
        except TraceFormatError as e:
            return _encode(ErrorAnswer(error=str(e)))
        try:
            got = self.cache.get(path)
        except TraceFormatError as e:
            answer = ReportAnswer(path=rel, run=run, kind=kind, ok=False, error=str(e))
            return _encode(answer)
        report = got.analysis.report
        extras = report.trace.steps if report.trace is not None else []
        windows = [
            StepRef(step=s.step, name=t.name) for s, t in zip(report.steps, extras, strict=False)
        ]
        answer = ReportAnswer(
            path=rel,
            run=run,
            kind=kind,
            ok=True,
            report=msgspec.Raw(got.report_json),
            verdict_line=got.verdict_line,
            bars=got.bars,
            windows=windows,
            **msgspec.structs.asdict(got.shown),
        )
        return _encode(answer)

    def step_window(
        self, rel: str, step: int | None, *, max_events: int = DEFAULT_MAX_EVENTS
    ) -> bytes:
        """The :class:`~asynctrace.render.views.TimelineWindow` of one step of a trace (the
        first step when ``step`` is None), at most ``max_events`` (1 to
        :data:`~asynctrace.render.views.MAX_EVENTS`) events per lane kind."""
        from asynctrace.render.views import timeline_index, timeline_window

        if not 1 <= max_events <= MAX_EVENTS:
            return _encode(ErrorAnswer(error=f"max_events={max_events}: give 1 to {MAX_EVENTS}"))
        try:
            path, _kind, _run = self.resolve(rel)
            got = self.cache.get(path)
        except TraceFormatError as e:
            return _encode(ErrorAnswer(error=str(e)))
        if got.analysis.trace is None:
            error = f"{rel}: step windows are drawn from traces, not records"
        elif not got.index:
            error = f"{rel}: the trace has no steps"
        elif step is not None and step not in got.index:
            have = list(got.index)
            error = f"{rel}: no step {step} (steps {have[0]} to {have[-1]})"
        else:
            index = 0 if step is None else got.index[step]
            if got.timeline is None:
                # two first requests at once may both make it: the same arrays, one kept
                got.timeline = timeline_index(got.analysis.trace)
            window = timeline_window(got.analysis, index, max_events=max_events, at=got.timeline)
            answer = WindowAnswer(
                **msgspec.structs.asdict(window),
                host_text=[format_ns(h.dur_ns) for h in window.host],
                device_text=[format_ns(d.dur_ns) for d in window.device],
            )
            return _encode(answer)
        return _encode(ErrorAnswer(error=error))

    def compare(self, a: str, b: str) -> bytes:
        """Two sources of any kinds compared (:func:`~asynctrace.analysis.compare.compare` of
        their reports)."""
        from asynctrace.analysis.compare import compare

        try:
            (pa, _, _), (pb, _, _) = self.resolve(a), self.resolve(b)
            la, lb = self.cache.get(pa), self.cache.get(pb)
        except TraceFormatError as e:
            return _encode(CompareAnswer(ok=False, a=a, b=b, error=str(e)))
        comparison = compare(la.analysis.report, lb.analysis.report)
        answer = CompareAnswer(
            ok=True,
            a=a,
            b=b,
            comparison=msgspec.Raw(_encode(comparison)),
            verdict_line_a=comparison.verdict_a.line,
            verdict_line_b=comparison.verdict_b.line,
            figure_rows=comparison_rows(comparison),
        )
        return _encode(answer)
