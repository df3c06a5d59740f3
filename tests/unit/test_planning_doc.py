"""docs/planning.md tells the truth: every `sparkops plan` command on the page that is followed
by a ```text block is run, and each line of the block must be a line of what it prints (table
borders left out, spaces collapsed). A planner change that moves a figure fails here until the
page says the new one."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from tests.plugins.cli import sparkops

PAGE = Path(__file__).resolve().parents[2] / "docs" / "planning.md"
EXAMPLE = re.compile(r"```sh\n(sparkops plan [^`]*?)```\n\n```text\n([^`]*?)```")


def examples() -> list[tuple[str, list[str]]]:
    found = []
    for command, text in EXAMPLE.findall(PAGE.read_text(encoding="utf-8")):
        found.append((command.replace("\\\n", " ").strip(), text.strip().splitlines()))
    return found


def printed_lines(stdout: str) -> set[str]:
    return {" ".join(re.sub("[│┃]", " ", line).split()) for line in stdout.splitlines()}


def test_the_page_has_its_examples() -> None:
    commands = [command for command, _ in examples()]
    assert len(commands) >= 4, commands
    assert any("--calls-per-record 2.4" in command for command in commands)


@pytest.mark.parametrize(("command", "expected"), examples(), ids=lambda v: str(v)[:60])
def test_a_documented_command_prints_what_the_page_says(command, expected) -> None:
    argv = shlex.split(command)[1:]
    if argv[:2] == ["plan", "guard"]:
        argv += ["--nvidia-smi", "false"]  # the same answer on a machine with a GPU
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # piped: whole rows
    done = sparkops(*argv, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    lines = printed_lines(done.stdout)
    missing = [line for line in expected if line not in lines]
    assert not missing, (missing, done.stdout)
