"""The TensorBoard side: a dynamic (iframed ES module) plugin and its WSGI routes.

Routes, under ``/data/plugin/asynctrace/``:

=====================================  ======================================================
``/index.js``, ``/timeline.js``,       the page (ES modules: TensorBoard's plugin_entry.html
``/style.css``                         imports ``index.js`` and calls its ``render()``)
``/runs``                              the runs of the logdir and their sources, the legend
``/report?path=P``                     one source's report, step bars and steps
``/step_window?path=P&step=N``         one step's timeline window (``&max_events=K``, at most
                                       ``MAX_EVENTS``)
``/compare?a=P&b=Q``                   two sources compared, with the verdicts
=====================================  ======================================================

Every answer is JSON; a file that cannot be read answers ``{"ok": false, "error": ...}`` with
the :class:`~asynctrace.errors.TraceFormatError` message, never an HTTP error, so the page
lists it as unreadable and goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from typing import Any

import msgspec
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from asynctrace.tb_plugin import PLUGIN_NAME
from asynctrace.tb_plugin._data import PluginData

__all__ = ["AsyncTraceLoader", "AsyncTracePlugin"]

_STATIC = {
    "/index.js": "text/javascript",
    "/timeline.js": "text/javascript",
    "/style.css": "text/css",
}
_JSON = "application/json"


def _respond(request: wrappers.Request, body: bytes, content_type: str) -> wrappers.Response:
    response: wrappers.Response = http_util.Respond(request, body, content_type)
    return response


def _static(name: str) -> bytes:
    return (resources.files("asynctrace.tb_plugin") / "static" / name).read_bytes()


class AsyncTracePlugin(base_plugin.TBPlugin):  # type: ignore[misc]
    """Active when the logdir holds session records or traces in any run folder."""

    plugin_name = PLUGIN_NAME

    def __init__(self, context: Any) -> None:
        self._data = PluginData(getattr(context, "logdir", None))

    @property
    def data(self) -> PluginData:
        return self._data

    def get_plugin_apps(self) -> dict[str, Any]:
        handlers: dict[str, Callable[[wrappers.Request], wrappers.Response]] = {
            path: self._serve_static for path in _STATIC
        }
        handlers.update(
            {
                "/runs": self._serve_runs,
                "/report": self._serve_report,
                "/step_window": self._serve_step_window,
                "/compare": self._serve_compare,
            }
        )
        return {path: wrappers.Request.application(h) for path, h in handlers.items()}

    def is_active(self) -> bool:
        return self._data.is_active()

    def frontend_metadata(self) -> Any:
        return base_plugin.FrontendMetadata(
            es_module_path="/index.js", tab_name="asynctrace", disable_reload=True
        )

    def _serve_static(self, request: wrappers.Request) -> wrappers.Response:
        path = request.path.rsplit("/", 1)[-1]
        content_type = _STATIC["/" + path]
        return _respond(request, _static(path), content_type)

    def _serve_runs(self, request: wrappers.Request) -> wrappers.Response:
        return _respond(request, self._data.runs_json(), _JSON)

    def _serve_report(self, request: wrappers.Request) -> wrappers.Response:
        return _respond(request, self._data.report(request.args.get("path", "")), _JSON)

    def _serve_step_window(self, request: wrappers.Request) -> wrappers.Response:
        try:
            step = _int_arg(request, "step")
            max_events = _int_arg(request, "max_events")
        except ValueError as e:
            return _respond(request, msgspec.json.encode({"ok": False, "error": str(e)}), _JSON)
        body = self._data.step_window(
            request.args.get("path", ""),
            step,
            **({} if max_events is None else {"max_events": max_events}),
        )
        return _respond(request, body, _JSON)

    def _serve_compare(self, request: wrappers.Request) -> wrappers.Response:
        body = self._data.compare(request.args.get("a", ""), request.args.get("b", ""))
        return _respond(request, body, _JSON)


def _int_arg(request: wrappers.Request, name: str) -> int | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: give an integer") from None


class AsyncTraceLoader(base_plugin.TBLoader):  # type: ignore[misc]
    """What the ``tensorboard_plugins`` entry point names."""

    def load(self, context: Any) -> AsyncTracePlugin:
        return AsyncTracePlugin(context)
