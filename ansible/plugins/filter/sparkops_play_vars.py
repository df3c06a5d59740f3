"""Ansible filter `sparkops_play_var_problems`: a play's own variables, checked like a role's.

Roles declare their variables in meta/argument_specs.yml and the inventory check refuses a
misspelt one; a playbook's own settings (preflight.yml's sparkops_preflight_*, status.yml's
sparkops_status_*) live in ansible/playbooks/vars/<play>.yml, and the play refuses a name under
its prefix that the file does not declare, naming the closest declared one:

    {{ query('ansible.builtin.varnames', '^sparkops_preflight_')
       | sparkops_play_var_problems(declared, 'sparkops_preflight_', 'preflight.yml') }}
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

if importlib.util.find_spec("sparkops") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))

from sparkops.render.role_vars import nearest


def sparkops_play_var_problems(
    names: Iterable[object], declared: Iterable[object], prefix: str, play: str
) -> list[str]:
    """One sentence per name under ``prefix`` that ``declared`` lacks, in name order."""
    known = {str(name) for name in declared}
    problems = []
    for name in sorted({str(name) for name in names} - known):
        guess = nearest(name, known, prefix)
        hint = f"did you mean {guess}?" if guess else "no declared variable is close"
        problems.append(
            f"{name} is not a variable of {play} ({hint}); a misspelt name would be ignored, so "
            f"fix or remove it (the declared names are in ansible/playbooks/vars/{play})"
        )
    return problems


class FilterModule:
    def filters(self) -> dict[str, Callable[..., list[str]]]:
        return {"sparkops_play_var_problems": sparkops_play_var_problems}
