"""Text taken from a file, made safe to print on a terminal.

Kernel and function names, device names, sync sites and ops come from traces and records that
anyone may have written. Printed raw, a name holding ``\\x1b]0;TITLE\\x07`` sets the terminal's
window title, ``\\x1b[2J`` clears the screen, and OSC 8 sequences plant links. Every text output
(rich tables, plain lines, error messages) passes such strings through :func:`printable`; JSON
output stays raw, since JSON escapes control characters itself.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

__all__ = ["printable", "printable_fields"]

_S = TypeVar("_S", bound=msgspec.Struct)

# C0 controls, DEL and C1 controls (U+0080-U+009F: 8-bit CSI and OSC among them)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _escaped(m: re.Match[str]) -> str:
    return f"\\x{ord(m.group()):02x}"


def printable(s: str) -> str:
    """``s`` with every control character (C0, DEL, C1) shown as ``\\xNN``; all other text,
    non-ASCII letters and emoji included, unchanged."""
    return _CONTROL.sub(_escaped, s)


def printable_fields(obj: _S) -> _S:
    """A copy of the msgspec Struct ``obj`` with :func:`printable` applied to every string in
    it (fields, lists, nested Structs): for a text summary drawn from a whole object
    (``obj`` itself if nothing changes)."""
    changes = {}
    for name in obj.__struct_fields__:
        value = getattr(obj, name)
        shown = _printable_value(value)
        if shown is not value:
            changes[name] = shown
    return msgspec.structs.replace(obj, **changes) if changes else obj


def _printable_value(value: Any) -> Any:
    if isinstance(value, str):
        shown = printable(value)
        return value if shown == value else shown
    if isinstance(value, list):
        items = [_printable_value(v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if isinstance(value, msgspec.Struct):
        return printable_fields(value)
    return value
