"""Sink tests: what ``trace()`` plugs into a session (``asynctrace/sinks/``)."""
