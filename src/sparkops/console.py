"""Where the commands' tables go: a rich Console on stdout that never cuts a table off a
terminal.

On a terminal rich uses its width. Piped or redirected (`| cat`, `> plan.txt`, a CI log) it
falls back to 80 columns and wraps every cell, so a wide table reads as a broken one; there
the console is given `OFF_TTY_WIDTH` instead (tables are not expanded: each takes only the
width its content needs) and, as rich does off a terminal, no colour. COLUMNS, when set,
still wins.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

OFF_TTY_WIDTH = 400


def stdout_console() -> Console:
    """The console for a command's tables and lines on stdout."""
    wide = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    return Console(width=OFF_TTY_WIDTH if wide else None)
