"""Tables printed off a terminal are whole: rich's 80-column fallback wrapped every wide cell
when `sparkops plan ...` was piped or redirected (sparkops.console)."""

from __future__ import annotations

import os

from tests.plugins.cli import sparkops

PLAN = ("plan", "memory", "--profile", "gb10-gemma4-12b-fp8", "--seqs", "1000")
PLAN_ARGS = (*PLAN, "--prompt-tokens-per-call", "1600")


def test_a_piped_table_keeps_each_row_on_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = sparkops(*PLAN_ARGS, limit=60, env=env, check=True)
    rows = [line for line in proc.stdout.splitlines() if line.startswith("│")]
    shared = "(whole 64-token hit blocks) = 0 blocks"
    assert any("shared, held once" in row and shared in row for row in rows), proc.stdout
    assert all("│" in row[1:] for row in rows) and max(map(len, rows)) > 80
    assert not any(row.startswith("│                                │") for row in rows)  # no wraps
    assert "\x1b[" not in proc.stdout  # no colour codes in a pipe


def test_columns_still_sets_the_width() -> None:
    proc = sparkops(*PLAN_ARGS, limit=60, env={**os.environ, "COLUMNS": "60"}, check=True)
    assert max(len(line) for line in proc.stdout.splitlines()) <= 60


def test_markdown_off_a_terminal_is_its_own_text_not_padded_to_the_console_width() -> None:
    import io

    from rich.console import Console

    from sparkops.console import OFF_TTY_WIDTH, print_markdown

    text = "# Report job-1\n\nSome text here.\n\n| Metric | Value |\n|---|---|\n| Records | 300 |\n"
    out = io.StringIO()
    print_markdown(Console(file=out, width=OFF_TTY_WIDTH), text)
    assert out.getvalue() == text  # rich padded each heading and paragraph to 400 columns
    assert max(len(line) for line in out.getvalue().splitlines()) == len("| Metric | Value |")
