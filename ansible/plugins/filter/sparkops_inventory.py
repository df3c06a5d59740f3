"""Ansible filter `sparkops_role_var_problems`: the inventory check of role-prefixed variables.

    {{ hostvars | sparkops_role_var_problems(host, roles_dir) }}

returns one sentence per variable of `host` that carries a role's prefix but that role does not
declare (naming the nearest declared one), or whose value cannot be the declared type. Names
starting with an underscore are the roles' own facts (`_role_x` set_fact, `__role_x` register)
and are skipped. The logic is sparkops.render.role_vars (unit-tested without Ansible); this
file is the thin seam.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from functools import lru_cache
from pathlib import Path

# ansible-playbook from another environment than the kit's venv: use the checkout's sources.
if importlib.util.find_spec("sparkops") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))

from sparkops.render.role_vars import UNRESOLVED, load_role_specs, role_variable_problems


@lru_cache(maxsize=4)
def _specs(roles_dir: str):
    return load_role_specs(roles_dir)


def _value(source, name: str):
    """The templated value as plain data, or UNRESOLVED when it needs what is not known yet."""
    try:
        return json.loads(json.dumps(source[name], default=str))
    except Exception:  # any templating failure: judge the name, not the value
        return UNRESOLVED


def sparkops_role_var_problems(hostvars, host: str, roles_dir: str) -> list[str]:
    """Problems with `host`'s role-prefixed variables (empty when there are none)."""
    specs = _specs(str(Path(roles_dir).resolve()))
    source = hostvars[host]
    names = [name for name in source if specs.role_of(str(name))]
    return role_variable_problems({name: _value(source, name) for name in names}, specs)


class FilterModule:
    """Registers the filter."""

    def filters(self):
        return {"sparkops_role_var_problems": sparkops_role_var_problems}
