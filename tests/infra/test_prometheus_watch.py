"""watch.yml (role prometheus_watch) on a real systemd Debian amd64 host.

One host goes through what a user does: a check-mode run on the fresh host (nothing may
change), a first converge that installs Debian's prometheus and node exporter through the
host's own apt, and a second converge that must change nothing. Then the host is read the way
an operator would: the services, where they listen, `promtool check config` on what the role
wrote, and Prometheus' own HTTP API (asked on the host, on loopback) for the kit's rules and
the targets the inventory implies. The inventory sets vLLM on the host's own private address
(the private link), two job ports and a node exporter port of its own, so every target's
address is one the role had to follow. No job or vLLM serves here: only node exporter and
Prometheus itself must be up.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.plugins.hosts import Host, journal
from tests.plugins.playbook import PlaybookRun, run_playbook
from tests.plugins.prometheus import RULES, rule_names
from tests.plugins.provision import write_inventory

# Three playbook runs (one installs packages from Debian's mirror) in the first test's setup.
pytestmark = [pytest.mark.infra, pytest.mark.timeout(1500)]

PROMETHEUS_PORT = 9090
NODE_EXPORTER_PORT = 9110  # not the default 9100: the role must follow the inventory
JOB_TARGETS = ["127.0.0.1:9464", "127.0.0.1:9465"]
VLLM_PORT = 8001
# A bound on a hang, not a timing: the inventory scrapes every 2 s, the machine may be busy.
DEADLINE_S = 180.0


@dataclass
class Watched:
    """The host after a check-mode run, a first and a second converge of watch.yml."""

    host: Host
    inventory: Path
    vllm_address: str
    check: PlaybookRun
    first: PlaybookRun
    second: PlaybookRun


def private_address(host: Host) -> str:
    """The host's own address on its (private) container network: the private link here."""
    shown = host.exec(["ip", "-4", "-o", "addr", "show", "scope", "global"], check=True).stdout
    address = shown.split()[3].split("/")[0]
    assert not address.startswith("127."), shown
    return address


def watch(inventory: Path, *args: str, **options: Any) -> PlaybookRun:
    """Run watch.yml the way its header says."""
    return run_playbook("watch.yml", inventory, *args, timeout=900, **options)


def api(host: Host, route: str) -> Any:
    """The `data` of one answer of Prometheus' HTTP API, asked on the host itself."""
    fetch = (
        "import sys, urllib.request; "
        "print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())"
    )
    url = f"http://127.0.0.1:{PROMETHEUS_PORT}/api/v1/{route}"
    answer = host.exec(["python3", "-c", fetch, url], check=True).stdout
    return json.loads(answer)["data"]


def poll(seen: Callable[[], Any], holds: Callable[[Any], bool], what: str) -> Any:
    """Call `seen()` until `holds` what it returns; fail at `DEADLINE_S` with the last seen."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        last = seen()
        if holds(last):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"Prometheus did not show {what}; last seen: {last!r}")
        time.sleep(1)


def targets(host: Host) -> dict[tuple[str, str], dict[str, Any]]:
    """Prometheus' active targets: (job, instance) -> the target's API entry."""
    active = api(host, "targets?state=active")["activeTargets"]
    return {(t["labels"]["job"], t["labels"]["instance"]): t for t in active}


def listening(host: Host, port: int) -> set[str]:
    """The local addresses (address:port) on which anything listens for TCP on ``port``
    (by port, not by process: the node exporter's sockets show no process in a container)."""
    table = host.exec(["ss", "-Hltn"], check=True).stdout
    local = {line.split()[3] for line in table.splitlines()}
    return {address for address in local if address.rsplit(":", 1)[1] == str(port)}


@pytest.fixture(scope="module")
def watched(systemd_host: Callable[..., Host], tmp_path_factory: pytest.TempPathFactory) -> Watched:
    host = systemd_host(arch="amd64")
    address = private_address(host)
    inventory = write_inventory(
        tmp_path_factory.mktemp("inventory"),
        host,
        {
            "vllm_serving_bind_address": address,
            "vllm_serving_port": VLLM_PORT,
            "prometheus_watch_job_targets": JOB_TARGETS,
            "prometheus_watch_node_exporter_port": NODE_EXPORTER_PORT,
            "prometheus_watch_scrape_interval": "2s",
        },
    )

    check = watch(inventory, "--check", "--diff")
    assert check.rc == 0, check.output[-4000:]
    # Check mode on the fresh host must leave it as it was.
    untouched = host.exec(
        "dpkg-query --show prometheus prometheus-node-exporter 2>&1;"
        " ls /etc/prometheus /etc/default/prometheus /var/lib/prometheus 2>&1"
    ).stdout
    assert untouched.count("no packages found") == 2, untouched
    assert untouched.count("No such file") == 3, untouched

    first = watch(inventory)
    assert first.rc == 0, first.output[-4000:]
    second = watch(inventory)
    print(
        f"\nwatch.yml: check {check.seconds:.0f} s, first converge {first.seconds:.0f} s,"
        f" second converge {second.seconds:.0f} s"
    )
    return Watched(host, inventory, address, check, first, second)


def test_check_mode_reports_the_install_it_would_do(watched: Watched) -> None:
    assert watched.check.failed == 0
    assert watched.check.changed >= 1
    assert "Install Debian's prometheus and node exporter" in watched.check.output


def test_first_converge_installs_and_second_changes_nothing(watched: Watched) -> None:
    assert watched.first.failed == 0 and watched.first.changed >= 5, watched.first.output
    assert watched.second.rc == 0, watched.second.output[-4000:]
    assert (watched.second.changed, watched.second.failed) == (0, 0), watched.second.output


def test_services_are_active_and_enabled(watched: Watched) -> None:
    ti = watched.host.testinfra
    for name in ("prometheus", "prometheus-node-exporter"):
        service = ti.service(name)
        assert service.is_running and service.is_enabled, name


def test_prometheus_and_node_exporter_listen_on_loopback_only(watched: Watched) -> None:
    assert listening(watched.host, PROMETHEUS_PORT) == {f"127.0.0.1:{PROMETHEUS_PORT}"}
    assert listening(watched.host, NODE_EXPORTER_PORT) == {f"127.0.0.1:{NODE_EXPORTER_PORT}"}
    # Debian's default (every address, port 9100) did not survive the restart.
    assert listening(watched.host, 9100) == set()


def test_no_start_ever_listened_beyond_loopback(watched: Watched) -> None:
    """Debian's postinst starts each service as it installs it: the role writes the units'
    arguments first, so even that start listened on loopback, never on every address."""
    for unit, started, port in (
        ("prometheus", "Start listening for connections", PROMETHEUS_PORT),
        ("prometheus-node-exporter", "Listening on", NODE_EXPORTER_PORT),
    ):
        log = journal(watched.host, unit, until=started)
        starts = [line for line in log.splitlines() if started in line]
        assert len(starts) >= 2, log  # the package's start, then the role's restart
        assert all(f"address=127.0.0.1:{port}" in line for line in starts), log


def test_promtool_accepts_the_rendered_config_and_its_rules(watched: Watched) -> None:
    checked = watched.host.exec(["promtool", "check", "config", "/etc/prometheus/prometheus.yml"])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # The full check (not --syntax-only) read the rule files the config names.
    assert "SUCCESS: 1 rule files found" in checked.stdout, checked.stdout


def test_prometheus_loaded_every_rule_the_kit_ships(watched: Watched) -> None:
    expected = rule_names(RULES)
    assert len(expected) >= 10

    def loaded() -> set[str]:
        groups = api(watched.host, "rules")["groups"]
        return {rule["name"] for group in groups for rule in group["rules"]}

    assert poll(loaded, lambda names: names == expected, f"the rules {sorted(expected)}")


def test_scrape_targets_follow_the_inventory_and_node_exporter_is_up(watched: Watched) -> None:
    expected = {
        *(("sparkops_job", target) for target in JOB_TARGETS),
        ("vllm", f"{watched.vllm_address}:{VLLM_PORT}"),
        ("node", f"127.0.0.1:{NODE_EXPORTER_PORT}"),
        ("prometheus", f"127.0.0.1:{PROMETHEUS_PORT}"),
    }
    assert set(targets(watched.host)) == expected
    seen = poll(
        lambda: targets(watched.host),
        lambda found: all(found[key]["health"] == "up" for key in (
            ("node", f"127.0.0.1:{NODE_EXPORTER_PORT}"),
            ("prometheus", f"127.0.0.1:{PROMETHEUS_PORT}"),
        )),
        "node exporter and Prometheus up",
    )  # fmt: skip
    for job, instance in expected:
        assert seen[job, instance]["scrapeUrl"] == f"http://{instance}/metrics"
    # Nothing serves a job or vLLM here: Prometheus says so (SparkopsJobDown's `up == 0`).
    assert seen["sparkops_job", JOB_TARGETS[0]]["health"] != "up"


def test_a_public_listen_address_is_refused_before_any_change(watched: Watched) -> None:
    refused = watch(watched.inventory, extra_vars={"prometheus_watch_listen_address": "0.0.0.0"})
    assert refused.rc != 0
    assert "prometheus_watch_listen_address 0.0.0.0 is neither loopback nor a private" in (
        refused.text
    )
    assert "set it to 127.0.0.1 and reach Prometheus through an SSH tunnel" in refused.text
    assert refused.changed == 0
    assert listening(watched.host, PROMETHEUS_PORT) == {f"127.0.0.1:{PROMETHEUS_PORT}"}
