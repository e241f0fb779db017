"""The command line's subcommands (``asynctrace <command>``), which ``asynctrace.cli`` runs.

Importing the package registers its files with the frames rule of a running session: the
commands launch a user's script (no frame outside them is the user's), and ``asynctrace
demo``'s loops stand for a user's training loop (their syncs are shown as the user's).
"""

from __future__ import annotations

import os

from asynctrace._frames import register_launcher, register_user_code

__all__: list[str] = []

_HERE = os.path.dirname(os.path.abspath(__file__))

register_launcher(_HERE + os.sep)
register_user_code(os.path.join(_HERE, "_demo_loops.py"))
