"""Role-prefixed inventory variables against the roles' argument specs (pure logic).

The inventory check refuses a misspelt role variable (Ansible would ignore it and use the
default) and a value that cannot be the declared type; it reads the names from every role's
meta/argument_specs.yml, so these run against the real roles of the checkout.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkops.render.inventory import read_inventory
from sparkops.render.role_vars import (
    UNRESOLVED,
    load_role_specs,
    nearest,
    role_variable_problems,
)

REPO = Path(__file__).resolve().parents[2]
SPECS = load_role_specs(REPO / "ansible" / "roles")


def test_every_role_with_argument_specs_is_read() -> None:
    assert set(SPECS.options) >= {
        "host_tuning",
        "qsfp_network",
        "spark_preflight",
        "container_runtime",
        "vllm_serving",
        "litellm_router",
        "ray_cluster",
    }
    assert "host_tuning_job_users" in SPECS.options["host_tuning"]


def test_the_misspelt_job_users_variable_names_the_declared_one() -> None:
    problems = role_variable_problems({"host_tuning_job_user": ["researcher"]}, SPECS)
    assert len(problems) == 1
    assert problems[0].startswith(
        "host_tuning_job_user is not a variable of the role host_tuning "
        "(did you mean host_tuning_job_users?)"
    )


def test_a_name_nothing_resembles_says_so() -> None:
    (problem,) = role_variable_problems({"qsfp_network_zzz": 1}, SPECS)
    assert "no declared variable is close" in problem


def test_names_without_a_role_prefix_and_runtime_names_pass() -> None:
    host_vars = {
        "ansible_host": "10.0.0.1",
        "sparkops_topology": "single",
        "sparkops_preflight_concurrency": 10,
        "_qsfp_network_iface": "eth0",  # set_fact by the role, e.g. from a fact cache
        "__qsfp_network_ping": {"rc": 0},  # registered by the role
        "host_tuning_job_users": ["researcher"],
    }
    assert role_variable_problems(host_vars, SPECS) == []


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("qsfp_network_mtu", "9000"),  # -e key=value gives strings
        ("qsfp_network_mtu", 9000),
        ("qsfp_network_apply", "false"),
        ("qsfp_network_apply", "yes"),
        ("vllm_serving_gpu_memory_gib", "24.5"),
        ("vllm_serving_concurrency", None),
        ("qsfp_network_speed_mismatch", "fail"),
        ("qsfp_network_mtu", UNRESOLVED),  # refers to a fact: judged at run time
    ],
)
def test_values_that_convert_to_the_declared_type_pass(name: str, value: object) -> None:
    assert role_variable_problems({name: value}, SPECS) == []


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("qsfp_network_mtu", "9k", "must be a whole number"),
        ("qsfp_network_mtu", True, "must be a whole number"),
        ("qsfp_network_apply", "maybe", "must be true or false"),
        ("vllm_serving_gpu_memory_gib", "lots", "must be a number"),
        ("host_tuning_job_users", "researcher", "must be a list"),
        ("qsfp_network_speed_mismatch", "ignore", "must be one of fail, warn"),
        ("qsfp_network_interface", ["eth0"], "must be a single value"),
    ],
)
def test_values_of_the_wrong_type_are_refused_naming_the_variable(
    name: str, value: object, why: str
) -> None:
    (problem,) = role_variable_problems({name: value}, SPECS)
    assert problem.startswith(f"{name} is {value!r} but {why}"), problem


def test_nearest_finds_nothing_for_an_unrelated_name() -> None:
    assert nearest("qsfp_network_zzz", set(SPECS.options["qsfp_network"]), "qsfp_network_") is None


@pytest.mark.parametrize("example", ["single", "wsl2", "pair-dp", "pair-pp", "quad-dp", "local"])
def test_example_inventories_have_no_problems(example: str) -> None:
    inventory = read_inventory(REPO / "inventory" / example)
    for host in inventory.hosts:
        assert role_variable_problems(inventory.hostvars[host], SPECS) == [], host


def test_a_role_internal_under_the_public_prefix_is_refused() -> None:
    """Internals start with an underscore; the old spelling of one is a name no role declares
    (the allow-list of role internals is gone, so an inventory cannot set one by accident)."""
    (problem,) = role_variable_problems({"qsfp_network_iface": "eth0"}, SPECS)
    assert problem.startswith("qsfp_network_iface is not a variable of the role qsfp_network")
