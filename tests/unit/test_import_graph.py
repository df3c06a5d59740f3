"""The import contracts of pyproject.toml ([tool.importlinter], checked by `lint-imports` in
`make lint`) hold, and each one fails when the code breaks it.

The contracts: the layers (bench and local run jobs through the client, batch; the readers,
report and compare, sit below it; the job folder, jobdir, below both), report/compare/plan
never import batch, jobdir imports neither the client nor the readers, and no import circle
exists between packages nor between the files of one package. Imports inside functions and
under TYPE_CHECKING count: a deferred or type-only import is still a dependency.

A violation is shown on a copy of the package with one import added, so the check can fail
and says which contract broke.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import sparkops

SRC = Path(sparkops.__file__).parent
ROOT = SRC.parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(package_parent: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports with the repository's contracts over the package under `package_parent`."""
    env = {**os.environ, "PYTHONPATH": str(package_parent), "NO_COLOR": "1"}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=package_parent,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_import_contracts_hold() -> None:
    run = _lint_imports(SRC.parent)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Contracts: 4 kept, 0 broken." in run.stdout


@pytest.mark.parametrize(
    ("file", "line", "broken"),
    [
        (
            "report/compute.py",
            "from sparkops.batch import stall",
            "report, compare and plan never import the client (batch) BROKEN",
        ),
        (
            "jobdir/lines.py",
            "from sparkops.report import stalls",
            "The job folder imports neither the client nor the readers BROKEN",
        ),
        (
            "batch/calls.py",
            "from sparkops.batch import engine",
            "No import circle between packages, nor between the files of one package BROKEN",
        ),
    ],
)
def test_a_violation_fails_naming_its_contract(
    tmp_path: Path, file: str, line: str, broken: str
) -> None:
    copy = tmp_path / "sparkops"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / file
    target.write_text(target.read_text(encoding="utf-8") + f"\n{line}  # noqa\n", "utf-8")
    run = _lint_imports(tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert broken in " ".join(run.stdout.split()), run.stdout


MAX_LINES = 500


def test_no_source_file_is_over_500_lines() -> None:
    """The package's files stay small enough to read whole (docs/development.md): a file
    that grows past 500 lines is split at a seam of its own (as plan/cli.py was into its
    commands, jobdir/lines.py into serving_lines.py)."""
    sizes = {
        str(path.relative_to(SRC)): len(path.read_text(encoding="utf-8").splitlines())
        for path in SRC.rglob("*.py")
    }
    assert len(sizes) > 100  # the whole package was read
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
