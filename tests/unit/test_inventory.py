"""The inventory check that runs before provision.yml touches any host.

ansible/playbooks/validate_inventory.yml reads inventory variables only (no facts, no
connection), so these run it for real with ansible-playbook on the controller: every example
inventory must pass, and each broken one must fail with a message naming the host and the fix.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.plugins.playbook import finish, start_playbook

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = "validate_inventory.yml"
EXAMPLES = ["single", "wsl2", "pair-dp", "pair-pp", "quad-dp", "local"]


def pair(hosts: dict, topology: str = "pair-dp") -> dict:
    """A two-Spark inventory shaped like inventory/pair-dp/hosts.yml."""
    return {
        "all": {
            "vars": {"sparkops_topology": topology},
            "children": {"sparks": {"children": {"spark_pair": {"hosts": hosts}}}},
        }
    }


BAD = {
    "three hosts in a pair": (
        pair(
            {
                "a": {"qsfp_network_address": "10.0.0.1"},
                "b": {"qsfp_network_address": "10.0.0.2"},
                "c": {"qsfp_network_address": "10.0.0.3"},
            }
        ),
        ["needs exactly two hosts", "found 3 (a, b, c)", "Put both Sparks"],
    ),
    "wsl2 laptop in a pair": (
        pair(
            {
                "spark": {"qsfp_network_address": "10.0.0.1"},
                "laptop": {"qsfp_network_address": "10.0.0.2", "spark_preflight_host_kind": "wsl2"},
            },
            "pair-pp",
        ),
        ["Host laptop is a WSL2 laptop", "cannot be part of a", "inventory/wsl2/"],
    ),
    "pair host without a QSFP address": (
        pair({"a": {"qsfp_network_address": "10.0.0.1"}, "b": {}}),
        ["Host b: qsfp_network_address is '(unset)'", "Set it under the host in hosts.yml"],
    ),
    "QSFP addresses in different subnets": (
        pair(
            {"a": {"qsfp_network_address": "10.0.0.1"}, "b": {"qsfp_network_address": "10.0.1.2"}}
        ),
        ["Hosts a and b have QSFP addresses 10.0.0.1 and 10.0.1.2", "one subnet"],
    ),
    "unknown topology": (
        {
            "all": {
                "vars": {"sparkops_topology": "triple"},
                "children": {"sparks": {"hosts": {"spark-1": {}}}},
            }
        },
        ["Host spark-1: sparkops_topology is 'triple'", "group_vars/all/topology.yml"],
    ),
    "two hosts on a single topology": (
        {
            "all": {
                "vars": {"sparkops_topology": "single"},
                "children": {"sparks": {"hosts": {"s1": {}, "s2": {}}}},
            }
        },
        ["runs on one host", "(s1, s2)", "pair-dp / pair-pp"],
    ),
    "multi-dp with one host": (
        {
            "all": {
                "vars": {"sparkops_topology": "multi-dp"},
                "children": {"sparks": {"hosts": {"s1": {}}}},
            }
        },
        ["Topology 'multi-dp'", "needs at least two, found 1 (s1)", "List two or more Sparks"],
    ),
    "misspelt role variable": (
        {
            "all": {
                "vars": {"sparkops_topology": "single"},
                "children": {"sparks": {"hosts": {"s1": {"host_tuning_job_user": ["researcher"]}}}},
            }
        },
        [
            "Host s1: host_tuning_job_user is not a variable of the role host_tuning",
            "did you mean host_tuning_job_users?",
        ],
    ),
    "role variable of the wrong type": (
        {
            "all": {
                "vars": {"sparkops_topology": "single", "qsfp_network_mtu": "9k"},
                "children": {"sparks": {"hosts": {"s1": {}}}},
            }
        },
        ["Host s1: qsfp_network_mtu is '9k' but must be a whole number"],
    ),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str]]:
    """Every example and broken inventory checked at once (ansible start-up dominates), each
    the way provision.yml runs the check: first and alone."""
    base = tmp_path_factory.mktemp("inventories")
    runs = {name: start_playbook(PLAYBOOK, REPO / "inventory" / name) for name in EXAMPLES}
    for case, (inventory, _) in BAD.items():
        path = base / (case.replace(" ", "-") + ".yml")
        path.write_text(yaml.safe_dump(inventory))
        runs[case] = start_playbook(PLAYBOOK, path)
    finished = {name: finish(run, timeout=900) for name, run in runs.items()}
    return {name: (run.rc, run.output) for name, run in finished.items()}


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_inventories_pass(results: dict[str, tuple[int, str]], name: str) -> None:
    rc, output = results[name]
    assert rc == 0, output
    assert "failed=0" in output


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_inventories_fail_naming_host_and_fix(
    results: dict[str, tuple[int, str]], case: str
) -> None:
    rc, output = results[case]
    assert rc != 0
    message = " ".join(output.split())
    for word in BAD[case][1]:
        assert word in message, message
