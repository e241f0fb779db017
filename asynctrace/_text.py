"""Text taken from a file, made safe to print on a terminal.

Kernel and function names, device names, sync sites and ops come from traces and records that
anyone may have written. Printed raw, a name holding ``\\x1b]0;TITLE\\x07`` sets the terminal's
window title, ``\\x1b[2J`` clears the screen, and OSC 8 sequences plant links. Every text output
(rich tables, plain lines, error messages) passes such strings through :func:`printable`; JSON
output stays raw, since JSON escapes control characters itself.
"""

from __future__ import annotations

import re

__all__ = ["printable"]

# C0 controls, DEL and C1 controls (U+0080-U+009F: 8-bit CSI and OSC among them)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _escaped(m: re.Match[str]) -> str:
    return f"\\x{ord(m.group()):02x}"


def printable(s: str) -> str:
    """``s`` with every control character (C0, DEL, C1) shown as ``\\xNN``; all other text,
    non-ASCII letters and emoji included, unchanged."""
    return _CONTROL.sub(_escaped, s)
