"""Trainer integrations: ``asynctrace.integrations.lightning`` and ``.transformers``.

Each submodule imports its trainer package, so nothing is imported here until one is used:
``from asynctrace.integrations.lightning import AsyncTraceCallback``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["lightning", "transformers"]


def __getattr__(name: str) -> ModuleType:
    # lazy: importing asynctrace.integrations must not import Lightning or transformers
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
