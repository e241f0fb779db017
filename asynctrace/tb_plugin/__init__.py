"""asynctrace's own TensorBoard plugin: reports, step bars, sync sites and a step timeline,
served from the logdir's records and traces, drawn offline (no CDN, no build step).

TensorBoard finds it through the ``tensorboard_plugins`` entry point
(``asynctrace = "asynctrace.tb_plugin:AsyncTraceLoader"``). Importing this package
imports neither tensorboard nor werkzeug: :class:`AsyncTraceLoader` and
:class:`AsyncTracePlugin` are loaded from ``_plugin`` on first access. The routes' answers are
built by :class:`~asynctrace.tb_plugin._data.PluginData` (plain functions, no server).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from asynctrace.tb_plugin._plugin import AsyncTraceLoader, AsyncTracePlugin

__all__ = ["PLUGIN_NAME", "AsyncTraceLoader", "AsyncTracePlugin"]

#: the plugin's name: its routes are under ``/data/plugin/asynctrace/``
PLUGIN_NAME = "asynctrace"


def __getattr__(name: str) -> Any:
    if name in ("AsyncTraceLoader", "AsyncTracePlugin"):
        from asynctrace.tb_plugin import _plugin

        return getattr(_plugin, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
