"""The parts a capture session runs beside its step clock, and undoes at its end.

The sync detector (with the sampled lint's turns), the optimizer hook that makes each
``optimizer.step()`` a boundary, the phase marks, NVTX step ranges, the nsys capture range,
deep mode (``profile=``) and the on-demand trigger with its windows. Each changes something
process-wide (a hook, torch's dispatch-mode stack, the profiler, a signal handler);
:meth:`SessionParts.stop` undoes every one, each whatever the others did.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asynctrace.capture._clock import StepClock
from asynctrace.capture._lint_sample import LintSampler
from asynctrace.capture._nsys import NsysCapture
from asynctrace.capture.options import TraceOptions
from asynctrace.capture.sinks import worse_failure
from asynctrace.errors import AsyncTraceWarning, CaptureError
from asynctrace.records import Note
from asynctrace.records.names import sanitize_name

if TYPE_CHECKING:
    from asynctrace.capture.profiler import DeepProfiler
    from asynctrace.capture.syncs import SyncDetector, SyncEvent
    from asynctrace.capture.trigger import Trigger

__all__ = ["SessionParts"]


class SessionParts:
    """One run's parts, as ``options`` ask for them.

    ``on_sync`` gets each sync the detector sees, ``on_optimizer_step`` each optimizer step
    (torch's hook arguments), ``on_trace`` each trace file deep mode writes;
    ``others_profiling()`` says whether a session of another thread runs deep mode.
    """

    def __init__(
        self,
        options: TraceOptions,
        *,
        clock: StepClock,
        now: Callable[[], int],
        device_kind: str,
        on_sync: Callable[[SyncEvent], None],
        on_optimizer_step: Callable[..., None],
        on_trace: Callable[[Path], None],
        others_profiling: Callable[[], bool],
    ) -> None:
        self.options = options
        self._clock = clock
        self._now = now
        self._device_kind = device_kind
        self._on_sync = on_sync
        self._on_optimizer_step = on_optimizer_step
        self._on_trace = on_trace
        self._others_profiling = others_profiling
        self.detector: SyncDetector | None = None
        self.profiler: DeepProfiler | None = None
        self._lint_sampler: LintSampler | None = None
        self._held_steps = 0
        self._hook: Any = None
        self._nsys: NsysCapture | None = None
        self._phases = False
        self._trigger: Trigger | None = None
        # a stopped trigger whose control file goes once the sinks are finished
        self._trigger_files: Trigger | None = None
        self._window_notes: list[Note] = []
        self._name = "session"
        self._rank: int | None = None

    # ------------------------------------------------------------------ what runs
    def sync_detection(self) -> str:
        """The detector the run has ("auto" resolved), said before it starts."""
        if self.options.detect_syncs == "off":
            return "off"
        if self._lint_sampled():
            return "lint-sampled"
        from asynctrace.capture.syncs import _resolve

        return _resolve(self.options.detect_syncs)

    def _lint_sampled(self) -> bool:
        """``detect_syncs="auto"`` where no CUDA hooks can run (a CPU): the lint, on a sample
        of the steps (:mod:`~asynctrace.capture._lint_sample`), so a default session names the
        syncs that would block an accelerator at a cost within noise. Not beside deep mode,
        whose windows hold the lint off."""
        if self.options.detect_syncs != "auto" or self.options.profiling:
            return False
        from asynctrace.capture.syncs import _hub, _resolve

        # one thread's dispatch-mode stack at a time: a session of another thread has it
        return _resolve("auto") == "off" and not _hub.lint_elsewhere()

    def bound_to_thread(self) -> list[str]:
        """What only the thread that started the parts can undo: torch's dispatch-mode stack
        (the lint) and torch.profiler (stopping it from another thread kills the process)."""
        bound = []
        detector = self.detector
        if detector is not None and detector.active == "lint":
            bound.append("lint sync detection")
        if self.profiler is not None or self._clock.profiler is not None:
            bound.append("deep mode (profile=)")
        return bound

    def notes(self, steps: int) -> list[Note]:
        """The session's end notes about what the parts saw of ``steps`` steps."""
        notes = [] if self._lint_sampler is None else [self._lint_sampler.note(steps)]
        notes += self._window_notes
        if self._held_steps:
            notes.append(
                Note(
                    code="lint-held-off",
                    text=f"{self._held_steps} step(s) in deep mode's profiled windows have no "
                    "lint sync count: the lint was held off there; their syncs are in the "
                    "profiler trace",
                )
            )
        return notes

    # ------------------------------------------------------------------ start
    def start(self, *, name: str, rank: int | None) -> None:
        """Each part the options ask for, in an order that lets each see the ones before."""
        self._name, self._rank = name, rank
        opts = self.options
        clock = self._clock
        if opts.phases:
            # before the optimizer_steps boundary hook: an optimizer step's end is marked
            # before the boundary it makes closes the step
            from asynctrace.capture import _phases

            _phases.register(clock)
            self._phases = True
        if opts.detect_syncs != "off":
            self._start_detector()
        if opts.optimizer_steps:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            self._hook = register_optimizer_step_post_hook(self._on_optimizer_step)
        if opts.nvtx:
            self._setup_nvtx()
        if opts.nsys_capture is not None:
            self._nsys = clock.nsys = NsysCapture(opts.nsys_capture, device_kind=self._device_kind)
        if opts.profiling:
            self._start_profiler()
        if opts.on_demand and opts.write:
            self._start_trigger()

    def _start_detector(self) -> None:
        from asynctrace.capture.syncs import SyncDetector

        sampled = self._lint_sampled()
        detector = SyncDetector(
            self._on_sync, mode="lint" if sampled else self.options.detect_syncs
        )
        try:
            detector.start()
        except CaptureError:
            if not sampled:
                raise
            # a lint of another thread's session started meanwhile: the default has none
            return
        self.detector = detector
        if sampled:
            # the first steps run linted; the clock calls back where the sample turns
            clock = self._clock
            sampler = self._lint_sampler = LintSampler(detector, self._now)
            clock.lint_toggle = sampler.toggle
            clock.lint_at = sampler.start(clock.index)
            clock.reschedule()

    def _setup_nvtx(self) -> None:
        from asynctrace.capture import ranges

        clock = self._clock
        clock.nvtx_push = ranges._push
        clock.nvtx_pop = ranges._pop
        if ranges.nvtx_attached():
            # a tool is listening: name each range after its step, like torch's ProfilerStep#N
            handle = ranges._handle

            def handle_for(i: int) -> Any:
                return handle(f"step {i}", cache=False)

            clock.nvtx_handle = None
            clock.nvtx_handle_for = handle_for
        else:
            # nobody sees the name: one handle serves every step (keeps the depth count right)
            clock.nvtx_handle = ranges._handle("step")

    def _start_profiler(self) -> None:
        from asynctrace.capture.profiler import make_profiler

        opts = self.options
        folder = Path(opts.dir)
        profiler = make_profiler(
            opts.profile,
            dir=folder,
            run=sanitize_name(self._name),
            on_trace=self._on_trace,
            strict=opts.strict,
        )
        if profiler is None:
            return
        try:
            profiler.start()
        except OSError as e:
            if opts.strict:
                raise CaptureError(f"cannot write profiler traces under {folder}: {e}") from e
            warnings.warn(
                f"asynctrace could not write profiler traces under {folder}: {e}; "
                "training continues without deep mode",
                AsyncTraceWarning,
                stacklevel=4,
            )
            return
        self.profiler = self._clock.profiler = profiler
        self._clock.held_detector = self.detector

    # ------------------------------------------------------------------ on-demand windows
    def _start_trigger(self) -> None:
        from asynctrace.capture.trigger import Trigger

        trigger = Trigger(
            dir=Path(self.options.dir),
            name=self._name,
            rank=self._rank,
            clock=self._clock,
            make_profiler=self._window_profiler,
            hold_lint=self._hold_lint,
            on_window=self._window_done,
        )
        try:
            trigger.start()
        except OSError:
            # a folder that cannot be written: the records sink says so; no on-demand windows
            trigger.stop()
            return
        self._trigger = trigger

    def _window_profiler(self, start: int, steps: int) -> DeepProfiler | None:
        """Deep mode for steps ``start`` … ``start + steps - 1``, opened now, at the start of
        step ``start - 1`` (its warm-up); None, with a warning, where it cannot run."""
        from asynctrace.capture.profiler import DeepProfiler, Profile

        if self.profiler is not None or self._others_profiling():
            warnings.warn(
                "asynctrace: deep mode (profile=) already runs: no on-demand window",
                AsyncTraceWarning,
                stacklevel=5,
            )
            return None
        try:
            prof = DeepProfiler(
                Profile(wait=0, warmup=1, active=steps, skip_first=start - 1),
                dir=Path(self.options.dir),
                run=sanitize_name(self._name),
                on_trace=self._on_trace,
            )
            prof.start(first_step=start - 1)
        except Exception as e:
            warnings.warn(
                f"asynctrace: the on-demand deep window could not start ({type(e).__name__}: "
                f"{e}); the job goes on",
                AsyncTraceWarning,
                stacklevel=5,
            )
            return None
        self._clock.profiler = prof
        return prof

    def _hold_lint(self, hold: bool) -> None:
        # the lint's dispatch events would fill the profiled window (as in deep mode)
        detector = self.detector
        if detector is None:
            return
        with contextlib.suppress(Exception):
            if hold:
                detector.suspend()
            else:
                detector.resume()

    def _window_done(self, window: dict[str, Any]) -> None:
        traces = ", ".join(window.get("traces", ())) or "no trace written"
        self._window_notes.append(
            Note(
                code="deep-window",
                text=f"steps {window['start']}-{window['stop'] - 1} were profiled on demand "
                f"(request {window['id']}): {traces}",
            )
        )

    def remove_trigger_files(self) -> None:
        """The control file of a stopped trigger (once the sinks are finished)."""
        trigger, self._trigger_files = self._trigger_files, None
        if trigger is not None:
            trigger.remove_files()

    # ------------------------------------------------------------------ stop
    def stop(self) -> None:
        """Undo everything :meth:`start` changed, each part whatever the others did; raises
        the worst failure once all were tried."""
        parts: Sequence[Callable[[], None]] = (
            self._stop_trigger,
            self._stop_profiler,
            self._stop_nsys,
            self._remove_hook,
            self._stop_phases,
            self._stop_detector,
        )
        failure: BaseException | None = None
        for part in parts:
            try:
                part()
            except BaseException as e:
                failure = worse_failure(failure, e)
        if failure is not None:
            raise failure

    def _stop_trigger(self) -> None:
        trigger, self._trigger = self._trigger, None
        if trigger is not None:
            self._trigger_files = trigger
            trigger.stop()

    def _stop_profiler(self) -> None:
        prof, self.profiler = self.profiler, None
        self._clock.profiler = None
        self._clock.held_detector = None
        if prof is not None:
            prof.stop()

    def _stop_nsys(self) -> None:
        nsys, self._nsys = self._nsys, None
        self._clock.nsys = None
        if nsys is not None:
            nsys.close()

    def _remove_hook(self) -> None:
        hook, self._hook = self._hook, None
        if hook is not None:
            hook.remove()

    def _stop_phases(self) -> None:
        if self._phases:
            self._phases = False
            from asynctrace.capture import _phases

            _phases.unregister(self._clock)

    def _stop_detector(self) -> None:
        detector, self.detector = self.detector, None
        if detector is not None:
            self._held_steps = detector.held_steps
            detector.stop()

    def forget_in_child(self) -> None:
        """After fork, in the child: the parent's hook, detector, profiler and trigger are not
        the child's to call, stop or write (the detectors' hooks are undone by syncs' own
        at-fork hook)."""
        hook, self._hook = self._hook, None
        if hook is not None:
            # the child's copy of the global hook would call into the ended copy of the session
            with contextlib.suppress(Exception):
                hook.remove()
        self.detector = None
        self.profiler = None
        self._nsys = None
        trigger, self._trigger = self._trigger, None
        if trigger is not None:
            trigger.forget_in_child()
