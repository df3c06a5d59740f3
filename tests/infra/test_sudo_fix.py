"""A first run on an account whose sudo asks for a password names the fix (issue 31, item 1).

DGX OS accounts need a password for sudo and every kit play runs with `become: true`: Ansible
stops with "Missing sudo password" and names no fix. On a real systemd host with such an
account (in the sudo group, a password set, no sudoers rule), provision.yml must print the
kit's one line naming -K and a sudoers rule; given the password (what -K asks for), the same
run gets past the become step. Cheap: one amd64 host, no converge (check mode, preflight tag).
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
import yaml

from tests.plugins.hosts import Host, inventory
from tests.plugins.playbook import run_playbook

pytestmark = pytest.mark.infra

USER = "clinician"


@pytest.fixture(scope="module")
def host_with_password_sudo(systemd_host) -> tuple[Host, str]:
    host: Host = systemd_host("amd64")
    password = secrets.token_hex(8)
    host.exec(["useradd", "--create-home", "--groups", "sudo", USER], check=True)
    host.exec(["chpasswd"], input=f"{USER}:{password}\n", check=True)
    return host, password


def _inventory(tmp_path: Path, host: Host) -> Path:
    data = inventory([host], group="sparks")
    data["all"]["children"]["sparks"]["hosts"][host.name]["ansible_user"] = USER
    data["all"]["vars"] = {"sparkops_topology": "single", "spark_preflight_arch_mismatch": "warn"}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_missing_sudo_password_is_told_with_its_fix(
    tmp_path: Path, host_with_password_sudo: tuple[Host, str]
) -> None:
    host, password = host_with_password_sudo
    hosts = _inventory(tmp_path, host)
    refused = run_playbook("provision.yml", hosts, "--tags", "preflight", check=True, timeout=600)
    assert refused.rc != 0
    # Ansible's words: "Missing sudo password" over SSH; over this host's Docker connection
    # sudo's own, nested in the fact gathering's failed_modules.
    assert "sudo: a password is required" in refused.text or "Missing sudo password" in (
        refused.text
    )
    assert (
        f"sparkops: {host.name}: sudo asks for a password: run again with -K (--ask-become-pass)"
        in refused.text
    ), refused.output
    assert f"'{USER} ALL=(ALL) NOPASSWD: ALL'" in refused.text
    # What -K gives Ansible: the become step passes, and no line about sudo is printed.
    given = run_playbook(
        "provision.yml",
        hosts,
        "--tags",
        "preflight",
        check=True,
        extra_vars={"ansible_become_password": password},
        timeout=600,
    )
    assert "Missing sudo password" not in given.text
    assert "a password is required" not in given.text
    assert "sudo asks for a password" not in given.text
    assert given.recap[host.name].unreachable == 0
    assert given.recap[host.name].ok > 1, given.output
