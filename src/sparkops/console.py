"""Where the commands' tables go: a rich Console on stdout that never cuts a table off a
terminal, and never pads one out to a page width.

On a terminal rich uses its width. Piped or redirected (`| cat`, `> plan.txt`, a CI log) it
falls back to 80 columns and wraps every cell, so a wide table reads as a broken one; there
the console is given `OFF_TTY_WIDTH` instead (tables are not expanded: each takes only the
width its content needs) and, as rich does off a terminal, no colour. COLUMNS, when set,
still wins.

Markdown (the demo's report) is the exception: rich pads every heading and paragraph to the
console's full width, so at `OFF_TTY_WIDTH` each line of a piped report carried hundreds of
spaces. `print_markdown` renders it on a terminal and, off one, writes the Markdown text as it
is (it is written to be read as text: it is report.md).
"""

from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.markdown import Markdown

OFF_TTY_WIDTH = 400


def stdout_console() -> Console:
    """The console for a command's tables and lines on stdout."""
    wide = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    return Console(width=OFF_TTY_WIDTH if wide else None)


def print_markdown(console: Console, text: str) -> None:
    """Markdown rendered on a terminal; the text itself elsewhere (no full-width padding)."""
    if console.is_terminal:
        console.print(Markdown(text))
    else:
        console.out(text.rstrip("\n"), highlight=False)
