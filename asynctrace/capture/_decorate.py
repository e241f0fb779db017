"""One context manager around each call of a function, wherever its body really runs.

Calling an ``async def`` or a generator function returns before its body runs: a plain
``with cm: return fn()`` would open and close around creating the coroutine or generator and
measure (or check) nothing. Shared by ``@asynctrace.trace`` and ``expect_syncs``; and
``session.train_step``'s one step per call.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, ParamSpec, Protocol, TypeVar, cast

from asynctrace.errors import CaptureError

__all__ = ["CallSteps", "around_each_call", "step_per_call"]

_P = ParamSpec("_P")
_R = TypeVar("_R")


def around_each_call(
    fn: Callable[_P, _R], cm: AbstractContextManager[Any], *, what: str, instead: str
) -> Callable[_P, _R]:
    """``fn`` with ``cm`` entered around each call: for an ``async def`` around the awaited
    body, for a generator function around its iteration. An async generator is refused with
    :class:`CaptureError` ("``what`` cannot wrap …: use ``instead`` inside it")."""
    if inspect.isasyncgenfunction(fn):
        raise CaptureError(
            f"{what} cannot wrap the async generator {getattr(fn, '__name__', fn)!r}: use "
            f"`{instead}` inside it"
        )
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def awaited(*args: Any, **kwargs: Any) -> Any:
            with cm:
                return await fn(*args, **kwargs)

        return cast(Callable[_P, _R], awaited)
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def iterated(*args: Any, **kwargs: Any) -> Any:
            with cm:
                return (yield from fn(*args, **kwargs))

        return cast(Callable[_P, _R], iterated)

    @functools.wraps(fn)
    def called(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with cm:
            return fn(*args, **kwargs)

    return called


class CallSteps(Protocol):
    """What :func:`step_per_call` needs of a session (its clock's call boundaries)."""

    _open_call: Callable[[], None]
    _close_call: Callable[[], None]

    def _at_boundary(self, boundary: Callable[[], None], *, step: bool = True) -> bool: ...

    def _drop_call_step(self) -> None: ...


def step_per_call(fn: Callable[_P, _R], session: CallSteps) -> Callable[_P, _R]:
    """``fn`` with each call one step of ``session`` (from entry to return); untraced outside
    an active session; a call that raises is not a complete step and is dropped. For an
    ``async def`` the step spans the awaited body; a generator function is refused."""
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        # its call returns before the body runs: the step would measure nothing
        raise CaptureError(
            f"train_step cannot wrap the generator {getattr(fn, '__name__', fn)!r}: a step "
            "is one call; call session.step() inside its loop instead"
        )
    # the session's boundaries are read at each call: they are its current run's
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def step_awaited(*args: Any, **kwargs: Any) -> Any:
            if not session._at_boundary(session._open_call):
                return await fn(*args, **kwargs)
            try:
                result = await fn(*args, **kwargs)
            except BaseException:
                session._drop_call_step()
                raise
            session._at_boundary(session._close_call)
            return result

        return cast(Callable[_P, _R], step_awaited)

    @functools.wraps(fn)
    def stepped(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        if not session._at_boundary(session._open_call):
            return fn(*args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException:
            session._drop_call_step()
            raise
        session._at_boundary(session._close_call)
        return result

    return stepped
