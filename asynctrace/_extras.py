"""Optional dependencies (extras): imported when first needed, with the line that installs them."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from asynctrace.errors import AsyncTraceError

__all__ = ["MissingExtraError", "require", "require_torch"]


class MissingExtraError(AsyncTraceError, ImportError):
    """An optional dependency is not installed; the message says how to install it."""


def require(module: str, *, extra: str, what: str, packages: str) -> ModuleType:
    """Import ``module``, or raise :class:`MissingExtraError` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError:
        hint = f"pip install 'asynctrace[{extra}]' (or pip install {packages})"
        raise MissingExtraError(f"{what} needs {packages}: {hint}") from None


def require_torch() -> None:
    """Raise :class:`MissingExtraError` where torch is absent: capture needs it, analysis never
    does, so asynctrace does not depend on torch (installing it never changes a user's torch)."""
    if sys.modules.get("torch") is not None:
        return
    require(
        "torch",
        extra="torch",
        what="capture (trace, Benchmark, range, expect_syncs; the run, check and demo commands)",
        packages="torch",
    )
