"""Role-prefixed inventory variables against the roles' argument specs (pure logic).

The inventory check refuses a misspelt role variable (Ansible would ignore it and use the
default) and a value that cannot be the declared type; it reads the names from every role's
meta/argument_specs.yml, so these run against the real roles of the checkout.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from sparkops.render.inventory import read_inventory
from sparkops.render.role_vars import (
    UNRESOLVED,
    load_role_specs,
    nearest,
    role_variable_problems,
)
from tests.plugins.inventories import make_inventory

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


def test_no_role_sets_a_public_name_at_run_time() -> None:
    """prometheus-community's convention, checked on every role: set_fact and role vars use
    _role_x, register uses __role_x; the public role_x names are the argument_specs' only."""

    def set_names(tasks: object) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        if isinstance(tasks, list):
            for task in tasks:
                found += set_names(task)
        elif isinstance(tasks, dict):
            if isinstance(tasks.get("register"), str):
                found.append(("register", tasks["register"]))
            for module in ("set_fact", "ansible.builtin.set_fact"):
                if isinstance(tasks.get(module), dict):
                    found += [("set_fact", k) for k in tasks[module] if k != "cacheable"]
            if isinstance(tasks.get("vars"), dict):
                found += [("vars", k) for k in tasks["vars"]]
            for key in ("block", "rescue", "always"):
                found += set_names(tasks.get(key))
        return found

    wrong = []
    for role_dir in sorted((REPO / "ansible" / "roles").iterdir()):
        role = role_dir.name
        files = sorted(role_dir.glob("tasks/*.yml")) + sorted(role_dir.glob("handlers/*.yml"))
        names = [kind_name for f in files for kind_name in set_names(yaml.safe_load(f.read_text()))]
        role_vars = role_dir / "vars" / "main.yml"
        if role_vars.is_file():
            names += [("vars/main.yml", k) for k in yaml.safe_load(role_vars.read_text()) or {}]
        for kind, name in names:
            expected = f"__{role}_" if kind == "register" else f"_{role}_"
            # A task's own vars may be plain words (they live for one task), never public names.
            plain = kind == "vars" and not name.startswith(role + "_")
            if not name.startswith(expected) and not plain:
                wrong.append(f"{role}: {kind} {name} (expected {expected}...)")
    assert wrong == []


def test_the_pinned_base_reaches_the_render_through_the_role_s_internal_fact(
    tmp_path: Path,
) -> None:
    """base_image.yml pins the GB10 base as _vllm_serving_base_pinned (not by setting the public
    vllm_serving_base_digest): the render filter builds FROM that digest and records it."""
    path = REPO / "ansible" / "plugins" / "filter" / "sparkops_render.py"
    spec = importlib.util.spec_from_file_location("sparkops_render_filter", path)
    assert spec and spec.loader
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    inventory = read_inventory(
        make_inventory(
            tmp_path / "inv", "single", vllm_serving_profile="gb10-gemma4-12b-fp8",
            vllm_serving_image="",
        )
    )  # fmt: skip
    groups = {"all": inventory.hosts, "sparks": inventory.hosts}
    hostvars = {host: dict(values) for host, values in inventory.hostvars.items()}

    def built(hostvars: dict) -> tuple[dict, dict]:
        out = render.sparkops_render(hostvars, groups, "spark-1")
        record = next(f for f in out["files"] if f["path"] == "stack-record.json")
        return out["images"][0]["build"], yaml.safe_load(record["content"])

    unpinned, record = built(hostvars)
    assert unpinned["args"]["VLLM_DIGEST"] == ""
    assert "vllm_serving_base_digest" in unpinned["problem"]
    assert record["base_digest"] is None

    digest = "sha256:" + "ab" * 32
    hostvars["spark-1"]["_vllm_serving_base_pinned"] = {"image": "lab/vllm:1", "digest": digest}
    pinned, record = built(hostvars)
    assert pinned["problem"] == ""
    assert pinned["args"]["VLLM_BASE"] == "lab/vllm:1" and pinned["args"]["VLLM_DIGEST"] == digest
    assert (record["base_image"], record["base_digest"]) == ("lab/vllm:1", digest)
