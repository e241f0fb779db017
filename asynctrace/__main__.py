"""``python -m asynctrace`` runs the command line."""

import sys

from asynctrace.cli import main

sys.exit(main())
