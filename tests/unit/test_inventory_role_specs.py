"""The provisioning roles' contracts: defaults and argument_specs agree, names carry the role.

defaults/main.yml holds the real defaults and meta/argument_specs.yml documents them; a variable
in one and not the other is either undocumented or unvalidated (the prometheus-community parity
check). The example inventories may only set provisioning variables that a role declares.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = ["spark_preflight", "container_runtime", "host_tuning", "qsfp_network"]
ROLE_DIR = REPO / "ansible" / "roles"


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_specs_list_the_same_variables(role: str) -> None:
    defaults = set(load(ROLE_DIR / role / "defaults" / "main.yml"))
    spec = load(ROLE_DIR / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]
    assert defaults == set(spec["options"])
    assert all(name.startswith(role + "_") for name in defaults)
    for name, option in spec["options"].items():
        assert option.get("description"), f"{role}: {name} has no description"


@pytest.mark.parametrize("role", ROLES)
def test_templates_start_with_the_ansible_managed_header(role: str) -> None:
    templates = sorted((ROLE_DIR / role / "templates").glob("*.j2"))
    for template in templates:
        lines = template.read_text().splitlines()
        assert "{{ ansible_managed | comment }}" in lines[:2], template.name


def test_inventories_set_only_declared_provisioning_variables() -> None:
    declared = set()
    for role in ROLES:
        declared |= set(load(ROLE_DIR / role / "defaults" / "main.yml"))
    for path in sorted((REPO / "inventory").glob("*/group_vars/sparks/*.yml")):
        for name in load(path):
            assert name in declared, f"{path.relative_to(REPO)}: {name} is no role's variable"
