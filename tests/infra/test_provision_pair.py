"""provision.yml on a pair of hosts the kit has never seen: two plain Debian amd64 hosts linked
by Docker's bridge instead of a QSFP cable.

What a Spark owner hits on day one, run for real on two systemd test hosts forming a pair (their
eth0 on the Docker bridge stands in for the QSFP link: each host's bridge address is its
qsfp_network_address, the bridge's MTU of 1500 the link's, and no QSFP cable or jumbo frames
exist here):
- a misspelt role variable given with -e is refused by the inventory check, naming the right one;
- a pinned QSFP interface that does not exist stops preflight before any change, naming the
  interfaces that do;
- check mode works on a host without python3-apt (removed at start: the test image ships it);
- numbers and booleans passed as `-e key=value` (strings to Ansible) converge;
- the converged hosts re-converge with no apt mirror reachable, changing nothing;
- preflight.yml, when its Docker probe cannot run (no python3-requests), says so and its fix;
- qsfp_network's own checks, for real: the netplan file (0600, static, no DHCP), ethtool's link
  speed (a veth reports 10000 Mb/s, so the default expectation of 200000 warns) and the
  do-not-fragment ping at MTU - 28 to the peer, which passes at 1500 in the converge and fails
  with the fix when the run asks for MTU 9000.
Only host_tuning and qsfp_network converge (tags); container_runtime has its own tests.
`netplan apply` is off (qsfp_network_apply: false): containers have no networkd to apply it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.plugins.hosts import Host
from tests.plugins.playbook import PlaybookRun, run_playbook
from tests.plugins.provision import EARLYOOM_DRY_RUN, JOB_USER, prepare

pytestmark = [pytest.mark.long, pytest.mark.infra, pytest.mark.timeout(1800)]

NETPLAN = "/etc/netplan/40-sparkops-qsfp.yaml"
TAGS = "host_tuning,qsfp_network"
# Every value a string, as `-e key=value` gives them: numbers, a boolean.
EXTRA = {
    "qsfp_network_mtu": "1500",  # the Docker bridge's MTU
    "qsfp_network_expected_speed_mbps": "10000",
    "qsfp_network_apply": "false",  # never reconfigure the test host's eth0
    "spark_preflight_min_disk_gb": "1",
    "host_tuning_gpu_check_samples": "2",
}


def extra_args(*, drop: tuple[str, ...] = (), **override: str) -> list[str]:
    """`-e key=value` for EXTRA with ``override``, leaving out the settings named in ``drop``."""
    settings = {k: v for k, v in {**EXTRA, **override}.items() if k not in drop}
    return [arg for k, v in settings.items() for arg in ("-e", f"{k}={v}")]


def ipv4(host: Host) -> tuple[str, int]:
    """The host's eth0 address and prefix on the Docker bridge."""
    out = host.exec(["ip", "-4", "-o", "addr", "show", "dev", "eth0"], check=True).stdout
    address, prefix = re.search(r"inet (\S+)/(\d+)", out).groups()  # type: ignore[union-attr]
    return address, int(prefix)


def write_inventory(directory: Path, hosts: list[Host]) -> Path:
    """A pair-dp inventory shaped like inventory/pair-dp/, its QSFP link on eth0."""
    members = {}
    for host in hosts:
        address, prefix = ipv4(host)
        members[host.name] = {
            **host.ansible_vars,
            "qsfp_network_address": address,
            "qsfp_network_prefix": prefix,
        }
    top = {
        "all": {
            "children": {"sparks": {"children": {"spark_pair": {"hosts": members}}}},
        }
    }
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "hosts.yml").write_text(yaml.safe_dump(top))
    group_vars = directory / "group_vars" / "all"
    group_vars.mkdir(parents=True)
    settings = {
        "sparkops_topology": "pair-dp",
        "spark_preflight_arch_mismatch": "warn",
        "host_tuning_job_users": [JOB_USER],
        "host_tuning_earlyoom_enabled": True,
        "host_tuning_earlyoom_args": EARLYOOM_DRY_RUN,  # tests/plugins/provision.py says why
        "qsfp_network_interface": "eth0",
    }
    (group_vars / "test.yml").write_text(yaml.safe_dump(settings))
    return directory


def untouched(host: Host) -> str:
    """What the roles would have written; 'No such file' for each one still absent."""
    return host.exec(
        f"ls /usr/local/bin/sparkops-run /etc/sudoers.d/sparkops-drop-caches {NETPLAN} 2>&1"
    ).stdout


@dataclass
class Pair:
    hosts: list[Host]
    inventory: Path


@pytest.fixture(scope="module")
def pair(systemd_host: Callable[..., Host], tmp_path_factory: pytest.TempPathFactory) -> Pair:
    """Two fresh amd64 hosts without python3-apt, the GPU fixture and a job user."""
    hosts = [systemd_host(arch="amd64"), systemd_host(arch="amd64")]
    for host in hosts:
        host.exec(["dpkg", "--purge", "python3-apt"], check=True)
        prepare(host)
    return Pair(hosts, write_inventory(tmp_path_factory.mktemp("inventory"), hosts))


@pytest.fixture(scope="module")
def misspelt(pair: Pair) -> PlaybookRun:
    """A misspelt role variable in -e (preflight tag only: nothing may change either way)."""
    return run_playbook(
        "provision.yml", pair.inventory, "--tags", "preflight", "-e", "host_tuning_job_user=x"
    )


@pytest.fixture(scope="module")
def missing_interface(pair: Pair, misspelt: PlaybookRun) -> PlaybookRun:
    """A pinned QSFP interface that does not exist, on the fresh hosts."""
    override = extra_args(qsfp_network_interface="enp1s0f1np1")
    return run_playbook("provision.yml", pair.inventory, "--tags", TAGS, *override)


@pytest.fixture(scope="module")
def check(pair: Pair, missing_interface: PlaybookRun) -> PlaybookRun:
    """Check mode on the fresh hosts, which have no python3-apt."""
    args = ("--check", "--diff", "--tags", TAGS, *extra_args())
    return run_playbook("provision.yml", pair.inventory, *args)


@pytest.fixture(scope="module")
def converge(pair: Pair, check: PlaybookRun) -> PlaybookRun:
    """The first converge, every number and boolean a string given with -e."""
    return run_playbook("provision.yml", pair.inventory, "--tags", TAGS, *extra_args())


@pytest.fixture(scope="module")
def offline(pair: Pair, check: PlaybookRun, converge: PlaybookRun) -> PlaybookRun:
    """The same converge again once no apt mirror answers."""
    for host in pair.hosts:
        host.exec(
            "echo 'deb http://deb.invalid/debian bookworm main' > /etc/apt/sources.list"
            " && rm -f /etc/apt/sources.list.d/*",
            check=True,
        )
        assert host.exec(["apt-get", "update", "--error-on=any"]).returncode != 0
    run = run_playbook("provision.yml", pair.inventory, "--tags", TAGS, *extra_args())
    print(
        f"\nfresh pair: check {check.seconds:.0f} s, converge {converge.seconds:.0f} s,"
        f" offline re-converge {run.seconds:.0f} s"
    )
    return run


@pytest.fixture(scope="module")
def jumbo(pair: Pair, offline: PlaybookRun) -> PlaybookRun:
    """qsfp_network alone, asking for MTU 9000 over the bridge's 1500, the link speed expected
    at the role's default (200000 Mb/s): the speed check warns, then the ping must fail."""
    args = extra_args(drop=("qsfp_network_expected_speed_mbps",), qsfp_network_mtu="9000")
    run = run_playbook("provision.yml", pair.inventory, "--tags", "qsfp_network", *args)
    print(f"\nfresh pair: jumbo run {run.seconds:.0f} s")
    return run


def test_a_misspelt_variable_in_extra_vars_is_refused_naming_the_declared_one(
    misspelt: PlaybookRun,
) -> None:
    assert misspelt.rc != 0
    assert "host_tuning_job_user is not a variable of the role host_tuning" in misspelt.text
    assert "did you mean host_tuning_job_users?" in misspelt.text
    assert "Traceback" not in misspelt.output


def test_a_missing_pinned_interface_stops_preflight_before_any_change(
    pair: Pair, missing_interface: PlaybookRun
) -> None:
    first = pair.hosts[0]
    assert missing_interface.rc != 0
    assert (
        f"{first.name} has no interface 'enp1s0f1np1' (qsfp_network_interface); it has eth0, lo."
        in missing_interface.text
    ), missing_interface.output[-3000:]
    for host in pair.hosts:
        assert untouched(host).count("No such file") == 3


def test_check_mode_works_without_python3_apt_and_changes_nothing(
    pair: Pair, check: PlaybookRun
) -> None:
    assert check.rc == 0, check.output[-4000:]
    assert "...ignoring" not in check.output
    assert "would run apt-get update and install earlyoom" in check.output
    assert "would run apt-get update and install ethtool, iputils-ping" in check.output
    assert check.changed_on(pair.hosts[0].name) >= 5
    for host in pair.hosts:
        assert untouched(host).count("No such file") == 3
        assert host.exec(["dpkg", "-s", "python3-apt"]).returncode != 0


def test_numbers_and_booleans_given_with_extra_vars_converge(
    pair: Pair, converge: PlaybookRun
) -> None:
    assert converge.rc == 0, converge.output[-4000:]
    assert "Traceback" not in converge.output
    first = pair.hosts[0]
    netplan = first.exec(["cat", NETPLAN], check=True).stdout
    assert "    eth0:\n" in netplan and "      mtu: 1500\n" in netplan
    assert first.exec(["systemctl", "is-active", "earlyoom"]).stdout.strip() == "active"
    # The link checks passed at the link's MTU: the do-not-fragment ping ran and answered.
    assert "TASK [qsfp_network : Ping the peer with full-size frames" in converge.output
    assert "runs at 10000 Mb/s" not in converge.output  # the speed given with -e matched


def test_netplan_file_is_private_and_static(pair: Pair, converge: PlaybookRun) -> None:
    for host in pair.hosts:
        netplan = host.testinfra.file(NETPLAN)
        assert netplan.mode == 0o600 and netplan.user == "root"
        content = yaml.safe_load(netplan.content_string)
        eth0 = content["network"]["ethernets"]["eth0"]
        address, prefix = ipv4(host)
        assert eth0["addresses"] == [f"{address}/{prefix}"]
        assert eth0["dhcp4"] is False and eth0["dhcp6"] is False and eth0["link-local"] == []
        assert netplan.content_string.startswith("#")  # ansible_managed header


def test_a_converged_pair_reconverges_with_no_apt_mirror(pair: Pair, offline: PlaybookRun) -> None:
    assert offline.rc == 0, offline.output[-4000:]
    names = [host.name for host in pair.hosts]
    assert {name: offline.changed_on(name) for name in names} == dict.fromkeys(names, 0), (
        offline.output[-4000:]
    )


def test_preflight_says_when_its_docker_probe_cannot_run(pair: Pair, tmp_path: Path) -> None:
    host = pair.hosts[1]
    assert host.exec(["dpkg", "-s", "python3-requests"]).returncode != 0
    summaries = tmp_path / "summaries"
    summaries.mkdir()
    settings = {
        "sparkops_preflight_summary_dir": str(summaries),
        "sparkops_preflight_drop_caches": False,
        "sparkops_preflight_vllm_url": "http://127.0.0.1:9",  # nothing serves here
        "sparkops_preflight_load_sample_after_s": 0,
    }
    run = run_playbook(
        "preflight.yml", pair.inventory, "--limit", host.name, "-e", json.dumps(settings)
    )
    assert run.rc != 0  # vLLM is not up, so preflight fails, but for the right reasons
    assert "Traceback" not in run.output
    checks = {
        c["name"]: c for c in json.loads((summaries / f"{host.name}.json").read_text())["checks"]
    }
    container = checks["vllm_container"]
    assert container["detail"].startswith("the probe could not run: "), container
    assert "requests" in container["detail"]
    assert container["fix"].startswith("preflight could not ask Docker: install python3-requests")
    assert "deploy or restart" not in container["fix"]
    assert checks["xxhash_importable"]["fix"] == container["fix"]


def test_a_slower_link_warns_and_jumbo_frames_it_cannot_carry_fail_with_the_fix(
    jumbo: PlaybookRun,
) -> None:
    assert jumbo.rc != 0
    out = jumbo.text
    # The speed check only warned: the run went on to the ping, which failed.
    assert "WARNING: eth0 on" in out and "runs at 10000 Mb/s, not 200000" in out
    assert "with 9000-byte frames (ping -M do -s 8972)" in out
    assert "Check both ends have MTU 9000" in out
