"""A reader that stops early (`sparkops ... | head`) ends every command with 141, quietly.

Issue 37 item 15: `plan throughput ... | head` and `compare ... | head` exited 1, not the 141
the README promises: their tables are printed by rich, whose Console answers a closed pipe
with SystemExit(1) itself, before `sparkops.cli.main` could see the BrokenPipeError. The
reader's end is closed before sparkops writes a byte, so every write fails with EPIPE, the
same on every run (a real `| head -1` might read everything in time).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from sparkops.cli import EXIT_BROKEN_PIPE
from tests.plugins.cli import SPARKOPS
from tests.unit.test_cli_conventions import small_job

THROUGHPUT = ["plan", "throughput", "--computed-tok-s", "2580", "--hit-rate", "88.7%",
              "--prompt-tokens-per-record", "3600", "--gen-tokens-per-record", "300"]  # fmt: skip


def two_jobs(tmp_path: Path) -> tuple[Path, Path]:
    """Two job folders whose decisions differ on one record (compare has something to say)."""
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    job_a, job_b = small_job(first), small_job(second)
    lines = (job_b / "results.jsonl").read_text().splitlines()
    changed = json.loads(lines[0]) | {"final": "no"}
    (job_b / "results.jsonl").write_text("\n".join([json.dumps(changed), *lines[1:]]) + "\n")
    return job_a, job_b


def into_closed_pipe(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run sparkops with stdout a pipe nobody reads any more."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [*SPARKOPS, *argv], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "argv",
    [
        THROUGHPUT,  # a rich table
        [*THROUGHPUT, "--json"],  # print()
        ["plan", "memory", "--profile", "gb10-gemma4-12b-fp8"],
        ["plan", "decode", "--profile", "gb10-gemma4-12b-fp8", "--context", "2000"],
        ["compare", "JOB_A", "JOB_B"],
        ["compare", "JOB_A", "JOB_B", "--json"],
    ],
    ids=lambda argv: " ".join(argv[:2] + argv[-1:]),
)
def test_a_closed_pipe_ends_the_command_with_141_and_nothing_on_stderr(tmp_path, argv):
    job_a, job_b = two_jobs(tmp_path)
    argv = [{"JOB_A": str(job_a), "JOB_B": str(job_b)}.get(arg, arg) for arg in argv]
    done = into_closed_pipe(argv)
    assert (done.returncode, done.stderr) == (EXIT_BROKEN_PIPE, "")


def test_the_same_commands_into_a_reader_exit_0(tmp_path):
    """The control: with someone reading, the commands above finish normally."""
    job_a, job_b = two_jobs(tmp_path)
    for argv in (THROUGHPUT, ["compare", str(job_a), str(job_b)]):
        done = subprocess.run([*SPARKOPS, *argv], capture_output=True, text=True, timeout=120)
        assert (done.returncode, done.stderr) == (0, ""), argv
        assert done.stdout.strip()


def test_an_exit_of_its_own_is_not_taken_for_a_closed_pipe(tmp_path):
    """A usage error still exits 2 with its line, into a closed pipe too (stderr is open)."""
    done = into_closed_pipe(["plan", "throughput", "--computed-tok-s", "x"])
    assert done.returncode == 2
    assert "argument --computed-tok-s: invalid float value: 'x'" in done.stderr
