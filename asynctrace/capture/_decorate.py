"""One context manager around each call of a function, wherever its body really runs.

Calling an ``async def`` or a generator function returns before its body runs: a plain
``with cm: return fn()`` would open and close around creating the coroutine or generator and
measure (or check) nothing. Shared by ``@asynctrace.trace`` and ``expect_syncs``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, ParamSpec, TypeVar, cast

from asynctrace.errors import CaptureError

__all__ = ["around_each_call"]

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
