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
    assert any(
        "shared, held once" in row and "(whole 64-token blocks) = 0.00 GB" in row for row in rows
    ), proc.stdout
    assert all("│" in row[1:] for row in rows) and max(map(len, rows)) > 80
    assert not any(row.startswith("│                                │") for row in rows)  # no wraps
    assert "\x1b[" not in proc.stdout  # no colour codes in a pipe


def test_columns_still_sets_the_width() -> None:
    proc = sparkops(*PLAN_ARGS, limit=60, env={**os.environ, "COLUMNS": "60"}, check=True)
    assert max(len(line) for line in proc.stdout.splitlines()) <= 60
