"""Tool versions are reproducible: every requirement of the kit's venv is pinned exactly in
constraints.txt, the pins satisfy pyproject's bounds, and `make venv` installs with them and
reinstalls when they change (a new ansible-lint release once changed what `make test` did)."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]


def pins() -> dict[str, str]:
    pinned: dict[str, str] = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version, f"constraints.txt: {line!r} is not NAME==VERSION"
            pinned[canonicalize_name(name)] = version
    return pinned


def requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [
        Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    ]


def test_every_requirement_is_pinned_within_its_bounds() -> None:
    pinned = pins()
    unpinned = [str(r) for r in requirements() if canonicalize_name(r.name) not in pinned]
    assert unpinned == [], f"add these to constraints.txt with the version you tested: {unpinned}"
    outside = [
        f"{r} vs =={pinned[canonicalize_name(r.name)]}"
        for r in requirements()
        if not r.specifier.contains(pinned[canonicalize_name(r.name)], prereleases=True)
    ]
    assert outside == []
    assert "pip" in pinned  # the installer itself is pinned too


def test_make_venv_installs_with_the_constraints_and_follows_them() -> None:
    """`make -n -W constraints.txt`: what make would run if only constraints.txt changed."""
    result = subprocess.run(
        ["make", "-n", "-W", "constraints.txt", "venv"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    installs = [line for line in result.stdout.splitlines() if "pip install" in line]
    assert len(installs) == 2, result.stdout
    assert all("-c constraints.txt" in line for line in installs), result.stdout
