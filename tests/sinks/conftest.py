"""A sink runs inside a session: the capture tests' leak guard applies here too."""

from __future__ import annotations

from tests.capture.conftest import _no_leaked_capture_state

__all__ = ["_no_leaked_capture_state"]
