"""``python -m asynctrace`` runs the command line."""

from asynctrace._frames import register_launcher
from asynctrace.cli import console

register_launcher(__file__)
console()
