"""Ansible filters of the inventory check (ansible/playbooks/validate_inventory.yml).

    {{ hostvars | sparkops_inventory_check(groups, roles_dir, playbooks_dir,
                                           ansible_inventory_sources) }}

returns {"errors": [...], "warnings": [...]}: every rule of sparkops.render.inventory_checks
(the `sparks` group, role variables declared and typed, the topology and its hosts, the
QSFP pair's addresses and subnet, names one slip from a role's or a playbook's prefix), the
same function and sentences `sparkops render` uses. It reads `groups`, which a --limit does
not narrow, so the check covers the whole inventory whatever the run touches.

    {{ hostvars | sparkops_role_var_problems(host, roles_dir) }}

is the role-variable rule alone for one host (kept for callers of the earlier seam). The
logic is unit-tested without Ansible; this file is the thin seam.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

# ansible-playbook from another environment than the kit's venv: use the checkout's sources.
if importlib.util.find_spec("sparkops") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))

from sparkops.render.inventory_checks import check_inventory
from sparkops.render.role_vars import (
    UNRESOLVED,
    load_role_specs,
    play_settings,
    role_variable_problems,
)


@lru_cache(maxsize=4)
def _specs(roles_dir: str):
    return load_role_specs(roles_dir)


@lru_cache(maxsize=4)
def _plays(playbooks_dir: str):
    return play_settings(playbooks_dir)


def _value(source, name: str):
    """The templated value as plain data, or UNRESOLVED when it needs what is not known yet."""
    try:
        return json.loads(json.dumps(source[name], default=str))
    except Exception:  # any templating failure: judge the name, not the value
        return UNRESOLVED


class _Plain(Mapping[str, Any]):
    """One host's variables, templated by Ansible only when a rule reads one, as plain data."""

    def __init__(self, source) -> None:
        self._source = source

    def __getitem__(self, name: str) -> Any:
        return _value(self._source, name)

    def __contains__(self, name: object) -> bool:
        return name in self._source

    def __iter__(self) -> Iterator[str]:
        return (str(name) for name in self._source)

    def __len__(self) -> int:
        return len(list(self._source))


def sparkops_inventory_check(
    hostvars, groups, roles_dir: str, playbooks_dir: str, sources=()
) -> dict:
    """The whole inventory check: {"errors": [...], "warnings": [...]}. `sources`: the `-i`
    sources, whose folders are read for files Ansible must not read as inventory."""
    hosts = {host: _Plain(hostvars[host]) for host in groups.get("sparks") or []}
    found = check_inventory(
        {name: list(members) for name, members in groups.items()},
        hosts,
        _specs(str(Path(roles_dir).resolve())),
        _plays(str(Path(playbooks_dir).resolve())),
        sources=[str(source) for source in sources or ()],
    )
    return {"errors": found.errors, "warnings": found.warnings}


def sparkops_role_var_problems(hostvars, host: str, roles_dir: str) -> list[str]:
    """Problems with `host`'s role-prefixed variables (empty when there are none)."""
    specs = _specs(str(Path(roles_dir).resolve()))
    source = hostvars[host]
    names = [name for name in source if specs.role_of(str(name))]
    return role_variable_problems({name: _value(source, name) for name in names}, specs)


class FilterModule:
    """Registers the filters."""

    def filters(self):
        return {
            "sparkops_inventory_check": sparkops_inventory_check,
            "sparkops_role_var_problems": sparkops_role_var_problems,
        }
