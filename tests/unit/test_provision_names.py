"""host_tuning warns about a variable whose role prefix is misspelt (issue 24, item 24).

`host_tunning_job_users` belongs to no role, so the inventory check (which judges names under
a role's own prefix) lets it through and Ansible ignores it. The filter in
ansible/roles/host_tuning/filter_plugins/host_tuning_names.py names the variable meant.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

PLUGIN = (
    Path(__file__).resolve().parents[2]
    / "ansible/roles/host_tuning/filter_plugins/host_tuning_names.py"
)
_spec = importlib.util.spec_from_file_location("host_tuning_names", PLUGIN)
assert _spec and _spec.loader
names = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(names)


def test_a_misspelt_prefix_names_the_variable_meant() -> None:
    warnings = names.host_tuning_misspelt_prefixes(
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
    assert names.host_tuning_misspelt_prefixes(ordinary) == []
