"""The import contracts of pyproject.toml ([tool.importlinter], checked by `lint-imports` in
`make lint`) hold, and each one fails when the code breaks it.

The contracts: the job side's layers (bench and local run jobs; the client, batch, and the
readers, report and compare, stand apart from one another on the pipeline, the job folder,
jobdir, and the shared words below it), the ops side's (local starts what render builds;
render and doctor stand on the planners, the planners on the profiles), only bench and local
import batch, jobdir imports neither the client nor the readers, the shared words
(sparkops.vocabulary) and the samples import no other package, and no import circle exists
between packages nor between the files of one package. Imports inside functions and under
TYPE_CHECKING count: a deferred or type-only import is still a dependency.

A violation is shown on a copy of the package with one import added, so the check can fail
and says which contract broke; every package of src/sparkops is named in a contract, so a
new one cannot slip past them; and the Ansible preflight filter, which imports `doctor`,
loads neither the client nor aiohttp.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
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
    assert "Contracts: 6 kept, 0 broken." in run.stdout


def _contract_name(contract_id: str) -> str:
    return next(c["name"] for c in _contracts() if c["id"] == contract_id)


def _contracts() -> list[dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return config["tool"]["importlinter"]["contracts"]


@pytest.mark.parametrize(
    ("file", "line", "contract"),
    [
        ("report/compute.py", "from sparkops.batch import stall", "client"),
        ("jobdir/lines.py", "from sparkops.report import stalls", "jobdir"),
        ("batch/calls.py", "from sparkops.batch import engine", "cycles"),
        # the doors issue 38 closed: the ops side and the pipeline never load the client,
        # the client never reads a report, the shared words stand on nothing
        ("doctor/preflight.py", "from sparkops.batch.options import JobConfig", "client"),
        ("render/command.py", "from sparkops.batch import outcome", "client"),
        ("pipeline/prompt.py", "from sparkops.batch import outcome", "client"),
        ("metrics/scrape.py", "from sparkops.batch import outcome", "client"),
        ("batch/records.py", "from sparkops.report import compute", "layers"),
        ("batch/records.py", "from sparkops.compare import stats", "layers"),
        ("plan/memory.py", "from sparkops.render import command", "ops"),
        ("vocabulary.py", "from sparkops.jobdir import lines", "leaves"),
    ],
)
def test_a_violation_fails_naming_its_contract(
    tmp_path: Path, file: str, line: str, contract: str
) -> None:
    copy = tmp_path / "sparkops"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / file
    target.write_text(target.read_text(encoding="utf-8") + f"\n{line}  # noqa\n", "utf-8")
    run = _lint_imports(tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"{_contract_name(contract)} BROKEN" in " ".join(run.stdout.split()), run.stdout


def _packages() -> set[str]:
    return {f"sparkops.{p.parent.name}" for p in SRC.glob("*/__init__.py")}


def _named(contract: dict) -> set[str]:
    """The packages a contract rules over (its layers, or the modules it forbids imports of)."""
    if contract["type"] == "layers":
        return {
            name.strip()
            for layer in contract["layers"]
            for name in layer.replace(":", "|").split("|")
        }
    if contract["type"] == "forbidden":
        return set(contract["source_modules"])
    return set()  # cycles: over every package alike, it places none


def test_every_package_is_named_in_a_contract() -> None:
    """A package added to src/sparkops must be placed in a layer or a forbidden rule, or
    whatever it imports goes unseen (before issue 38 only 7 of 13 were named)."""
    named = set().union(*(_named(c) for c in _contracts()))
    assert len(_packages()) >= 13
    assert _packages() - named == set()
    assert named - _packages() - {"sparkops.vocabulary"} == set()  # no stale name


def _modules_after(code: str) -> list[str]:
    """The modules a fresh interpreter has loaded after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    run = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return json.loads(run.stdout.splitlines()[-1])


def test_the_preflight_filter_loads_neither_the_client_nor_aiohttp() -> None:
    """The Ansible preflight filter imports `doctor`, which took its one constant from
    batch/options.py and so loaded the whole client and aiohttp (641 modules); it now loads
    less than half of what the client alone does (docs/development.md has the figures)."""
    plugin = ROOT / "ansible" / "plugins" / "filter" / "sparkops_doctor.py"
    loaded = _modules_after(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('sparkops_doctor', {str(plugin)!r})\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))"
    )
    assert "sparkops.doctor.preflight" in loaded  # the filter really was imported
    assert [
        m for m in loaded if m.startswith(("sparkops.batch", "aiohttp", "sparkops.jobdir"))
    ] == []
    with_client = _modules_after("import ansible.errors, sparkops.batch.options")
    assert len(loaded) < len(with_client) / 2


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
