"""Synchronization detection: CUDA hooks, a CPU lint, and :func:`expect_syncs`.

A :class:`SyncDetector` watches for host-device synchronizations while started and calls
``on_sync`` with a :class:`SyncEvent` for each one. The capture session owns one per session;
:func:`expect_syncs` starts its own.

Two ways of seeing a sync (the full table is in ``docs/finding-syncs.md``):

``"cuda"`` — real synchronizations on a CUDA/ROCm device, through torch's own hooks:
  ``torch.cuda.set_sync_debug_mode("warn")`` makes torch warn at every implicit sync
  (``.item()``, blocking copies, ``nonzero`` …); we catch those warnings with the Python frames
  that caused them. Explicit syncs (``torch.cuda.synchronize``, ``Stream.synchronize``,
  ``Event.synchronize``, ``torch.accelerator.synchronize``) are wrapped and timed. Printing a
  device tensor is wrapped too, so one ``print`` counts once instead of once per copy it makes.

``"lint"`` — works on CPU, for CI without a GPU: a ``TorchDispatchMode`` flags the aten ops that
  *would* synchronize on an accelerator (scalar reads, data-dependent shapes, copies to the
  host). Some host reads never reach the dispatcher (``tolist``, ``numpy``, ``cpu()`` of a CPU
  tensor, ``repr``/``print``); those ``torch.Tensor`` methods are wrapped while the lint runs.

What a "device tensor" is for the lint: scalar reads and data-dependent-shape ops are flagged
whatever the tensor's device (the lint cannot know whether the tensor would live on the
accelerator). Reads that fetch a whole tensor to the host (``.cpu()``, ``.numpy()``,
``.tolist()``, ``repr``) are flagged for non-CPU tensors, and — with ``cpu_is_device=True``, the
lint's default, since a CPU test stands in for a device run — for CPU tensors too.
``.to("cpu")`` of a CPU tensor is never flagged: on CPU it is indistinguishable from the
``batch.to(device)`` idiom, which is not a sync on a GPU.

Every global setting ``start()`` changes (sync debug mode, warning filter and ``showwarning``,
the wrapped torch functions, the dispatch mode) is shared by the active detectors, installed by
the first and restored by the last ``stop()``. A sync debug mode the user set before is left as
it is: with "error" each implicit sync still raises (only explicit syncs are counted then), and
with "warn" torch's warnings are still shown.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Literal, ParamSpec, TypeVar, cast

from asynctrace._frames import is_standing_in_for_user, is_user_file, launchers, short_path
from asynctrace.errors import AsyncTraceWarning, CaptureError, OptionError, UnexpectedSyncError
from asynctrace.records.known_syncs import (
    LINT_OPS,
    MASK_OPS,
    SCALAR_READ_OPS,
    SHAPE_OPS,
    is_host_only_file,
    match_frame,
    tag_of,
)

__all__ = [
    "DETECT_MODES",
    "LINT_OPS",
    "MAX_STACK_DEPTH",
    "ExpectSyncs",
    "SyncDetector",
    "SyncEvent",
    "expect_syncs",
]

#: the values ``SyncDetector(mode=...)`` and ``asynctrace.trace(detect_syncs=...)`` accept
DETECT_MODES = ("auto", "cuda", "lint", "off")

#: frames kept in :attr:`SyncEvent.stack`, from the site outwards
MAX_STACK_DEPTH = 16

_SYNC_WARNING = "called a synchronizing CUDA operation"
_HOST_DEVICE_TYPES = ("cpu", "meta")

_P = ParamSpec("_P")
_R = TypeVar("_R")


@dataclass(frozen=True)
class SyncEvent:
    #: what synchronized: "aten::_local_scalar_dense", "torch.cuda.synchronize", ...
    op: str
    #: innermost frame outside torch and asynctrace, "path/to/file.py:123"; inside an installed
    #: library, that library's line shortened to "package/…/file.py:123"
    site: str
    #: the site, then the user's frames outwards, as "file.py:123 in func": frames of torch,
    #: site-packages, runpy and asynctrace are left out, and ``asynctrace run``/``check``'s own
    #: frames that ran the script end it. A library's site is tagged " [library]", or
    #: " [id]" / " [id: key 'k']" for a known library sync (``asynctrace.records.known_syncs``), and
    #: the next entry is the innermost user frame that led to it
    stack: tuple[str, ...] = ()
    #: host time spent blocked, where known (0 where not measurable: lint, implicit CUDA syncs)
    wait_ns: int = 0


# ---------------------------------------------------------------------------------------------
# Where a sync comes from


def _package_dir(module_file: str) -> str:
    return os.path.dirname(os.path.abspath(module_file)) + os.sep


_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_THIS_FILE = os.path.abspath(__file__)
#: the modules between a warning and ``showwarning``: ``warnings`` up to Python 3.13; from 3.14
#: ``warnings`` re-exports ``_py_warnings._showwarnmsg``, so that frame is ``_py_warnings``'s
_WARNINGS_MODULES = frozenset({"warnings", "_py_warnings"})


#: the rule the trace analysis applies to a profiler's frame names (whole folder names: torch,
#: site-packages, asynctrace's own modules), so both show the same frames as the user's
_user_file = functools.lru_cache(maxsize=4096)(is_user_file)


def _locate(
    frame: FrameType | None, torch_dir: str, *, host: bool = False
) -> tuple[str, tuple[str, ...]] | None:
    """(site, stack) of the sync whose innermost Python frame is ``frame``.

    The **site** is the innermost frame outside torch and asynctrace. For a sync made inside a
    library (transformers, lightning, …) it is that library's line, shortened to
    ``package/…/file.py:123``, and the stack starts there, tagged `` [id]`` when it is a known
    library sync (:mod:`asynctrace.records.known_syncs`: what it is, the setting that removes it),
    then goes on with the innermost user frame that led to it — where the user can act —
    and the user's other frames outwards (see :attr:`SyncEvent.stack`).

    None when the sync is asynctrace's own (the device layer waiting for its events): the
    innermost frame outside torch and libraries belongs to asynctrace. None too for a read of
    a host tensor (``host``) inside host-side code (``HOST_ONLY_CODE``: the data pipeline,
    optimizers): there the tensor is on the host on every machine, so the read is no sync.
    """
    # the command line that runs a user's script (``asynctrace run``/``check``), as it
    # registered itself: no frame outside it is the user's
    launcher = launchers()
    f = frame
    while f is not None and (
        f.f_code.co_filename == _THIS_FILE or f.f_globals.get("__name__") in _WARNINGS_MODULES
    ):
        f = f.f_back
    via: FrameType | None = None
    tag = ""
    while f is not None:
        name = f.f_code.co_filename
        if host and is_host_only_file(name):
            return None
        if name.startswith(torch_dir):
            f = f.f_back
            continue
        if is_standing_in_for_user(name):
            break  # ``asynctrace demo``'s loops stand for the user's: their syncs are shown
        if name.startswith(_OWN_DIR):
            if via is None:
                return None  # asynctrace's own sync (its device layer waiting for its events)
            if name.startswith(launcher):
                # the launcher of ``run``/``check``: no frame of the user's led here
                f = None
                break
            # a library's sync that asynctrace drove for the user (``session.steps(loader)``
            # iterating their loader): the user's frame is further out
            f = f.f_back
            continue
        if _user_file(name) and f.f_globals.get("__name__") != "runpy":
            break
        if not tag:
            known = match_frame(f)
            if known is not None:
                via, tag = f, tag_of(*known)
        if via is None:
            via = f
        f = f.f_back
    stack: list[str] = []
    if via is not None:
        # keyed apart from the user's line: under a Trainer every library sync has the same
        # innermost user frame (``trainer.train()``), which cannot tell them apart
        site = f"{short_path(via.f_code.co_filename)}:{via.f_lineno}"
        stack.append(f"{site} in {via.f_code.co_name}{tag or tag_of(None)}")
    elif f is not None:
        site = f"{f.f_code.co_filename}:{f.f_lineno}"
        stack.append(f"{site} in {f.f_code.co_name}")
        f = f.f_back
    else:
        return None  # torch's frames only: nothing of the user's to name
    while f is not None and len(stack) < MAX_STACK_DEPTH:
        name = f.f_code.co_filename
        if name.startswith(launcher):
            break
        # runpy only starts a script (``python -m``, ``asynctrace run``): never the user's code
        if _user_file(name) and f.f_globals.get("__name__") != "runpy":
            stack.append(f"{name}:{f.f_lineno} in {f.f_code.co_name}")
        f = f.f_back
    return site, tuple(stack)


# ---------------------------------------------------------------------------------------------
# The process-wide hooks, shared by every active detector


class _Hub:
    """Installs the hooks while any detector needs them and fans events out to detectors."""

    def __init__(self) -> None:
        self.lint: list[SyncDetector] = []
        self.cuda: list[SyncDetector] = []
        self.local = threading.local()
        self._torch_dir = ""
        self._lint_mode: Any = None
        #: the lint mode's class, built at its first use (see _make_lint_mode)
        self._lint_mode_class: Any = None
        self._lint_thread = 0
        self._patched: list[_Patch] = []
        self._cuda_restore: list[Callable[[], None]] = []
        # sessions run in several threads: one thread's last stop() must not undo what another
        # thread's first start() is installing (nor install it twice)
        self._lock = threading.RLock()
        # registered at the first attach, not at import (no import-time side effects)
        self._fork_hook = False
        #: lint detectors suspended now (``SyncDetector.suspend``): while any is, the lint's
        #: mode is off the dispatch stack and nothing is counted by the lint
        self.suspended: list[SyncDetector] = []
        #: lint detectors paused now (``SyncDetector.pause``: a session's sampled lint between
        #: its samples): they are told of nothing, and the mode is off the stack only while
        #: every lint detector is paused
        self.paused: list[SyncDetector] = []

    # -- state -------------------------------------------------------------------------------

    def depth(self) -> int:
        return int(getattr(self.local, "depth", 0))

    @contextlib.contextmanager
    def suppressed(self) -> Iterator[None]:
        self.local.depth = self.depth() + 1
        try:
            yield
        finally:
            self.local.depth -= 1

    def emit(
        self, op: str, targets: list[SyncDetector], wait_ns: int = 0, *, host: bool = False
    ) -> None:
        if targets is self.lint:
            if self.suspended:
                return
            if self.paused:
                targets = [d for d in targets if d not in self.paused]
        if not targets:
            return
        located = _locate(sys._getframe(1), self._torch_dir, host=host)
        if located is None:
            return
        event = SyncEvent(op, located[0], located[1], wait_ns)
        for det in tuple(targets):
            det.on_sync(event)

    # -- attach / detach -----------------------------------------------------------------------

    def attach(self, det: SyncDetector, kind: str) -> None:
        import torch

        with self._lock:
            if kind == "lint" and self.lint and threading.get_ident() != self._lint_thread:
                # torch's dispatch-mode stack is per thread: the mode pushed in the first thread
                # sees nothing in this one, and popping it from here would corrupt both stacks
                raise CaptureError(
                    "lint sync detection is already running in another thread; it watches one "
                    "thread at a time (use detect_syncs='off' or 'cuda' for sessions in other "
                    "threads)"
                )
            self._torch_dir = _package_dir(torch.__file__)
            if not self._fork_hook and hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=self.forget_in_child)
                self._fork_hook = True
            if not self.lint and not self.cuda:
                self._patch_tensor(torch)
            try:
                if kind == "lint":
                    if not self.lint:
                        mode = _make_lint_mode(self)
                        mode.__enter__()
                        # kept only once pushed: _release pops what is kept
                        self._lint_mode = mode
                        self._lint_thread = threading.get_ident()
                    self.lint.append(det)
                    if self.paused and not self.suspended:
                        # the others were all paused, their mode off: this one needs it
                        self._sync_lint_mode()
                else:
                    if not self.cuda:
                        # torch.cuda's lazy init can fail here (a forked child, a broken driver)
                        self._install_cuda(torch)
                    self.cuda.append(det)
            except BaseException:
                # leave nothing behind for a detector that never started
                self._release(kind)
                raise

    def detach(self, det: SyncDetector, kind: str) -> None:
        with self._lock:
            group = self.lint if kind == "lint" else self.cuda
            if (
                kind == "lint"
                and group == [det]
                and self._lint_mode is not None
                and threading.get_ident() != self._lint_thread
            ):
                # popping from here would pop this thread's stack (or fail on an empty one) and
                # leave the mode on the other thread's for good
                raise CaptureError(
                    "lint sync detection was started in another thread; stop it in that thread "
                    "(torch's dispatch-mode stack is per thread)"
                )
            if det in group:
                group.remove(det)
            self._release(kind)

    def _check_lint_thread(self, done: str) -> None:
        """The lint's mode is on one thread's dispatch-mode stack: only that one can take it off
        or put it back (``done``: "suspended", "resumed")."""
        if threading.get_ident() != self._lint_thread:
            raise CaptureError(
                f"lint sync detection is {done} in the thread that started it (torch's "
                "dispatch-mode stack is per thread)"
            )

    def suspend(self, det: SyncDetector) -> None:
        """Take the lint's mode off the dispatch stack until :meth:`resume` (see
        :meth:`SyncDetector.suspend`)."""
        with self._lock:
            if det in self.suspended or det not in self.lint:
                return
            self._check_lint_thread("suspended")
            self.suspended.append(det)
            if len(self.suspended) == 1 and self._lint_mode is not None:
                mode, self._lint_mode = self._lint_mode, None
                _exit_mode(mode)

    def resume(self, det: SyncDetector, *, leaving: bool = False) -> None:
        with self._lock:
            if det not in self.suspended:
                return
            self._check_lint_thread("resumed")
            self.suspended.remove(det)
            # a detector resumed on its way out (stop) needs no mode; the others still do
            if (
                not self.suspended
                and self._lint_mode is None
                and any(d is not det or not leaving for d in self.lint)
            ):
                mode = _make_lint_mode(self)
                mode.__enter__()
                self._lint_mode = mode

    def pause(self, det: SyncDetector) -> None:
        """Tell ``det`` of nothing until :meth:`unpause`; the mode leaves the stack once every
        lint detector is paused (see :meth:`SyncDetector.pause`)."""
        with self._lock:
            if det in self.paused or det not in self.lint:
                return
            self._check_lint_thread("paused")
            self.paused.append(det)
            self._sync_lint_mode()

    def unpause(self, det: SyncDetector, *, leaving: bool = False) -> None:
        with self._lock:
            if det not in self.paused:
                return
            if not leaving:
                self._check_lint_thread("resumed")
            self.paused.remove(det)
            if not leaving:
                self._sync_lint_mode()

    def _sync_lint_mode(self) -> None:
        """The lint's mode on the stack where a detector needs it: some lint detector is not
        paused and none is suspended (deep mode's hold is :meth:`suspend`/:meth:`resume`'s)."""
        if self.suspended:
            return
        wanted = any(d not in self.paused for d in self.lint)
        if wanted and self._lint_mode is None:
            mode = _make_lint_mode(self)
            mode.__enter__()
            self._lint_mode = mode
        elif not wanted and self._lint_mode is not None:
            mode, self._lint_mode = self._lint_mode, None
            _exit_mode(mode)

    def lint_elsewhere(self) -> bool:
        """Whether a lint runs in another thread than the caller's (one cannot start here)."""
        return bool(self.lint) and threading.get_ident() != self._lint_thread

    def forget_in_child(self) -> None:
        """After ``fork``, in the child (a DataLoader worker): the detectors are the parent's,
        and their hooks would make every op of the child's pass through the lint's dispatch
        mode for nobody. Undone here, without the lock: a parent thread that held it at the
        fork does not exist in the child."""
        self._lock = threading.RLock()
        if threading.get_ident() != self._lint_thread:
            # the mode is on the stack of a parent thread the child does not have
            self._lint_mode = None
        self.lint.clear()
        self.cuda.clear()
        self.suspended.clear()
        self.paused.clear()
        with contextlib.suppress(Exception):
            self._release("lint")
        # torch refuses to touch CUDA in a forked child, so the sync debug mode stays as it
        # is there (CUDA is unusable in it anyway); the Python-level hooks still go
        with contextlib.suppress(Exception):
            self._release("cuda")

    def _release(self, kind: str) -> None:
        """Undo what the detectors no longer need: ``kind``'s hooks once none of that kind is
        left, the shared Tensor wrappers once no detector is."""
        try:
            if kind == "lint" and not self.lint:
                self._lint_thread = 0
                if self._lint_mode is not None:
                    mode, self._lint_mode = self._lint_mode, None
                    _exit_mode(mode)
            if kind == "cuda" and not self.cuda:
                _undo_all(self._cuda_restore)
        finally:
            # the Tensor wrappers go whatever failed above
            if not self.lint and not self.cuda:
                while self._patched:
                    _unpatch(self._patched.pop())

    def _patch(
        self,
        owner: Any,
        name: str,
        wrapper: Callable[..., Any],
        into: list[_Patch] | None = None,
    ) -> None:
        own = name in owner.__dict__
        original = owner.__dict__[name] if own else getattr(owner, name)
        wrapped = wrapper(getattr(owner, name))
        setattr(owner, name, wrapped)
        (self._patched if into is None else into).append((owner, name, own, original, wrapped))

    def _patch_tensor(self, torch: Any) -> None:
        """Wrap the host reads that never reach the dispatcher (and dedupe ``print``)."""
        hub = self

        def host_read(op: str, lint_only: bool) -> Callable[[Callable[..., Any]], Any]:
            def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
                @functools.wraps(original)
                def method(self: Any, *args: Any, **kwargs: Any) -> Any:
                    if hub.depth():
                        return original(self, *args, **kwargs)
                    on_host = self.device.type in _HOST_DEVICE_TYPES
                    targets = [
                        d
                        for d in hub.lint
                        if (not on_host or d.cpu_is_device) and not hub.suspended
                    ]
                    if not lint_only and not on_host:
                        targets += hub.cuda
                    if not targets:
                        # nobody counts this read here: let the syncs inside it be seen
                        return original(self, *args, **kwargs)
                    hub.emit(op, targets, host=on_host)
                    with hub.suppressed():
                        return original(self, *args, **kwargs)

                return method

            return wrap

        tensor = torch.Tensor
        self._patch(tensor, "tolist", host_read("Tensor.tolist", lint_only=False))
        self._patch(tensor, "numpy", host_read("Tensor.numpy", lint_only=True))
        self._patch(tensor, "cpu", host_read("Tensor.cpu", lint_only=True))
        self._patch(tensor, "__repr__", host_read("Tensor.__repr__", lint_only=False))

    def _install_cuda(self, torch: Any) -> None:
        # torch.cuda.get_sync_debug_mode: 0 "default", 1 "warn", 2 "error"
        previous_mode = int(torch.cuda.get_sync_debug_mode())
        if previous_mode == 0:
            torch.cuda.set_sync_debug_mode("warn")
            self._cuda_restore.append(lambda: torch.cuda.set_sync_debug_mode(previous_mode))
        # else the user's own mode stays: "error" keeps raising at each sync (watching must not
        # make a program that fails pass), and "warn" already makes torch warn
        self._install_sync_warnings(previous_mode)
        self._install_cuda_timers(torch)

    def _install_sync_warnings(self, previous_mode: int) -> None:
        """Sees each sync the sync debug mode warns of (the user's ``previous_mode`` decides
        whether they still see torch's warning)."""
        hub = self
        # "always" so every sync is seen (not once per line) and so that an "error" filter
        # (pytest's filterwarnings=error) does not turn the user's sync into an exception.
        filters_before = list(warnings.filters)
        warnings.filterwarnings("always", message=".*" + _SYNC_WARNING, category=UserWarning)
        entry = warnings.filters[0]
        # filterwarnings moves an identical filter the user already had to the front: it goes
        # back where it was at stop(), rather than being removed with ours
        prior = filters_before.index(entry) if entry in filters_before else None
        previous_show = warnings.showwarning
        installed = True

        def showwarning(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: Any = None,
            line: str | None = None,
        ) -> None:
            # once stopped this hook can still be called: whoever replaced it while it ran
            # (logging.captureWarnings, ...) puts it back later; it must then pass everything on
            if installed and issubclass(category, UserWarning) and _SYNC_WARNING in str(message):
                if not hub.depth():
                    hub.emit("cuda sync (sync debug mode)", hub.cuda)
                if previous_mode != 1:
                    return
                # the user turned "warn" on before us: they still see torch's warnings
            previous_show(message, category, filename, lineno, file, line)

        warnings.showwarning = showwarning

        def restore_warnings() -> None:
            nonlocal installed
            installed = False
            if warnings.showwarning is showwarning:
                warnings.showwarning = previous_show
            filters = cast(list[Any], warnings.filters)
            if entry in filters:
                filters.remove(entry)
                if prior is not None:
                    filters.insert(min(prior, len(filters)), entry)
                _filters_mutated()

        self._cuda_restore.append(restore_warnings)

    def _install_cuda_timers(self, torch: Any) -> None:
        """Times each explicit synchronize (device, stream, event, accelerator)."""
        hub = self

        def timed(op: str) -> Callable[[Callable[..., Any]], Any]:
            def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
                @functools.wraps(original)
                def call(*args: Any, **kwargs: Any) -> Any:
                    if hub.depth():
                        return original(*args, **kwargs)
                    start = time.perf_counter_ns()
                    with hub.suppressed():
                        result = original(*args, **kwargs)
                    hub.emit(op, hub.cuda, time.perf_counter_ns() - start)
                    return result

                return call

            return wrap

        mine: list[_Patch] = []

        def unpatch() -> None:
            for patch in reversed(mine):
                _unpatch(patch)

        # registered first, so that a wrapper already in place is undone if a later one fails
        self._cuda_restore.append(unpatch)
        self._patch(torch.cuda, "synchronize", timed("torch.cuda.synchronize"), mine)
        self._patch(torch.cuda.Stream, "synchronize", timed("Stream.synchronize"), mine)
        self._patch(torch.cuda.Event, "synchronize", timed("Event.synchronize"), mine)
        accelerator = getattr(torch, "accelerator", None)
        if accelerator is not None and hasattr(accelerator, "synchronize"):
            self._patch(accelerator, "synchronize", timed("torch.accelerator.synchronize"), mine)


#: (owner, attribute, whether the owner had its own, what was there, our wrapper)
_Patch = tuple[Any, str, bool, Any, Any]


def _unpatch(patch: _Patch) -> None:
    """Put back what was there before our wrapper — only while our wrapper is still in place:
    a function the user set there while we ran (their own ``Tensor.tolist``) is theirs and
    stays."""
    owner, name, own, original, wrapped = patch
    if owner.__dict__.get(name) is not wrapped:
        return
    if own:
        setattr(owner, name, original)
    else:
        delattr(owner, name)


def _exit_mode(mode: Any) -> None:
    """Pop our dispatch mode, leaving every other mode on the stack where it is.

    A mode the user entered after ours and has not exited sits above ours: ``mode.__exit__``
    would pop *theirs* (torch pops the top) and leave ours on for good. Then the modes above
    are lifted off, ours is taken out and they go back, in order, untouched; the flags ours
    saved at its entry are dropped without being applied (the user's modes are still on)."""
    from torch.utils import _python_dispatch as pd

    stack: list[Any] = pd._get_current_dispatch_mode_stack()
    if stack and stack[-1] is mode:
        mode.__exit__(None, None, None)  # on top, the usual case: torch's exit restores flags
        return
    if not any(m is mode for m in stack):
        return  # popped already (by whoever popped out of order): nothing of ours is left
    above: list[Any] = []
    try:
        while pd._get_current_dispatch_mode_stack()[-1] is not mode:
            above.append(pd._pop_mode())
        pd._pop_mode()
        for flags in (
            "old_dispatch_mode_flags",
            "old_non_infra_dispatch_mode_flags",
            "old_without_ignore_compile_internals_dispatch_mode_flags",
        ):
            saved = getattr(mode, flags, None)
            if saved:
                saved.pop()
    finally:
        for m in reversed(above):
            pd._push_mode(m)


def _undo_all(undo: list[Callable[[], None]]) -> None:
    """Run and drop every undo action, last first, each whatever the others did; then raise
    the first failure, if any."""
    failure: BaseException | None = None
    while undo:
        try:
            undo.pop()()
        except BaseException as e:
            if failure is None:
                failure = e
    if failure is not None:
        raise failure


def _filters_mutated() -> None:
    # The C warnings module caches the filter list; removing an entry by hand must say so.
    for name in ("_filters_mutated", "_filters_mutated_lock_held"):
        fn = getattr(warnings, name, None)
        if fn is not None:
            fn()
            return


def _make_lint_mode(hub: _Hub) -> Any:
    """A new instance of the lint's dispatch mode; its class is built once per hub (about
    0.1 ms), since a sampled lint enters a fresh mode every few dozen steps."""
    cls = hub._lint_mode_class
    if cls is None:
        cls = hub._lint_mode_class = type(_build_lint_mode(hub))
    return cls()


def _build_lint_mode(hub: _Hub) -> Any:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    # torch's mode base class is untyped; subclassing it through Any keeps mypy strict elsewhere
    mode_base: Any = TorchDispatchMode

    aten = torch.ops.aten
    scalar_reads = {getattr(aten, n) for n in SCALAR_READ_OPS}
    shape_ops = {getattr(aten, n) for n in SHAPE_OPS}
    mask_ops = {getattr(aten, n) for n in MASK_OPS}
    mask_dtypes = (torch.bool, torch.uint8)
    candidates = frozenset(
        scalar_reads | shape_ops | mask_ops | {aten.repeat_interleave, aten._to_copy, aten.copy_}
    )

    def is_mask_index(args: tuple[Any, ...]) -> bool:
        indices = args[1] if len(args) > 1 else ()
        return any(t is not None and t.dtype in mask_dtypes for t in indices)

    def on_device(t: Any) -> bool:
        return isinstance(t, torch.Tensor) and t.device.type not in _HOST_DEVICE_TYPES

    def to_host(device: Any) -> bool:
        return device is not None and torch.device(device).type == "cpu"

    class _LintMode(mode_base):  # type: ignore[misc]
        def __torch_dispatch__(
            self,
            func: Any,
            types: Any,
            args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            kwargs = kwargs or {}
            packet = func.overloadpacket
            # most ops are none of ours: one set look-up before anything else
            if packet in candidates and hub.depth() == 0:
                flagged = (
                    packet in scalar_reads
                    or packet in shape_ops
                    or (packet in mask_ops and is_mask_index(args))
                    or (
                        packet is aten.repeat_interleave
                        and kwargs.get("output_size") is None
                        and (len(args) < 2 or not isinstance(args[1], torch.Tensor))
                    )
                    or (
                        packet is aten._to_copy
                        and on_device(args[0])
                        and to_host(kwargs.get("device"))
                        and not kwargs.get("non_blocking", False)
                    )
                    or (
                        packet is aten.copy_
                        and len(args) > 1
                        and not on_device(args[0])
                        and on_device(args[1])
                        and not (args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
                    )
                )
                if flagged:
                    host = not (args and on_device(args[0]))
                    hub.emit(f"aten::{packet.__name__}", hub.lint, host=host)
            return func(*args, **kwargs)

    return _LintMode()


_hub = _Hub()


# ---------------------------------------------------------------------------------------------
# The detector


def _resolve(mode: str) -> str:
    if mode not in DETECT_MODES:
        raise OptionError(f"sync detection mode must be one of {DETECT_MODES}, got {mode!r}")
    if mode != "auto":
        return mode
    import torch

    return "cuda" if torch.cuda.is_available() else "off"


class SyncDetector:
    """Calls ``on_sync`` for each synchronization between ``start()`` and ``stop()``.

    ``mode``: "auto" (CUDA hooks on CUDA, nothing on CPU: the session's default stays cheap),
    "cuda", "lint" (a TorchDispatchMode that flags ops which would synchronize on an
    accelerator; works on CPU, costs microseconds per op), "off".
    ``cpu_is_device`` (lint only): count host reads of CPU tensors (``.cpu()``, ``.numpy()``,
    ``.tolist()``, ``print``) as if the tensors lived on an accelerator.
    The lint's dispatch mode sees the thread that started the first lint detector (and the
    autograd threads it drives). ``stop()`` restores every global setting ``start()`` changed.
    """

    def __init__(
        self,
        on_sync: Callable[[SyncEvent], None],
        *,
        mode: str = "auto",
        cpu_is_device: bool = True,
    ) -> None:
        if mode not in DETECT_MODES:
            raise OptionError(f"sync detection mode must be one of {DETECT_MODES}, got {mode!r}")
        self.on_sync = on_sync
        self.mode = mode
        self.cpu_is_device = cpu_is_device
        #: the mode actually running ("cuda", "lint" or "off"); None while stopped
        self.active: str | None = None
        #: calls of :meth:`suspend_while` that held a running lint off: with a session, the
        #: steps whose syncs the lint did not count (deep mode's profiled steps)
        self.held_steps = 0

    def start(self) -> None:
        if self.active is not None:
            return
        active = _resolve(self.mode)
        if active == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise CaptureError(
                    "sync detection mode 'cuda' needs a CUDA/ROCm device; "
                    "use mode 'lint' to flag would-be syncs on CPU"
                )
        if active != "off":
            _hub.attach(self, active)
        self.active = active

    @property
    def suspended(self) -> bool:
        """Whether :meth:`suspend` holds the lint off now."""
        return self in _hub.suspended

    def suspend(self) -> None:
        """Hold the lint off — for deep mode's profiled window: the lint's dispatch mode would
        put a ``PythonDispatchMode`` event around every op in the trace (and slow the steps
        being profiled several times over), while the trace shows the syncs itself.

        The mode leaves the dispatch stack and no sync is counted until :meth:`resume` (nor
        by other lint detectors: the mode is shared); the Tensor wrappers stay, counting
        nothing. Idempotent; a no-op unless this detector runs the lint. Call it, and
        :meth:`resume`, in the thread that started the lint (:class:`CaptureError` elsewhere,
        before anything changes). :meth:`stop` ends a suspension."""
        if self.active == "lint":
            _hub.suspend(self)

    def resume(self) -> None:
        """End :meth:`suspend`: the lint's mode goes back on the dispatch stack (on top of
        any mode entered meanwhile) once no detector holds it off."""
        _hub.resume(self)

    def suspend_while(self, profiling: bool) -> None:
        """:meth:`suspend` when ``profiling``, else :meth:`resume`: what a session calls after
        each step of deep mode's profiler with ``profiler.active``."""
        if profiling:
            self.suspend()
            if self.suspended:
                self.held_steps += 1
        else:
            self.resume()

    def pause(self) -> None:
        """Count nothing until :meth:`unpause`, at no cost once no other lint detector runs:
        a session's sampled lint between its samples. Unlike :meth:`suspend`, other lint
        detectors (an ``expect_syncs`` inside the session) go on counting. In the thread that
        started the lint (:class:`CaptureError` elsewhere); a no-op unless running the lint."""
        if self.active == "lint":
            _hub.pause(self)

    def unpause(self) -> None:
        _hub.unpause(self)

    @contextlib.contextmanager
    def suspending(self) -> Iterator[None]:
        """:meth:`suspend` for a ``with`` block, then :meth:`resume`."""
        self.suspend()
        try:
            yield
        finally:
            self.resume()

    def stop(self) -> None:
        active = self.active
        if active == "lint" and self.suspended:
            # dropped without pushing a mode back for a detector that is leaving
            _hub.resume(self, leaving=True)
        if active == "lint":
            _hub.unpause(self, leaving=True)
        if active in ("cuda", "lint"):
            # CaptureError from another thread than the lint's, before anything changed: still
            # running, so that thread can stop it
            _hub.detach(self, active)
        self.active = None

    def __enter__(self) -> SyncDetector:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# ---------------------------------------------------------------------------------------------
# expect_syncs

_PER = ("step", "call", "total")
_ACTIONS = ("raise", "warn")


def _session_step() -> tuple[int, int] | None:
    """(id of the current session, its current step index), or None outside a session."""
    module = sys.modules.get("asynctrace.capture.session")
    getter = getattr(module, "current_session", None) if module is not None else None
    session = getter() if getter is not None else None
    if session is None:
        return None
    # the session's index of its open step (private to the capture core; no public name yet)
    for attr in ("step_index", "_index"):
        value = getattr(session, attr, None)
        if isinstance(value, int):
            return id(session), value
    return None


@dataclass
class _Guard:
    """The syncs seen during one entry of an :class:`ExpectSyncs`."""

    per: str
    #: bucket key -> events in that bucket
    buckets: dict[Any, list[SyncEvent]] = field(default_factory=dict)

    def add(self, event: SyncEvent) -> None:
        key: Any = "all"
        if self.per == "step":
            where = _session_step()
            if where is not None:
                key = where
        self.buckets.setdefault(key, []).append(event)


class ExpectSyncs:
    """What :func:`expect_syncs` returns: a context manager and a decorator."""

    def __init__(self, max: int, per: str, action: str, mode: str, cpu_is_device: bool) -> None:
        if not isinstance(max, int) or max < 0:
            raise OptionError(f"expect_syncs(max=...) must be an int >= 0, got {max!r}")
        if per not in _PER:
            raise OptionError(f"expect_syncs(per=...) must be one of {_PER}, got {per!r}")
        if action not in _ACTIONS:
            raise OptionError(f"expect_syncs(action=...) must be one of {_ACTIONS}, got {action!r}")
        if mode not in ("lint", "auto", "cuda"):
            raise OptionError(f"expect_syncs(mode=...) must be 'lint' or 'auto', got {mode!r}")
        self.max = max
        self.per = per
        self.action = action
        self.mode = mode
        self.cpu_is_device = cpu_is_device
        # one stack of open entries per thread: a guard decorating a function that runs in
        # two threads must end each call's own entry, not the other thread's
        self._local = threading.local()

    def _entries(self) -> list[tuple[_Guard, SyncDetector]]:
        entries: list[tuple[_Guard, SyncDetector]] | None = getattr(self._local, "open", None)
        if entries is None:
            entries = self._local.open = []
        return entries

    def _detector_mode(self) -> str:
        if self.mode != "auto":
            return self.mode
        import torch

        # unlike a session's "auto", a guard that watched nothing on CPU would be useless
        return "cuda" if torch.cuda.is_available() else "lint"

    def __enter__(self) -> ExpectSyncs:
        guard = _Guard(self.per)
        det = SyncDetector(guard.add, mode=self._detector_mode(), cpu_is_device=self.cpu_is_device)
        det.start()
        self._entries().append((guard, det))
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        guard, det = self._entries().pop()
        det.stop()
        if exc_type is not None:
            return  # the body's own error says more than a sync count
        message = self._excess_message(guard)
        if message is None:
            return
        if self.action == "raise":
            raise UnexpectedSyncError(message)
        warnings.warn(message, AsyncTraceWarning, stacklevel=3)

    def __call__(self, fn: Callable[_P, _R]) -> Callable[_P, _R]:
        """Each call of ``fn`` is one guarded block; for an ``async def`` the awaited body, for
        a generator function its iteration (calling either returns before the body runs)."""
        from asynctrace.capture._decorate import around_each_call

        return around_each_call(fn, self, what="expect_syncs", instead="with expect_syncs(...):")

    def _excess_message(self, guard: _Guard) -> str | None:
        excess: dict[tuple[str, str], int] = {}
        total = 0
        for events in guard.buckets.values():
            for event in events[self.max :]:
                excess[event.site, event.op] = excess.get((event.site, event.op), 0) + 1
                total += 1
        if not excess:
            return None
        per = {
            "step": "per step",
            "call": "per call",
            "total": "in total",
        }[self.per]
        if self.per == "step" and set(guard.buckets) == {"all"}:
            # no session's steps were seen: the block (or call) itself was the bucket
            per = "per block (no asynctrace.trace session, so no steps)"
        lines = [
            f"{total} unexpected host-device synchronization{'s' if total != 1 else ''} "
            f"(at most {self.max} {per} allowed):"
        ]
        for (site, op), count in sorted(excess.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {site}: {op} ×{count}")
        lines.append(
            "Remove the sync (keep values on the device, log every N steps), or raise the "
            "budget with expect_syncs(max=...)."
        )
        return "\n".join(lines)


def expect_syncs(
    max: int = 0,
    per: Literal["step", "call", "total"] = "step",
    *,
    action: Literal["raise", "warn"] = "raise",
    mode: Literal["lint", "auto"] = "lint",
    cpu_is_device: bool = True,
) -> ExpectSyncs:
    """Allow at most ``max`` host-device synchronizations ``per`` step, call or in total.

    A context manager and a decorator. At the end of the block (or call) it raises
    :class:`~asynctrace.UnexpectedSyncError` — or warns :class:`~asynctrace.AsyncTraceWarning`
    with ``action="warn"`` — naming the file:line and op of every sync beyond the budget.

    ``per="step"`` counts per step of the enclosing ``asynctrace.trace`` session; outside a
    session it counts per call of the decorated function (per block for a ``with``).
    ``mode="lint"`` (default) flags the ops that would synchronize on an accelerator, on any
    device, so the guard works in a CPU test; ``mode="auto"`` uses the CUDA hooks where CUDA is
    available and the lint elsewhere. ``cpu_is_device``: see :class:`SyncDetector`.
    """
    return ExpectSyncs(max, per, action, mode, cpu_is_device)
