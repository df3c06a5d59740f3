"""provision.yml against one systemd test host: the inventory and the run the infra tests share.

test_provision.py, test_provision_arm64.py, test_provision_runtime.py, test_provision_pair.py
and test_sparkops_cli_role.py each converge a different part of provision.yml, on a host in an
inventory shaped like inventory/single/ with the settings a Debian test host needs
(`TEST_VARS`); everything else is the roles' defaults.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.plugins.hosts import Host, inventory, put_fixture, set_gpu_state
from tests.plugins.playbook import PlaybookRun, run_playbook, start_playbook

JOB_USER = "researcher"
# The role defaults to NVIDIA's public repository; the tests name an .invalid host instead, so
# nothing is fetched from NVIDIA (check mode only renders them).
NVIDIA_REPO = "https://nvidia-repo.invalid/stable/deb"

# Deliberate limits of a test host: Debian 12 has no compose v2 package, so
# container_runtime_compose_required is false; x86_64 is not a Spark, so
# spark_preflight_arch_mismatch is warn; the disk is a container's.
EARLYOOM_DRY_RUN = "-m 2 -s 80 -r 3600 --avoid ^(init|systemd|sshd|dockerd|containerd)$ --dryrun"
TEST_VARS: dict[str, Any] = {
    "sparkops_topology": "single",
    "spark_preflight_arch_mismatch": "warn",
    "spark_preflight_min_disk_gb": 1,
    "container_runtime_compose_required": False,
    "container_runtime_docker_users": [JOB_USER],
    "host_tuning_job_users": [JOB_USER],
    "host_tuning_earlyoom_enabled": True,
    # A test host's earlyoom reads the whole test machine's memory: left to act, it killed
    # processes in the host (the lock holder) while vLLM-CPU tests filled that memory.
    "host_tuning_earlyoom_args": EARLYOOM_DRY_RUN,
    "container_runtime_nvidia_repo_url": NVIDIA_REPO,
    "container_runtime_nvidia_repo_key_url": "https://nvidia-repo.invalid/gpgkey",
}


def prepare(host: Host, tools: tuple[str, ...] = ("nvidia-smi",), gpu_state: str = "load") -> None:
    """Make a fresh test host look like a Spark to the roles: the job user, the GPU tool
    stand-ins ``tools`` (the roles and preflight read the GPU) and the GPU's ``gpu_state``."""
    host.exec(["useradd", "--create-home", JOB_USER], check=True)
    for tool in tools:
        put_fixture(host, tool)
    set_gpu_state(host, gpu_state)


def write_inventory(directory: Path, host: Host, extra: dict[str, Any] | None = None) -> Path:
    """An inventory in the shape of inventory/single/, pointing at the test host; ``extra``
    overrides `TEST_VARS`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "hosts.yml").write_text(yaml.safe_dump(inventory([host], group="sparks")))
    group_vars = directory / "group_vars" / "all"
    group_vars.mkdir(parents=True, exist_ok=True)
    (group_vars / "test.yml").write_text(yaml.safe_dump({**TEST_VARS, **(extra or {})}))
    return directory


def provision(inventory_dir: Path, *args: str, timeout: float = 1200) -> PlaybookRun:
    """Run provision.yml the way the README says (the kit's ansible.cfg), ``args`` appended."""
    return run_playbook("provision.yml", inventory_dir, *args, timeout=timeout)


def provision_killed_at(inventory_dir: Path, marker: str, *args: str, timeout: float = 900) -> str:
    """Run provision.yml (``args`` appended) and SIGKILL it when ``marker`` is printed.

    Stands in for a converge interrupted by a dropped SSH session or a Ctrl-C at the wrong
    moment: ansible-playbook and its workers die together (one process group).
    """
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    with start_playbook("provision.yml", inventory_dir, *args, new_session=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if marker in line or time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                break
        proc.wait()
    output = "".join(lines)
    assert marker in output, output[-4000:]
    return output


def engine_info(host: Host) -> dict[str, Any]:
    """The host's running Docker engine as `docker info --format '{{json .}}'` shows it."""
    info = host.exec(["docker", "info", "--format", "{{json .}}"], check=True)
    return json.loads(info.stdout)


def daemon_json(host: Host) -> dict[str, Any]:
    """The host's /etc/docker/daemon.json, through a link ({} when absent)."""
    text = host.exec("cat /etc/docker/daemon.json 2>/dev/null").stdout.strip()
    return json.loads(text) if text else {}


@dataclass
class Converged:
    """A test host after a check-mode run, a first and a second converge of provision.yml."""

    host: Host
    inventory: Path
    check: PlaybookRun
    first: PlaybookRun
    second: PlaybookRun
