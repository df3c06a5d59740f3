"""Every role's contract: defaults and argument_specs agree in names and values, names carry the
role, and the deploy roles' defaults are the renderer's (sparkops.render.settings).

defaults/main.yml holds the real defaults and meta/argument_specs.yml documents them; a variable
in one and not the other is either undocumented or unvalidated, and a default documented as 8000
but set to 8080 misleads (the prometheus-community parity check, with values). `sparkops render`
applies settings.py's defaults where Ansible applies the roles': they must be the same values.
The example inventories may only set variables that a role declares.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sparkops.render.role_vars import load_role_specs, role_variable_problems
from sparkops.render.settings import PREFIXES
from sparkops.render.stack import plan_stack
from sparkops.render.templates import render_host
from tests.plugins.inventories import make_inventory

REPO = Path(__file__).resolve().parents[2]
ROLE_DIR = REPO / "ansible" / "roles"
ROLES = sorted(p.name for p in ROLE_DIR.iterdir() if (p / "meta" / "argument_specs.yml").is_file())
SPECS = load_role_specs(ROLE_DIR)
# Public role settings Ansible reads and the renderer does not (sparkops_render's ANSIBLE_ONLY).
ANSIBLE_ONLY = {
    "vllm_serving_use_systemd",
    "vllm_serving_stack_record",
    "vllm_serving_min_shm_mib",
    "vllm_serving_model_download_timeout",
    "vllm_serving_base_lock",
    "vllm_serving_update_base",
    "vllm_serving_restart_running_jobs",
    "vllm_serving_model_copy",
    "vllm_serving_model_copy_address",
    "vllm_serving_model_copy_port",
}


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def defaults_of(role: str) -> dict:
    return load(ROLE_DIR / role / "defaults" / "main.yml")


def options_of(role: str) -> dict:
    return load(ROLE_DIR / role / "meta" / "argument_specs.yml")["argument_specs"]["main"][
        "options"
    ]


def test_every_role_has_a_contract() -> None:
    """A role without argument_specs would escape every test below."""
    roles = sorted(p.name for p in ROLE_DIR.iterdir() if p.is_dir())
    assert roles == ROLES
    assert len(ROLES) >= 9  # seven provisioning/deploy roles, sparkops_cli, sparkops_defaults


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_specs_list_the_same_variables(role: str) -> None:
    defaults, options = defaults_of(role), options_of(role)
    assert set(defaults) == set(options)
    assert all(name.startswith(role + "_") for name in defaults)
    for name, option in options.items():
        assert option.get("description"), f"{role}: {name} has no description"


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_document_the_default_values(role: str) -> None:
    """The documented default is the real one; a default computed at run time ({{ }}) is
    documented in words or left out. Each literal default is of its declared type."""
    options = options_of(role)
    for name, value in defaults_of(role).items():
        documented = options[name].get("default")
        if isinstance(value, str) and "{{" in value:
            assert documented is None or isinstance(documented, str), name
            continue
        assert documented == value, (
            f"{role}: {name} defaults to {value!r}, documented {documented!r}"
        )
        assert role_variable_problems({name: value}, SPECS) == [], name


@pytest.mark.parametrize("prefix", sorted(PREFIXES))
def test_the_renderers_settings_are_the_deploy_roles_defaults(prefix: str) -> None:
    """settings.py (what `sparkops render` applies) vs the role's defaults/main.yml: names and
    values. A default changed in one place only would render one way from the CLI, another from
    Ansible."""
    role = prefix.rstrip("_")
    model = PREFIXES[prefix]
    defaults = defaults_of(role)
    fields = {prefix + name: field for name, field in model.model_fields.items()}
    assert set(defaults) - ANSIBLE_ONLY == set(fields)
    for name, field in fields.items():
        value = field.get_default(call_default_factory=True)
        assert defaults[name] == value, f"{name}: settings.py {value!r}, role {defaults[name]!r}"


def test_the_shared_facts_fall_back_to_the_roles_own_defaults() -> None:
    """sparkops_defaults spells each fallback once; it must be what the owning role defaults to,
    and the unit must be the file sparkops.render writes."""
    facts = defaults_of("sparkops_defaults")
    serving, cli = defaults_of("vllm_serving"), defaults_of("sparkops_cli")
    pairs = {
        "sparkops_defaults_serving_dir": ("vllm_serving_stack_dir", serving),
        "sparkops_defaults_stack_record": ("vllm_serving_stack_record", serving),
        "sparkops_defaults_vllm_container": ("vllm_serving_project", serving),
        "sparkops_defaults_command": ("sparkops_cli_venv", cli),
    }
    for fact, (source, role_defaults) in pairs.items():
        assert source in facts[fact], fact
        assert f"default('{role_defaults[source]}', true)" in facts[fact], fact
    url = facts["sparkops_defaults_vllm_url"]
    assert f"default('{serving['vllm_serving_bind_address']}', true)" in url
    assert f"default({serving['vllm_serving_port']}, true)" in url


def test_the_serving_unit_is_the_file_the_renderer_writes(tmp_path: Path) -> None:
    from sparkops.render.inventory import read_inventory

    stacks = plan_stack(read_inventory(make_inventory(tmp_path / "inv", "single")))
    (stack,) = stacks.values()
    written = {file.path for file in render_host(stack)}
    assert defaults_of("sparkops_defaults")["sparkops_defaults_serving_unit"] in written


@pytest.mark.parametrize("role", ROLES)
def test_templates_start_with_the_ansible_managed_header(role: str) -> None:
    """Every rendered file says it is managed, except JSON, which has no comments (its readers
    refuse unknown keys, so no header key either)."""
    templates = sorted((ROLE_DIR / role / "templates").glob("*.j2"))
    for template in templates:
        if template.name.endswith(".json.j2"):
            continue
        lines = template.read_text().splitlines()
        assert "{{ ansible_managed | comment }}" in lines[:2], template.name


def test_inventories_set_only_declared_role_variables() -> None:
    declared = set()
    for role in ROLES:
        declared |= set(defaults_of(role))
    for path in sorted((REPO / "inventory").glob("*/group_vars/sparks/*.yml")):
        for name in load(path):
            assert name in declared, f"{path.relative_to(REPO)}: {name} is no role's variable"
    for path in sorted((REPO / "inventory").glob("*/group_vars/*/*.yml")):
        assert role_variable_problems(load(path), SPECS) == [], path.relative_to(REPO)
