"""The kit installs like a normal Python tool: the wheel built from the sources, installed in a
fresh venv outside the checkout, renders every example inventory exactly as the checkout does
(templates and profiles travel inside the package)."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
INVENTORIES = sorted(p.name for p in (REPO / "inventory").iterdir() if p.is_dir())
# Fixed secrets, so both renders write the same bytes (unset, a router key is generated).
SECRETS = {"HF_TOKEN": "hf_test_token", "VLLM_API_KEY": "test-key", "LITELLM_MASTER_KEY": "sk-t"}


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment a user's shell has: nothing that points Python or the kit at the checkout."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "SPARKOPS_TEMPLATES", "VIRTUAL_ENV", "PYTHONHOME")
    }
    return {**env, **extra}


BUILD_WHEEL = REPO / "ansible" / "roles" / "sparkops_cli" / "files" / "build-wheel.py"


def build_wheel(out: Path) -> Path:
    """The wheel as the sparkops_cli role builds it on the controller (from a copy of the
    sources, fixed timestamps)."""
    result = subprocess.run(
        [sys.executable, str(BUILD_WHEEL), str(REPO), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=_clean_env(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    wheel = Path(result.stdout.strip().splitlines()[-1])
    assert wheel.parent == out and wheel.name.startswith("sparkops-")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`sparkops` from the wheel, installed in a new venv outside the checkout."""
    root = tmp_path_factory.mktemp("install")
    target = root / "venv"
    venv.EnvBuilder(with_pip=True).create(target)
    install = subprocess.run(
        [str(target / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=root,
        env=_clean_env(),
    )
    assert install.returncode == 0, install.stderr[-3000:]
    return target


def test_the_same_sources_build_the_same_wheel(wheel: Path, tmp_path: Path) -> None:
    """The role copies (and reinstalls) the wheel only when its bytes change."""
    again = build_wheel(tmp_path)
    assert again.read_bytes() == wheel.read_bytes()
    names = zipfile.ZipFile(wheel).namelist()
    assert "sparkops/templates/serving/compose.yml.j2" in names
    assert "sparkops/profiles/cpu-tiny.yaml" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def _files(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(f.relative_to(folder)): (f.read_bytes(), f.stat().st_mode & 0o777)
        for f in sorted(folder.rglob("*"))
        if f.is_file()
    }


def test_the_installed_kit_is_the_wheel_not_the_checkout(installed: Path, tmp_path: Path) -> None:
    probe = subprocess.run(
        [
            str(installed / "bin" / "python"),
            "-c",
            "import sparkops, sparkops.render.templates as t; "
            "print(sparkops.__file__); print(t.templates_dir())",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=_clean_env(),
    )
    assert probe.returncode == 0, probe.stderr
    module, templates = probe.stdout.splitlines()
    assert Path(module).is_relative_to(installed)
    assert Path(templates).is_relative_to(installed)
    assert (Path(templates) / "serving" / "compose.yml.j2").is_file()


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_the_installed_kit_renders_each_example_as_the_checkout_does(
    installed: Path, tmp_path: Path, inventory: str
) -> None:
    # inventory/local reads its model folder from SPARKOPS_CACHE (it must be absolute).
    env = _clean_env(**SECRETS, SPARKOPS_CACHE=str(tmp_path / "cache"))
    outputs = {}
    for name, command in {
        "wheel": [str(installed / "bin" / "sparkops")],
        "checkout": [sys.executable, "-m", "sparkops.cli"],
    }.items():
        out = tmp_path / name
        source = REPO / "inventory" / inventory
        result = subprocess.run(
            [*command, "render", "--inventory", str(source), "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path if name == "wheel" else REPO,
            env=env,
        )
        assert result.returncode == 0, f"{name}: {result.stderr}"
        assert "Traceback" not in result.stderr
        outputs[name] = _files(out)
    assert outputs["wheel"], "the installed kit rendered nothing"
    assert any(path.endswith("compose.yml") for path in outputs["wheel"])
    assert outputs["wheel"] == outputs["checkout"]


def test_pip_wheel_in_a_clone_leaves_nothing_untracked(tmp_path: Path) -> None:
    """`pip wheel .` in a checkout (what a user tries first) writes setuptools' build/ and
    *.egg-info there: both are ignored, so `git status` stays clean."""
    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)], check=True, timeout=120
    )
    (clone / ".gitignore").write_text((REPO / ".gitignore").read_text())  # as checked out here
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
         "-w", str(tmp_path / "wheels"), "."],
        cwd=clone, capture_output=True, text=True, timeout=600, env=_clean_env(),
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    assert (clone / "build").is_dir()  # setuptools did write it ...
    status = subprocess.run(
        ["git", "-C", str(clone), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert [line for line in status.stdout.splitlines() if line != " M .gitignore"] == []
