"""The step clock: step boundaries, device markers and the steps still waiting for them.

One device marker per boundary serves as the end of one step and the start of the next. A
closed step waits as a :class:`PendingStep` until its end marker is seen executed (a
non-blocking ``query()`` at each later boundary); then its :class:`~asynctrace.records.
StepRecord` is appended to :attr:`StepClock.out`, in step order, and ``deliver`` is called
when a sink wants each record the moment it is known (``eager``) or once :data:`BATCH` of them
wait. Only :meth:`StepClock.drain`, at the session's end, waits for markers. On a synchronous
device (the CPU backend) a step's work is done when the host returns: the record is collected
at once, without markers.

This is the hot path of a session: everything here runs once per step, so the code is plain
attribute access and no allocation beyond the record, built once, and on an asynchronous
device the pending step (a C-built struct).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import msgspec

from asynctrace.records import Note, StepPhases, StepRecord
from asynctrace.records.units import format_ns

if TYPE_CHECKING:
    from asynctrace.capture._nsys import NsysCapture
    from asynctrace.capture.devices import Device
    from asynctrace.capture.profiler import DeepProfiler
    from asynctrace.capture.syncs import SyncDetector

__all__ = [
    "BACKWARD",
    "BATCH",
    "DATA",
    "FORWARD",
    "NEVER",
    "OPTIMIZER",
    "OTHER",
    "PendingStep",
    "StepClock",
]

#: the phases of a step (:class:`~asynctrace.records.StepPhases`), as indices of its counters
DATA: Final = 0
FORWARD: Final = 1
BACKWARD: Final = 2
OPTIMIZER: Final = 3
OTHER: Final = 4

#: a step number no session reaches
NEVER: Final = 1 << 62
#: records collected before they are delivered to the sinks that take them in batches (the
#: records file, the summary): one call per batch instead of one per step and sink
BATCH: Final = 256


class PendingStep(msgspec.Struct, gc=False):
    """A closed step whose device figures wait for its end marker; host times in ns.

    Built in C, positionally, once a step (no keyword parsing, no GC tracking: about a tuple's
    cost), and read by name; its record is built once its device figures are known (a record
    built at the close and copied with them then cost a GPU's step 3 % more)."""

    index: int
    start_ns: int
    frontend_ns: int
    data_wait_ns: int
    #: as polled when the step started (exact once the earlier markers' times are known)
    in_flight: int
    sync_count: int
    sync_wait_ns: int
    mem: tuple[int, int] | None
    start_ev: Any
    end_ev: Any
    #: host time of the step's end
    end_ns: int
    #: ns by phase (DATA … OTHER), None where no phase boundary was seen
    phases: list[int] | None


class StepClock:
    """Opens and closes steps on ``device`` and collects each step's record when it is known.

    The parts a boundary drives (NVTX push/pop, the nsys capture window, the deep-mode
    profiler) are attributes set by the session before :meth:`start`; each is optional.
    """

    def __init__(self, device: Device, *, max_pending: int, deliver: Callable[[], None]) -> None:
        self.device = device
        self.max_pending = max_pending
        #: the records collected and not yet delivered, in step order (``deliver`` takes them)
        self.out: list[StepRecord] = []
        #: whether ``deliver`` runs after every record (a sink wants each as it is known), not
        #: only once ``batch`` (:data:`BATCH`) records wait
        self.eager = False
        self.batch = BATCH
        self.deliver = deliver
        self.now: Callable[[], int] = device.host_now_ns
        self._record: Callable[[], Any] = device.record
        self._query: Callable[[Any], bool] = device.query
        self._memory: Callable[[], tuple[int, int] | None] = device.memory
        self.asynchronous = bool(device.asynchronous)
        self.t0 = 0
        #: an empty marker needs this long to execute and be seen; a step whose end marker
        #: executed within it of the next step's start was not really still running
        self.latency_ns = 0
        # the open step
        self.open = False
        self.index = 0
        self.start_ns = 0
        self._start_ev: Any = None
        #: figures of the open step the session adds to (syncs; the data wait of a
        #: session.steps() fetch that no phase boundary marked, see _close)
        self.data_wait_ns = 0
        self.sync_count = 0
        self.sync_wait_ns = 0
        self._in_flight = 0
        #: the open step's ns by phase, made at its first phase boundary (:meth:`mark`); the
        #: phase it is in, and since when
        self.ph: list[int] | None = None
        self.ph_cur = FORWARD
        self.ph_t = 0
        # closed steps whose markers have not been seen executed, oldest first
        self.pending: deque[PendingStep] = deque()
        # the end marker of the last step written and its device time: the next step's start
        self._last_ev: Any = None
        self._last_ev_ns = 0
        # execution times of recent steps' end markers (increasing: one stream runs them in
        # order), for the exact in-flight count; None once a dropped step broke the chain
        self._ends: deque[int] | None = deque()
        #: steps written without device figures because too many were pending
        self.dropped = 0
        self.collected_at_exit = 0
        self.exit_wait_ns = 0
        #: what :meth:`drain` found (steps whose figures could not be collected)
        self.notes: list[Note] = []
        # the parts a boundary drives
        self.nvtx_push: Callable[[Any], None] | None = None
        self.nvtx_pop: Callable[[], None] | None = None
        self.nvtx_handle: Any = None
        self.nvtx_handle_for: Callable[[int], Any] | None = None
        self.nsys: NsysCapture | None = None
        self.profiler: DeepProfiler | None = None
        #: the sync detector, set only where deep mode runs beside it: held off in windows
        self.held_detector: SyncDetector | None = None
        #: a sampled lint: at the start of step ``lint_at``, ``lint_toggle(index)`` turns it
        #: on or off and returns the next step where it turns (one int compare a step)
        self.lint_at = NEVER
        self.lint_toggle: Callable[[int], int] | None = None
        #: on-demand deep windows (``_trigger.py``): ``poll(index, now)`` at the start of step
        #: ``poll_step`` (which the trigger moves on, about every half second of steps)
        self.poll: Callable[[int, int], None] | None = None
        self.poll_step = NEVER
        #: the first step either of the two acts at: one int compare a step for both
        self.event_at = NEVER

    # ------------------------------------------------------------------ boundaries
    def start(self, latency_ns: int) -> None:
        """The session starts: step 0 opens now."""
        self.latency_ns = max(0, latency_ns)
        self.t0 = self.now()
        self.boundary(True, self.t0)

    def open_call(self) -> None:
        """A step that is one call (``train_step``) starts; one left open is dropped."""
        self.boundary(False)

    def close_call(self) -> None:
        """The call returned: its step ends, and none starts."""
        if self.open:
            self._close(self.now(), self._record() if self.asynchronous else None)

    def boundary(self, close: bool = True, now: int | None = None) -> None:
        """End the open step (if any) and start the next, at ``now`` (the host clock's now by
        default), with one device marker for both: the end of one step is the start of the
        next. One call, not one per half: it runs every step.

        ``close=False``: the open step is dropped instead (a ``train_step`` call starts: a step
        left open is not one)."""
        if now is None:
            now = self.now()
        ev = self._record() if self.asynchronous else None
        if self.open:
            if close:
                self._close(now, ev)
            else:
                self.discard_open()
        if self.asynchronous:
            pending = self.pending
            query = self._query
            while pending and query(pending[0].end_ev):
                self._write_async(pending.popleft())
            # one stream runs markers in order: every step behind the oldest unexecuted one is
            # still in flight
            self._in_flight = len(pending)
        self.start_ns = now
        self._start_ev = ev
        # (the phase and its start are read only once a mark made ph: see mark)
        self.ph = None
        self.data_wait_ns = 0
        self.sync_count = 0
        self.sync_wait_ns = 0
        nsys = self.nsys
        if nsys is not None:
            nsys.on_step_start(self.index)
        if self.index >= self.event_at:
            self.events(now)
        held = self.held_detector
        if held is not None:
            # the lint would fill deep mode's profiled window with its own dispatch events
            held.suspend_while(self.profiler is not None and self.profiler.active)
        push = self.nvtx_push
        if push is not None:
            h = self.nvtx_handle
            push(h if h is not None else self.nvtx_handle_for(self.index))  # type: ignore[misc]
        # open only once its range is pushed: whatever raised before leaves nothing to pop
        self.open = True

    def events(self, now: int) -> None:
        """The sampled lint's turn and the trigger's poll, at the start of a step where one
        is due (``event_at``)."""
        index = self.index
        toggle = self.lint_toggle
        if toggle is not None and index >= self.lint_at:
            self.lint_at = toggle(index)
        poll = self.poll
        if poll is not None and index >= self.poll_step:
            poll(index, now)
        self.reschedule()

    def reschedule(self) -> None:
        self.event_at = min(
            self.lint_at if self.lint_toggle is not None else NEVER,
            self.poll_step if self.poll is not None else NEVER,
        )

    def mark(self, phase: int) -> int:
        """A phase boundary of the open step: the time since the last one goes to the phase
        the step was in, and the step is in ``phase`` from now (returned)."""
        now = self.now()
        ph = self.ph
        if ph is None:
            # the step's first mark: it was in the forward phase since it started
            ph = self.ph = [0, 0, 0, 0, 0]
            self.ph_cur = FORWARD
            self.ph_t = self.start_ns
        ph[self.ph_cur] += now - self.ph_t
        self.ph_t = now
        self.ph_cur = phase
        return now

    def _close(self, now: int, ev: Any) -> None:
        """The open step ends at ``now`` (``ev``: its end marker)."""
        # read before the step counts as closed: if the device raises here, the session's exit
        # still finds the step open and pops its range
        mem = self._memory()
        prof = self.profiler
        if prof is not None:
            # from another thread it raises here, leaving the session as if step() had not
            # been called (rather than in prof.step(), after the step was closed)
            prof.check_thread()
        self.open = False
        pop = self.nvtx_pop
        if pop is not None:
            pop()
        if prof is not None:
            prof.step()
        index = self.index
        self.index = index + 1
        frontend_ns = now - self.start_ns
        ph = self.ph
        data_wait_ns = self.data_wait_ns
        if ph is not None:
            ph[self.ph_cur] += now - self.ph_t
            if data_wait_ns:
                # session.steps()' fetch, set without a mark (one clock read less a step): it
                # came before any mark, so in the forward phase a step starts in
                ph[FORWARD] -= data_wait_ns
                ph[DATA] += data_wait_ns
            # one measure of the data wait: the data phase
            data_wait_ns = ph[DATA]
        if not self.asynchronous:
            # done when the host returns: the device's figures are the host's
            self._collect(
                index,
                self.start_ns,
                frontend_ns,
                data_wait_ns,
                self.sync_count,
                self.sync_wait_ns,
                mem,
                frontend_ns,
                0,
                0,
                ph,
            )
            return
        self.pending.append(
            PendingStep(
                index,
                self.start_ns,
                frontend_ns,
                data_wait_ns,
                self._in_flight,
                self.sync_count,
                self.sync_wait_ns,
                mem,
                self._start_ev,
                ev,
                now,
                ph,
            )
        )
        if len(self.pending) > self.max_pending:
            self._drop_oldest()

    def discard_open(self) -> None:
        """Drop the open step (incomplete: the loop broke, the call raised, the session ends)."""
        if self.open:
            self.open = False
            pop = self.nvtx_pop
            if pop is not None:
                pop()

    # ------------------------------------------------------------------ collecting
    def _write_async(self, step: PendingStep) -> None:
        """Collect a pending step whose end marker executed, with its device figures."""
        executed_at = self.device.executed_at_ns
        eev, sev = step.end_ev, step.start_ev
        end_dev = executed_at(eev)
        start_dev = self._last_ev_ns if sev is self._last_ev else executed_at(sev)
        self._last_ev = eev
        self._last_ev_ns = end_dev
        in_flight = step.in_flight
        ends = self._ends
        if ends is not None:
            # exact, now that the earlier markers' execution times are known: the earlier steps
            # whose end marker executed after this step started (beyond the marker latency)
            limit = step.start_ns + self.latency_ns
            while ends and ends[0] <= limit:
                ends.popleft()
            in_flight = len(ends)
            ends.append(end_dev)
        self._collect_pending(step, end_dev - start_dev, end_dev - step.end_ns, in_flight)

    def _drop_oldest(self, *, overflow: bool = True) -> None:
        """Write the oldest pending step without device figures."""
        step = self.pending.popleft()
        if overflow:
            self.dropped += 1
        self._last_ev = None
        # an end time is unknown from here on: fall back to the count polled at step start
        self._ends = None
        self._collect_pending(step, None, None, step.in_flight)

    def _collect_pending(
        self, p: PendingStep, device_ns: int | None, run_ahead_ns: int | None, in_flight: int
    ) -> None:
        self._collect(
            p.index,
            p.start_ns,
            p.frontend_ns,
            p.data_wait_ns,
            p.sync_count,
            p.sync_wait_ns,
            p.mem,
            device_ns,
            run_ahead_ns,
            in_flight,
            p.phases,
        )

    def _collect(
        self,
        index: int,
        start_ns: int,
        frontend_ns: int,
        data_wait_ns: int,
        sync_count: int,
        sync_wait_ns: int,
        mem: tuple[int, int] | None,
        device_ns: int | None,
        run_ahead_ns: int | None,
        in_flight: int,
        ph: list[int] | None,
    ) -> None:
        """A step's record goes out, with its device figures (the one place it is built)."""
        out = self.out
        out.append(
            StepRecord(
                step=index,
                start_ns=start_ns - self.t0,
                frontend_ns=frontend_ns,
                data_wait_ns=data_wait_ns,
                device_ns=device_ns,
                run_ahead_ns=run_ahead_ns,
                in_flight=in_flight,
                sync_count=sync_count,
                sync_wait_ns=sync_wait_ns,
                mem_allocated_bytes=None if mem is None else mem[0],
                mem_reserved_bytes=None if mem is None else mem[1],
                phases_ns=None
                if ph is None
                else StepPhases(
                    data=ph[0], forward=ph[1], backward=ph[2], optimizer=ph[3], other=ph[4]
                ),
            )
        )
        if self.eager or len(out) >= self.batch:
            self.deliver()

    def drain(self) -> None:
        """Collect every pending step, waiting for its marker if needed (only ever at exit)."""
        pending = self.pending
        self.collected_at_exit = len(pending)
        if not pending:
            return
        t = self.now()
        failed = 0
        try:
            while pending:
                step = pending[0]
                try:
                    if not self._query(step.end_ev):
                        self.device.wait(step.end_ev)
                except Exception:
                    # a device error (for example the one that ended the session): the figures
                    # cannot be collected, but the host-side ones are still true
                    failed += 1
                    self._drop_oldest(overflow=False)
                    continue
                self._write_async(pending.popleft())
        finally:
            self.exit_wait_ns = self.now() - t
            if failed:
                self.notes.append(
                    Note(
                        code="markers-failed-at-exit",
                        text=f"{failed} step(s) have no device figures: their markers failed "
                        "at exit",
                    )
                )
            if pending:
                # the wait was interrupted (Ctrl-C): the steps' host figures are still written
                interrupted = len(pending)
                while pending:
                    self._drop_oldest(overflow=False)
                self.notes.append(
                    Note(
                        code="exit-wait-interrupted",
                        text=f"{interrupted} step(s) have no device figures: the wait for them "
                        "at exit was interrupted",
                    )
                )

    def end_notes(self) -> list[Note]:
        """What the clock has to say at the end, beyond :attr:`notes`."""
        notes = list(self.notes)
        if self.dropped:
            notes.append(
                Note(
                    code="pending-steps-dropped",
                    text=f"{self.dropped} step(s) have no device figures: more than "
                    f"{self.max_pending} steps were waiting for the device at once, so the "
                    f"oldest were written without them (in_flight is capped at "
                    f"{self.max_pending})",
                )
            )
        if self.collected_at_exit:
            notes.append(
                Note(
                    code="collected-at-exit",
                    text=f"{self.collected_at_exit} step(s) were still pending at exit; waited "
                    f"{format_ns(self.exit_wait_ns)} for them",
                )
            )
        return notes
