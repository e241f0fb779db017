"""``python -m asynctrace`` runs the command line."""

from asynctrace.cli import console

console()
