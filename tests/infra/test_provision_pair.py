"""qsfp_network on a real pair of systemd hosts, linked by Docker's bridge instead of a cable.

Two amd64 hosts stand in for the two Sparks of inventory/pair-pp: each gets its bridge address
as qsfp_network_address, eth0 as the interface and the bridge's MTU of 1500 (no QSFP cable or
jumbo frames exist here). The role's own checks run for real: netplan file (0600), ethtool link
speed (a veth reports 10000 Mb/s, so the 200000 expectation warns), and the do-not-fragment
ping at MTU - 28 to the peer. A run asking for MTU 9000 must then fail that ping with the fix.
`netplan apply` is off (qsfp_network_apply: false): containers have no networkd to apply it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.plugins.hosts import Host, put_fixture, run_docker
from tests.plugins.playbook import PlaybookRun
from tests.plugins.provision import provision

pytestmark = [pytest.mark.infra, pytest.mark.timeout(1800)]

NETPLAN = "/etc/netplan/40-sparkops-qsfp.yaml"


def bridge_address(host: Host) -> str:
    """The host's address on Docker's default bridge: the 'cable' between the pair."""
    fmt = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
    return run_docker("inspect", "--format", fmt, host.id).stdout.strip()


def pair_inventory(directory: Path, hosts: list[Host], mtu: int) -> Path:
    """An inventory shaped like inventory/pair-pp, with the bridge as the QSFP link."""
    directory.mkdir(parents=True, exist_ok=True)
    members = {h.name: {**h.ansible_vars, "qsfp_network_address": bridge_address(h)} for h in hosts}
    tree = {"all": {"children": {"sparks": {"children": {"spark_pair": {"hosts": members}}}}}}
    (directory / "hosts.yml").write_text(yaml.safe_dump(tree))
    group_vars = directory / "group_vars" / "all"
    group_vars.mkdir(parents=True, exist_ok=True)
    settings = {
        "sparkops_topology": "pair-pp",
        "spark_preflight_arch_mismatch": "warn",
        "spark_preflight_min_disk_gb": 1,
        "qsfp_network_interface": "eth0",
        "qsfp_network_prefix": 16,
        "qsfp_network_mtu": mtu,
        "qsfp_network_apply": False,
    }
    (group_vars / "test.yml").write_text(yaml.safe_dump(settings))
    return directory


@dataclass
class Pair:
    hosts: list[Host]
    good: PlaybookRun
    jumbo: PlaybookRun


@pytest.fixture(scope="module")
def pair(systemd_host: Callable[..., Host], tmp_path_factory: pytest.TempPathFactory) -> Pair:
    hosts = [systemd_host(arch="amd64"), systemd_host(arch="amd64")]
    for host in hosts:
        put_fixture(host, "nvidia-smi")
    base = tmp_path_factory.mktemp("pair")
    good = provision(pair_inventory(base / "mtu1500", hosts, 1500), "--tags", "qsfp_network")
    jumbo = provision(pair_inventory(base / "mtu9000", hosts, 9000), "--tags", "qsfp_network")
    print(f"\nqsfp pair: converge {good.seconds:.0f} s, jumbo run {jumbo.seconds:.0f} s")
    return Pair(hosts, good, jumbo)


def test_link_checks_pass_at_the_link_mtu(pair: Pair) -> None:
    assert pair.good.rc == 0, pair.good.output[-4000:]
    out = " ".join(pair.good.output.split())
    assert "WARNING: eth0 on" in out and "runs at 10000 Mb/s, not 200000" in out


def test_netplan_file_is_private_and_static(pair: Pair) -> None:
    for host in pair.hosts:
        netplan = host.testinfra.file(NETPLAN)
        assert netplan.mode == 0o600 and netplan.user == "root"
        content = yaml.safe_load(netplan.content_string)
        eth0 = content["network"]["ethernets"]["eth0"]
        assert eth0["addresses"] == [f"{bridge_address(host)}/16"]
        assert eth0["dhcp4"] is False and eth0["dhcp6"] is False and eth0["link-local"] == []
        assert netplan.content_string.startswith("#")  # ansible_managed header


def test_jumbo_frames_that_the_link_cannot_carry_fail_with_the_fix(pair: Pair) -> None:
    assert pair.jumbo.rc != 0
    out = " ".join(pair.jumbo.output.split())
    assert "with 9000-byte frames (ping -M do -s 8972)" in out
    assert "Check both ends have MTU 9000" in out
