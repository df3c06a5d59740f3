"""Ansible filter `sparkops_misspelt_prefixes`: variable names one slip away from a role's prefix.

    {{ names | sparkops_misspelt_prefixes(roles_dir) }}

returns one warning per name whose leading words are close to, but not, a role's prefix
(`host_tunning_job_users` for host_tuning, `vlm_serving_port` for vllm_serving) or a
playbook's own (`sparkops_prefligth_concurrency` for preflight.yml), naming the owner and the
variable it was probably meant to be. The inventory check (validate_inventory.yml, through
sparkops_inventory_check) gives the same sentences; the logic is
sparkops.render.role_vars.misspelt_prefixes, this file the thin seam. The roles are the
directories of `roles_dir` (default: ansible/roles) that have meta/argument_specs.yml.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

# ansible-playbook from another environment than the kit's venv: use the checkout's sources.
if importlib.util.find_spec("sparkops") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))

from sparkops.render.role_vars import load_role_specs, misspelt_prefixes, play_settings

ROLES = Path(__file__).resolve().parents[2] / "roles"
PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


@lru_cache(maxsize=4)
def _owners(roles_dir: str):
    return load_role_specs(roles_dir), play_settings(PLAYBOOKS)


def sparkops_misspelt_prefixes(names: Iterable[Any], roles_dir: str | None = None) -> list[str]:
    """Warnings for names close to a role's or playbook's prefix, in name order."""
    specs, plays = _owners(str(roles_dir or ROLES))
    return misspelt_prefixes((str(n) for n in names), specs, plays)


class FilterModule:
    """Registers the filter."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"sparkops_misspelt_prefixes": sparkops_misspelt_prefixes}
