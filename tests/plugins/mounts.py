"""Commands run in a private mount namespace, for a job folder on a full or read-only disk.

A test that needs a real full disk or a read-only file system mounts a small tmpfs where only
its own processes see it (`unshare --map-root-user --mount`: no root, nothing left behind),
runs `sparkops` commands there from one shell script, and reads each command's outcome back
from the files the script wrote (`step` writes the redirections, `outcome` reads them).
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tests.plugins.cli import assert_quiet


def in_mount_namespace(script: str, timeout: float = 180.0) -> None:
    """Run a shell script in a private mount namespace; it must exit 0."""
    done = subprocess.run(
        ["unshare", "--map-root-user", "--mount", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr


def step(folder: Path, name: str, argv: Sequence[str]) -> str:
    """A script line running `argv` with its stdout, stderr and exit status kept in
    `folder/name.{out,err,rc}` (for `outcome`)."""
    where = folder / name
    return f"{shlex.join(list(argv))} >{where}.out 2>{where}.err; echo $? >{where}.rc\n"


def outcome(folder: Path, name: str) -> subprocess.CompletedProcess:
    """What the `step` called `name` printed and returned; it printed no traceback."""
    proc = subprocess.CompletedProcess([], int((folder / f"{name}.rc").read_text()))
    proc.stdout = (folder / f"{name}.out").read_text()
    proc.stderr = (folder / f"{name}.err").read_text()
    assert_quiet(proc.stdout, proc.stderr)
    return proc
