"""Day one as a newcomer reads it (issue 37 item 15): the laptop path from a bare Windows
install, an `scp` that reaches the Spark, a first job built from a sample that exists, and the
SSH/sudo fix lines pointing at a section that exists."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from sparkops.cli import main
from sparkops.profiles import load_profile
from tests.unit.test_readme_commands import README, commands, doc_shell_lines, shell_lines

REPO = Path(__file__).resolve().parents[2]
DAY_ONE = REPO / "docs" / "day-one.md"
PLUGIN = REPO / "ansible/plugins/callback/sparkops_fixes.py"


def fixes_plugin() -> Any:
    spec = importlib.util.spec_from_file_location("sparkops_fixes", PLUGIN)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def section(text: str, heading: str) -> str:
    """The body of the `## heading` section of a Markdown text ("" when there is none)."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return match.group(1) if match else ""


def inventory_names() -> set[str]:
    """Every host name the example inventories give (the names `-l` takes)."""
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "hosts" and isinstance(value, dict):
                    names.update(value)
                walk(value)

    for path in REPO.glob("inventory/*/hosts.yml"):
        walk(yaml.safe_load(path.read_text()))
    return names


def test_the_fix_lines_name_a_section_that_exists_and_holds_every_fix() -> None:
    """The callback's lines end "(docs/provision.md, 'SSH and sudo')": that section was
    missing. It must exist and give the fix of every line the callback can print."""
    plugin = fixes_plugin()
    path, heading = re.fullmatch(r"(\S+), '(.+)'", plugin.GUIDE).groups()
    body = section((REPO / path).read_text(), heading)
    assert body, f"{path} has no '## {heading}' section"
    # one entry per fix the callback knows, in its order: what the section must say for it
    wanted = [
        ("sudo asks for a password", "-K", "visudo -f /etc/sudoers.d/sparkops"),
        ("sudo refused the password", "login password"),
        ("may not use sudo", "usermod -aG sudo"),
        ("SSH refused the login", "ssh-keygen -t ed25519", "ssh-copy-id"),
        ("SSH host key is not known here", "Host key verification failed"),
        ("cannot reach", "ansible_host"),
    ]
    assert len(wanted) == len(plugin.FIXES)
    for words, (_pattern, fix) in zip(wanted, plugin.FIXES, strict=True):
        assert words[0] in fix, (words, fix)
        for word in words:
            assert word in body, word


def test_scp_goes_to_the_spark_s_address_not_its_inventory_name() -> None:
    """`scp ... researcher@spark-1:` asked SSH for a host only the inventory knows."""
    names = inventory_names()
    assert "spark-1" in names
    copies = [
        command
        for _doc, line in doc_shell_lines()
        for command in commands(line)
        if command[0] == "scp"
    ]
    assert len(copies) >= 2  # README and day-one
    for command in copies:
        host = command[-1].split("@", 1)[-1].split(":", 1)[0]
        assert host not in names, command
        assert host == "192.0.2.10", command  # the address step 2's ssh-copy-id uses


def test_the_laptop_path_starts_from_bare_windows() -> None:
    text = DAY_ONE.read_text()
    laptop = section(text, "3. Laptop or desktop")
    assert "wsl --install -d Ubuntu-24.04" in laptop
    assert "NVIDIA driver for Windows" in laptop and "install no NVIDIA driver" in laptop
    table = [line for line in laptop.splitlines() if line.startswith("| ")]
    (wslconfig,) = [row for row in table if ".wslconfig" in row]
    assert "`[wsl2]` then `memory=25GB`" in wslconfig and "wsl --shutdown" in wslconfig
    # the figure it gives clears the threshold the provision check warns below
    defaults = yaml.safe_load((REPO / "ansible/roles/host_tuning/defaults/main.yml").read_text())
    assert f"warns below {defaults['host_tuning_wsl_min_memory_gb']} GiB" in wslconfig
    # Python 3.11 and the Makefile's PYTHON=
    controller = section(text, "1. Controller")
    assert "make controller PYTHON=python3.11" in controller
    assert "python3.11-venv" in controller
    assert re.search(r"^PYTHON \?= python3$", (REPO / "Makefile").read_text(), re.M)
    assert "make controller PYTHON=python3.11" in README.read_text()


def test_the_first_job_builds_from_the_sample_and_names_the_served_model(tmp_path) -> None:
    """The day-one block copies the sample (run here as written, against the checkout), the
    served name it gives is the example inventories' profile's, and the folder checks."""
    text = DAY_ONE.read_text()
    first_job = section(text, "8. First job")
    block = [line for line in shell_lines(first_job) if line.startswith(("mkdir", "cp "))]
    assert len(block) == 3
    (tmp_path / "src").symlink_to(REPO / "src")
    subprocess.run(["bash", "-ec", "\n".join(block)], cwd=tmp_path, check=True, timeout=60)
    job = tmp_path / "job"
    assert {p.name for p in job.iterdir()} >= {"pipeline.yaml", "prompts", "records.jsonl"}

    serving = yaml.safe_load((REPO / "inventory/single/group_vars/all/serving.yml").read_text())
    profile = load_profile(serving["vllm_serving_profile"])
    assert f"`{profile.served_model_name}` for `{profile.name}`" in first_job
    assert "served_model_name" in first_job and "not the Hugging Face name" in first_job
    assert "JSONL" in first_job and "unique `id`" in first_job and "`user:`" in first_job

    pipeline = job / "pipeline.yaml"
    served = f"model: {profile.served_model_name}"
    pipeline.write_text(re.sub(r"^model: .*$", served, pipeline.read_text(), count=1, flags=re.M))
    assert main(["pipeline", "check", str(pipeline)]) == 0
