"""The test bed itself: the engine, compose v2 and systemd hosts the role and deploy tests use.

If these fail, every other infra test would fail for a reason that has nothing to do with the
kit, so they check the bed's promises one by one: both architectures boot systemd, units can be
started, Ansible reaches the hosts over the Docker connection, and compose v2 drives the engine.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.plugins.hosts import READY_STATES, Host, image_ref, inventory, run_docker
from tests.plugins.playbook import CONNECTIONS

pytestmark = pytest.mark.infra


@pytest.fixture(scope="module")
def amd64_host(systemd_host: Callable[..., Host]) -> Host:
    return systemd_host(arch="amd64")


@pytest.fixture(scope="module")
def arm64_host(systemd_host: Callable[..., Host]) -> Host:
    return systemd_host(arch="arm64")


def test_amd64_host_is_x86_64_and_running(amd64_host: Host) -> None:
    assert amd64_host.exec(["uname", "-m"], check=True).stdout.strip() == "x86_64"
    # Native boots must be clean: "degraded" here means a unit the image should mask failed.
    assert amd64_host.system_state() == "running", amd64_host.exec("systemctl --failed").stdout


def test_arm64_host_is_aarch64_and_booted(arm64_host: Host) -> None:
    assert arm64_host.exec(["uname", "-m"], check=True).stdout.strip() == "aarch64"
    assert arm64_host.system_state() in READY_STATES
    assert arm64_host.testinfra.file("/usr/bin/python3").exists


def test_hosts_get_distinct_machine_ids(amd64_host: Host, arm64_host: Host) -> None:
    ids = {
        h.exec(["cat", "/etc/machine-id"], check=True).stdout.strip()
        for h in (amd64_host, arm64_host)
    }
    assert len(ids) == 2 and all(len(i) == 32 for i in ids)


def test_systemd_run_unit_starts(amd64_host: Host) -> None:
    unit = f"sparkops-probe-{secrets.token_hex(3)}"
    amd64_host.exec(
        [
            "systemd-run",
            f"--unit={unit}",
            "--property=Type=oneshot",
            "--property=RemainAfterExit=yes",
            "sh",
            "-c",
            f"echo {unit} > /run/{unit}.out",
        ],
        check=True,
    )
    service = amd64_host.testinfra.service(unit)
    assert service.is_running  # active (exited), kept by RemainAfterExit
    assert amd64_host.testinfra.file(f"/run/{unit}.out").content_string.strip() == unit


def test_ansible_reaches_hosts_over_docker_connection(
    amd64_host: Host, arm64_host: Host, tmp_path: Path
) -> None:
    """The role and deploy tests converge over community.docker.docker_api: python3 must answer."""
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump(inventory([amd64_host, arm64_host])))
    ansible = Path(sys.executable).with_name("ansible")
    env = {
        **os.environ,
        "ANSIBLE_STDOUT_CALLBACK": "json",
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_CONNECTION_PLUGINS": str(CONNECTIONS),
    }
    result = subprocess.run(
        [
            str(ansible),
            "testbed",
            "-i",
            str(inv),
            "-m",
            "ansible.builtin.setup",
            "-a",
            "gather_subset=!all,!min,architecture",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    hosts = json.loads(result.stdout)["plays"][0]["tasks"][0]["hosts"]
    arches = {name: r["ansible_facts"]["ansible_architecture"] for name, r in hosts.items()}
    assert arches == {amd64_host.name: "x86_64", arm64_host.name: "aarch64"}


def test_docker_host_has_what_an_inner_engine_needs(systemd_host: Callable[..., Host]) -> None:
    host = systemd_host(arch="amd64", docker=True)
    status = host.exec(["cat", "/proc/1/status"], check=True).stdout
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    caps = int(fields["CapEff"], 16)
    for bit, cap in ((12, "NET_ADMIN"), (27, "MKNOD"), (21, "SYS_ADMIN")):
        assert caps >> bit & 1, f"{cap} missing"
    assert fields["Seccomp"].strip() == "0"  # unconfined
    # Not overlayfs, so the inner engine can use overlay2 (overlay on overlay is refused).
    fstype = host.exec(["findmnt", "-n", "-o", "FSTYPE", "/var/lib/docker"], check=True)
    assert fstype.stdout.strip() not in ("", "overlay")


def test_compose_v2_drives_the_engine(docker_engine: str, tmp_path: Path) -> None:
    version = run_docker("compose", "version", "--short").stdout.strip()
    assert version.lstrip("v").startswith("2."), version
    project = f"sparkops-test-{secrets.token_hex(4)}"
    compose = tmp_path / "compose.yaml"
    compose.write_text(
        yaml.safe_dump(
            {"services": {"probe": {"image": image_ref("amd64"), "command": ["sleep", "120"]}}}
        )
    )
    base = ["compose", "--project-name", project, "--file", str(compose)]
    try:
        run_docker(*base, "up", "--detach", "--wait")
        ps = run_docker(*base, "ps", "--format", "json").stdout
        rows = [json.loads(line) for line in ps.splitlines() if line.strip()]
        rows = [r for row in rows for r in (row if isinstance(row, list) else [row])]
        assert [(r["Service"], r["State"]) for r in rows] == [("probe", "running")]
    finally:
        run_docker(*base, "down", "--volumes", "--timeout", "0", check=False)
