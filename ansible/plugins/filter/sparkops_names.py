"""Ansible filter `sparkops_misspelt_prefixes`: variable names one slip away from a role's prefix.

    {{ names | sparkops_misspelt_prefixes(roles_dir) }}

returns one warning per name whose leading words are close to, but not, a role's prefix
(`host_tunning_job_users` for host_tuning, `vlm_serving_port` for vllm_serving), naming the
variable it was probably meant to be. The inventory check (validate_inventory.yml, which every
entry playbook imports) refuses an unknown name under a role's own prefix; a name with a
misspelt prefix belongs to no role, so Ansible ignores it and the role runs with its default:
the same check warns with these sentences. The roles are the directories of `roles_dir`
(default: ansible/roles) that have meta/argument_specs.yml.
"""

from __future__ import annotations

import difflib
import importlib.util
import sys
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

# ansible-playbook from another environment than the kit's venv: use the checkout's sources.
if importlib.util.find_spec("sparkops") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))

from sparkops.render.role_vars import load_role_specs

ROLES = Path(__file__).resolve().parents[2] / "roles"
# How alike a name's leading words and a prefix must be (difflib ratio): one letter doubled,
# dropped or swapped in "host_tuning" scores about 0.95; "sparkops_topology" against
# "sparkops_cli" 0.69.
CUTOFF = 0.8


@lru_cache(maxsize=4)
def role_options(roles_dir: str) -> dict[str, frozenset[str]]:
    """Role name -> the option names its meta/argument_specs.yml declares (the inventory
    check's own reading, sparkops.render.role_vars)."""
    specs = load_role_specs(roles_dir)
    return {role: frozenset(options) for role, options in specs.options.items()}


def sparkops_misspelt_prefixes(names: Iterable[Any], roles_dir: str | None = None) -> list[str]:
    """Warnings for names close to a role prefix (see the module docstring), in name order."""
    roles = role_options(str(roles_dir or ROLES))
    warnings = []
    for name in sorted({str(n) for n in names}):
        if name.startswith("_") or any(name.startswith(role + "_") for role in roles):
            continue
        guesses = [guess for role in roles if (guess := _guess(name, role, roles[role]))]
        if guesses:  # a declared name first, then the closest prefix
            role, meant = max(guesses, key=lambda g: (g[1] in roles[g[0]], _ratio(name, g[0])))
            hint = f"did you mean {meant}?" if meant in roles[role] else "no such variable either"
            warnings.append(
                f"{name} looks like a variable of the role {role} with its prefix misspelt "
                f"({hint}); Ansible ignores it, so the role keeps its default. Fix or remove it "
                f"(the declared names are in ansible/roles/{role}/meta/argument_specs.yml)."
            )
    return warnings


def _ratio(name: str, role: str) -> float:
    return difflib.SequenceMatcher(None, name[: len(role)], role).ratio()


def _guess(name: str, role: str, declared: frozenset[str]) -> tuple[str, str] | None:
    """(role, the name meant) when `name`'s leading words are close to `role`; a dropped
    underscore (`hosttuning_x`) makes one word fewer, so both word counts are tried."""
    words = name.split("_")
    count = role.count("_") + 1
    found = None
    for n, target, cutoff in ((count, role, CUTOFF), (count - 1, role.replace("_", ""), 0.9)):
        head = "_".join(words[:n])
        if n < 1 or len(words) <= n:
            continue
        if difflib.SequenceMatcher(None, head, target).ratio() >= cutoff:
            meant = role + name[len(head) :]
            if meant in declared:
                return role, meant
            found = found or (role, meant)
    return found


class FilterModule:
    """Registers the filter."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"sparkops_misspelt_prefixes": sparkops_misspelt_prefixes}
