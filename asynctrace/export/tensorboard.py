"""Per-step scalars and a text summary in TensorBoard's event-file format.

Tags, all under ``asynctrace/`` (one point per step, the step number as TensorBoard's step):

========================  =====================================================
``asynctrace/frontend_ms``   host wall time of the step
``asynctrace/data_wait_ms``  host time waiting for the batch
``asynctrace/device_ms``     device execution time (absent where not measured)
``asynctrace/run_ahead_ms``  device completion − host end of the step (absent where not measured)
``asynctrace/in_flight``     earlier steps unfinished on the device when the step started
``asynctrace/syncs``         synchronizations seen in the step
``asynctrace/sync_wait_ms``  host time blocked in them
``asynctrace/mem_allocated_mb`` / ``asynctrace/mem_reserved_mb``  device memory at step end (MiB)
``asynctrace/phase_forward_ms`` … ``phase_other_ms``  host time by phase (steps with phases)
========================  =====================================================

The figures are the session's :class:`~asynctrace.records.StepRecord` fields converted to the
unit in the tag name and nothing else, so a live session and a records file read back later give
the same curves. Written with tensorboard's own event writer and summary protos: no torch.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import queue
import socket
import struct
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from asynctrace.records import SessionHeader, StepRecord
from asynctrace.records.names import sanitize_name

if TYPE_CHECKING:
    from asynctrace.analysis.bound import Bound
    from asynctrace.analysis.diagnosis import Finding
    from asynctrace.analysis.report import Report
    from asynctrace.records import Note

__all__ = [
    "PHASE_SCALAR_TAGS",
    "SCALAR_TAGS",
    "TEXT_TAG",
    "TensorBoardWriter",
    "step_scalars",
    "summary_markdown",
    "write_records",
]

_NS_PER_MS = 1e6
#: sync sites the text summary lists (the records file has all of them)
_TOP_SITES = 10
_BYTES_PER_MB = float(1 << 20)

#: every scalar tag this module writes, in display order
SCALAR_TAGS: tuple[str, ...] = (
    "asynctrace/frontend_ms",
    "asynctrace/data_wait_ms",
    "asynctrace/device_ms",
    "asynctrace/run_ahead_ms",
    "asynctrace/in_flight",
    "asynctrace/syncs",
    "asynctrace/sync_wait_ms",
    "asynctrace/mem_allocated_mb",
    "asynctrace/mem_reserved_mb",
)
#: the tags of a step's phases, written for the steps that have them (``phases_ns``)
PHASE_SCALAR_TAGS: tuple[str, ...] = (
    "asynctrace/phase_forward_ms",
    "asynctrace/phase_backward_ms",
    "asynctrace/phase_optimizer_ms",
    "asynctrace/phase_other_ms",
)
#: the text summary's tag
TEXT_TAG = "asynctrace/summary"


def step_scalars(step: StepRecord) -> dict[str, float]:
    """The scalars of one step, tag -> value; figures the device could not measure are left out."""
    out: dict[str, float] = {
        "asynctrace/frontend_ms": step.frontend_ns / _NS_PER_MS,
        "asynctrace/data_wait_ms": step.data_wait_ns / _NS_PER_MS,
    }
    if step.device_ns is not None:
        out["asynctrace/device_ms"] = step.device_ns / _NS_PER_MS
    if step.run_ahead_ns is not None:
        out["asynctrace/run_ahead_ms"] = step.run_ahead_ns / _NS_PER_MS
    out["asynctrace/in_flight"] = float(step.in_flight)
    out["asynctrace/syncs"] = float(step.sync_count)
    out["asynctrace/sync_wait_ms"] = step.sync_wait_ns / _NS_PER_MS
    if step.mem_allocated_bytes is not None:
        out["asynctrace/mem_allocated_mb"] = step.mem_allocated_bytes / _BYTES_PER_MB
    if step.mem_reserved_bytes is not None:
        out["asynctrace/mem_reserved_mb"] = step.mem_reserved_bytes / _BYTES_PER_MB
    ph = step.phases_ns
    if ph is not None:
        out["asynctrace/phase_forward_ms"] = ph.forward / _NS_PER_MS
        out["asynctrace/phase_backward_ms"] = ph.backward / _NS_PER_MS
        out["asynctrace/phase_optimizer_ms"] = ph.optimizer / _NS_PER_MS
        out["asynctrace/phase_other_ms"] = ph.other / _NS_PER_MS
    return out


def summary_markdown(report: Report) -> str:
    """A short Markdown summary of a session's records (TensorBoard's text dashboard renders
    Markdown), from their report (``analyze(records)``): what the session's own summary at its
    end shows (:func:`asynctrace.render.text.render_report`, the same sections in Markdown):
    the diagnosis, the bound's figures, the per-step figures, the notes and the top sync
    sites. A live session's TensorBoard text at its end is this of its report."""
    from asynctrace.render.rows import bound_scope, shown_bound, shown_figure_rows
    from asynctrace.render.text import bound_text, known_fix_lines, more_sites_text, site_rows

    h = _header(report)
    lines = [
        f"**{_md(h.name)}** on {_md(h.device_name)} ({_md(h.device_kind)}, "
        f"{'asynchronous' if h.asynchronous else 'synchronous'}), host {_md(h.host)}, "
        f"pid {h.pid}" + (f", rank {h.rank}" if h.rank is not None else ""),
    ]
    steps = report.source.events
    # the headline first, as in every view
    if steps:
        lines += _diagnosis_lines(report.diagnosis)
    incomplete = "" if report.source.complete else " (incomplete file)"
    lines += ["", f"steps recorded: {steps}{incomplete}"]
    b = shown_bound(report)
    if b is not None:
        lines += _bound_lines(b, bound_text(b, scope=bound_scope(report)))
    lines += _figure_lines([row[:4] for row in shown_figure_rows(report)])
    lines += _note_lines(report.notes)
    rows = site_rows(report)
    if rows:
        lines += ["", "| site | op | count | wait | steps |", "|---|---|---|---|---|"]
        lines += [f"| {' | '.join(_md(c) for c in row)} |" for row in rows[:_TOP_SITES]]
        if len(rows) > _TOP_SITES:
            more = more_sites_text(report)
            lines.append(f"\n… and {len(rows) - _TOP_SITES} more site(s) {more}")
        fixes = known_fix_lines(report.sync_sites[:_TOP_SITES])
        lines += ["", *(f"- {_md(x.strip())}" for x in fixes)] if fixes else []
    return "\n".join(lines)


def _header(report: Report) -> SessionHeader:
    if report.source.session is None:
        raise ValueError(
            f"{report.source.path}: the report of a trace; TensorBoard's asynctrace scalars "
            "and summary are written from a session's records"
        )
    return report.source.session


def _note_lines(notes: Sequence[Note]) -> list[str]:
    # the text only: the code is for programs
    return ["", *(f"- {_md(n.text)}" for n in notes)] if notes else []


def _bound_lines(b: Bound, text: Sequence[str]) -> list[str]:
    """The bound's lines (:func:`~asynctrace.render.text.bound_text`), its label in bold and
    the lines under it a list."""
    text = [_md(x) for x in text]
    label = _md(f"bound: {b.label}")
    if text[0].startswith(label):
        text[0] = f"bound: **{_md(b.label)}**{text[0][len(label) :]}"
    return ["", *(f"- {x.strip()}" if x.startswith(" ") else x for x in text)]


def _diagnosis_lines(diagnosis: Sequence[Finding]) -> list[str]:
    """The diagnosis (:func:`~asynctrace.render.diagnosis.diagnosis_text`): the headline in
    bold, its next step and evidence, then the other findings as a list."""
    from asynctrace.render.diagnosis import diagnosis_text

    text = diagnosis_text(diagnosis)
    if not text:
        return []
    head, *rest = text
    code = diagnosis[0].code
    lines = ["", f"**{_md(code)}**{_md(head[len(code) :])}" if head.startswith(code) else _md(head)]
    lines += [f"- {_md(x.strip())}" for x in rest]
    return lines


def _figure_lines(rows: Sequence[Sequence[str]]) -> list[str]:
    """The per-step figures' table."""
    lines: list[str] = []
    if rows:
        lines += ["", "| per step | mean | median | p90 |", "|---|---|---|---|"]
        lines += [f"| {' | '.join(_md(c) for c in row)} |" for row in rows]
    return lines


@functools.cache
def _scalar_metadata() -> Any:
    """The summary metadata tensorboard's ``scalar_pb`` attaches, built once."""
    from tensorboard.plugins.scalar import metadata

    return metadata.create_summary_metadata(display_name=None, description=None)


def _float_tensor(value: float) -> Any:
    """A 0-d float tensor proto, as ``scalar_pb`` writes it, without its numpy round trip
    (20 µs a value there, 3 µs here)."""
    from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2, types_pb2

    return tensor_pb2.TensorProto(
        dtype=types_pb2.DT_FLOAT,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(),
        float_val=[value],
    )


_MD_ESCAPES = {
    **{c: "\\" + c for c in "\\`*_[]|#"},
    # Python-Markdown (the text plugin's renderer) has no "\<" escape, so the backslash would
    # show in every "<module>" site; entities render as the character, and "&" is escaped so
    # that a name holding "&lt;" is not decoded.
    "<": "&lt;",
    ">": "&gt;",
    "&": "&amp;",
    # a line break would end the table row (or paragraph) in the middle of a name
    "\n": " ",
    "\r": " ",
}
_MD_TABLE = str.maketrans(_MD_ESCAPES)


def _md(s: str) -> str:
    # TensorBoard's text plugin renders Markdown and sanitises HTML; escaping the table/markup
    # characters keeps file paths and op names from breaking the layout.
    return s.translate(_MD_TABLE)


#: what the writing thread is handed: ("step", StepRecord, step, wall time), ("text",
#: Summary, step, wall time) or ("flush", threading.Event, 0, 0.0)
_Item = tuple[str, Any, int, float]


#: per-process file counter, as tensorboard's own writers number theirs
_file_ids = itertools.count()
#: flush the event file at most this often while steps come in (close() always flushes)
_FLUSH_SECS = 30.0


def _frame(data: bytes) -> bytes:
    """One TFRecord: length, its masked CRC-32C, the data, its masked CRC-32C (what
    tensorboard's RecordWriter writes)."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    header = struct.pack("<Q", len(data))
    return (
        header
        + struct.pack("<I", masked_crc32c(header))
        + data
        + struct.pack("<I", masked_crc32c(data))
    )


class TensorBoardWriter:
    """Writes asynctrace scalars into ``<logdir>/<run>/`` as a TensorBoard event file.

    Usable live (the session calls :meth:`add_step` after each collected step) and offline
    (:func:`write_records`). A context manager; :meth:`close` flushes.

    The file is ``events.out.tfevents.<time>.<host>.<pid>.<counter>``, created exclusively (a
    name another writer holds moves the counter on); ``run`` and the host name are sanitized
    (no separator, no ``..``), so the file always lands inside ``logdir``.

    With ``background=True`` (what a live session uses) :meth:`add_step` only queues the step
    (about a microsecond) and one daemon thread of ours builds the protos and writes them; at
    most ``max_queued`` steps wait, beyond that steps are dropped and counted in
    :attr:`dropped` rather than blocking the training loop. An error of the writing thread
    (disk full, folder gone) ends its writing quietly (no traceback of a dying thread) and is
    raised by the next :meth:`add_step`, :meth:`flush` or :meth:`close`. (tensorboard's own
    ``EventFileWriter`` is not used: its thread prints its traceback on such an error, and it
    puts the raw host name into the file name.)
    """

    def __init__(
        self,
        logdir: str | os.PathLike[str],
        *,
        run: str | None = None,
        background: bool = False,
        max_queued: int = 65536,
    ) -> None:
        self.path = Path(logdir) / sanitize_name(run, default="run") if run else Path(logdir)
        self.path.mkdir(parents=True, exist_ok=True)
        self._file: BinaryIO = self._create()
        self._closed = False
        #: steps not written because the background queue was full
        self.dropped = 0
        self._error: BaseException | None = None
        self._next_flush = 0.0
        self._queue: queue.Queue[_Item | None] | None = None
        self._thread: threading.Thread | None = None
        try:
            from tensorboard.compat.proto import event_pb2

            # the first record of every event file, as tensorboard writes it
            self._write_event(
                event_pb2.Event(
                    wall_time=time.time(),
                    file_version="brain.Event:2",
                    source_metadata=event_pb2.SourceMetadata(writer="asynctrace"),
                )
            )
            self._file.flush()
        except BaseException:
            with contextlib.suppress(OSError):
                self._file.close()
            raise
        if background:
            self._queue = queue.Queue(maxsize=max_queued)
            self._thread = threading.Thread(
                target=self._drain, name="asynctrace-tensorboard", daemon=True
            )
            self._thread.start()

    def _create(self) -> BinaryIO:
        host = sanitize_name(socket.gethostname(), default="host")
        stamp = int(time.time())
        while True:
            name = f"events.out.tfevents.{stamp:010d}.{host}.{os.getpid()}.{next(_file_ids)}"
            try:
                # "x": a file of that name (torch's SummaryWriter numbers its own from 0 too)
                # is never written over
                return open(self.path / name, "xb")
            except FileExistsError:
                continue

    # ---------------------------------------------------------------- writing (one thread)
    def _write_event(self, event: Any) -> None:
        self._file.write(_frame(event.SerializeToString()))

    def _emit(self, summary: Any, step: int, wall_time: float | None) -> None:
        from tensorboard.compat.proto import event_pb2

        self._write_event(
            event_pb2.Event(
                wall_time=time.time() if wall_time is None else wall_time,
                step=step,
                summary=summary,
            )
        )

    def _write_step(self, step: StepRecord, wall_time: float) -> None:
        from tensorboard.compat.proto import summary_pb2

        value = summary_pb2.Summary.Value
        meta = _scalar_metadata()
        summary = summary_pb2.Summary(
            value=[
                value(tag=tag, metadata=meta, tensor=_float_tensor(v))
                for tag, v in step_scalars(step).items()
            ]
        )
        self._emit(summary, step.step, wall_time)

    def _write_item(self, item: _Item) -> None:
        kind, payload, step, wall_time = item
        if kind == "step":
            self._write_step(payload, wall_time)
        elif kind == "text":
            self._emit(payload, step, wall_time)
        else:  # "flush": the caller waits on the event
            try:
                self._file.flush()
            finally:
                payload.set()
            return
        now = time.monotonic()
        if now >= self._next_flush:
            # TensorBoard reads the file while it grows: what is written shows within 30 s
            self._file.flush()
            self._next_flush = now + _FLUSH_SECS

    def _drain(self) -> None:
        q = self._queue
        assert q is not None
        while True:
            item = q.get()
            if item is None:
                return
            if self._error is not None:
                if item[0] == "flush":
                    item[1].set()
                continue  # emptied so that nothing waits on a full queue
            try:
                self._write_item(item)
            except BaseException as e:  # handed to the caller's thread, never printed here
                self._error = e
                if item[0] == "flush":
                    item[1].set()

    def _join(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None and self._queue is not None:
            self._queue.put(None)
            thread.join()

    def _raise_error(self) -> None:
        error = self._error
        if error is not None:
            raise error

    # ---------------------------------------------------------------- the caller's side
    def add_step(self, step: StepRecord, *, wall_time: float | None = None) -> None:
        """The scalars of one step (see :data:`SCALAR_TAGS`), at TensorBoard step ``step.step``."""
        self._raise_error()
        when = time.time() if wall_time is None else wall_time
        q = self._queue
        if q is None:
            self._write_item(("step", step, step.step, when))
            return
        try:
            q.put_nowait(("step", step, step.step, when))
        except queue.Full:
            self.dropped += 1

    def add_text(self, markdown: str, *, tag: str = TEXT_TAG, step: int = 0) -> None:
        from tensorboard.plugins.text import summary_v2 as text_summary

        self._raise_error()
        item: _Item = ("text", text_summary.text_pb(tag, markdown), step, time.time())
        if self._queue is None or self._thread is None:
            self._write_item(item)
        else:
            # in order after the queued steps; waits for room rather than dropping the summary
            self._queue.put(item)

    def flush(self) -> None:
        self._raise_error()
        if self._queue is None or self._thread is None:
            self._file.flush()
            return
        done = threading.Event()
        self._queue.put(("flush", done, 0, 0.0))
        done.wait()
        self._raise_error()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._join()
            if self._error is None:
                self._file.flush()
        finally:
            try:
                self._file.close()
            except OSError as e:
                # the flush inside close() met the full disk
                if self._error is None:
                    self._error = e
        self._raise_error()

    def __enter__(self) -> TensorBoardWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def write_records(
    report: Report, logdir: str | os.PathLike[str], *, run: str | None = None
) -> Path:
    """Write a session's records, as their report (``analyze(records)``), as TensorBoard
    scalars + text; returns the run folder.

    ``run`` defaults to the session's name (and rank), so sessions land side by side; a name
    from the file (which may come from anywhere) is sanitized like every run name.
    """
    h = _header(report)
    if run is None:
        run = h.name + (f"_rank{h.rank}" if h.rank is not None else "")
    started_s = h.started_unix_ns / 1e9
    with TensorBoardWriter(logdir, run=run) as w:
        _add_steps(w, report.steps, started_s)
        w.add_text(summary_markdown(report))
        return w.path


def _add_steps(w: TensorBoardWriter, steps: Iterable[StepRecord], started_s: float) -> None:
    for s in steps:
        w.add_step(s, wall_time=started_s + s.start_ns / 1e9)
