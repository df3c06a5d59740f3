"""The inventory check warns about a variable whose role prefix is misspelt (issue 24, item 24).

`host_tunning_job_users` belongs to no role, so the inventory check's refusal (which judges
names under a role's own prefix) lets it through and Ansible ignores it. The filter in
ansible/plugins/filter/sparkops_names.py, which validate_inventory.yml runs for every entry
playbook, names the variable meant.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

PLUGIN = Path(__file__).resolve().parents[2] / "ansible/plugins/filter/sparkops_names.py"
_spec = importlib.util.spec_from_file_location("sparkops_names", PLUGIN)
assert _spec and _spec.loader
names = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(names)


def test_a_misspelt_prefix_names_the_variable_meant() -> None:
    warnings = names.sparkops_misspelt_prefixes(
        ["host_tunning_job_users", "hosttuning_job_users", "qsfp_netwrk_mtu"]
    )
    assert warnings == [
        f"{wrong} looks like a variable of the role {role} with its prefix misspelt (did you"
        f" mean {meant}?); Ansible ignores it, so the role keeps its default. Fix or remove it"
        f" (the declared names are in ansible/roles/{role}/meta/argument_specs.yml)."
        for wrong, role, meant in [
            ("host_tunning_job_users", "host_tuning", "host_tuning_job_users"),
            ("hosttuning_job_users", "host_tuning", "host_tuning_job_users"),
            ("qsfp_netwrk_mtu", "qsfp_network", "qsfp_network_mtu"),
        ]
    ]


def test_role_variables_facts_and_ansible_names_pass() -> None:
    ordinary = [
        "host_tuning_job_users",
        "host_tuning_not_declared",  # the inventory check's business, not this one's
        "_host_tuning_granted",
        "sparkops_topology",
        "ansible_host",
        "ansible_python_interpreter",
        "inventory_hostname",
        "group_names",
        "playbook_dir",
    ]
    assert names.sparkops_misspelt_prefixes(ordinary) == []


def test_the_serving_role_s_prefix_with_a_letter_dropped_or_missing() -> None:
    warnings = names.sparkops_misspelt_prefixes(["vlm_serving_port", "vllm_servng_port"])
    assert [w.split(" (did you mean ")[1].split("?")[0] for w in warnings] == [
        "vllm_serving_port",
        "vllm_serving_port",
    ]
    assert [w.split(" ")[0] for w in warnings] == ["vllm_servng_port", "vlm_serving_port"]


def test_a_misspelt_prefix_before_an_undeclared_name_says_so() -> None:
    assert names.sparkops_misspelt_prefixes(["host_tunning_nothing"]) == [
        "host_tunning_nothing looks like a variable of the role host_tuning with its prefix"
        " misspelt (no such variable either); Ansible ignores it, so the role keeps its default."
        " Fix or remove it (the declared names are in"
        " ansible/roles/host_tuning/meta/argument_specs.yml)."
    ]


def test_the_roles_come_from_the_folder_given(tmp_path: Path) -> None:
    meta = tmp_path / "kite_flyer" / "meta"
    meta.mkdir(parents=True)
    (meta / "argument_specs.yml").write_text(
        "argument_specs:\n  main:\n    options:\n      kite_flyer_height: {type: int}\n"
    )
    found = names.sparkops_misspelt_prefixes(
        ["kite_flyr_height", "host_tunning_job_users"], str(tmp_path)
    )
    assert len(found) == 1 and found[0].startswith(
        "kite_flyr_height looks like a variable of the role kite_flyer with its prefix misspelt"
        " (did you mean kite_flyer_height?)"
    )
