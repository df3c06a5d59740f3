"""Role-prefixed inventory variables checked against the roles' own argument specs.

Ansible ignores a variable no task reads, so `host_tuning_job_user:` (for
`host_tuning_job_users:`) silently falls back to the default, and a value given as
`-e qsfp_network_mtu=9000` arrives as a string that only fails deep inside a template, after
files were changed. The inventory check (ansible/playbooks/validate_inventory.yml, through the
filter in ansible/plugins/filter/sparkops_inventory.py) calls this module before any host is
touched: a name under a role's prefix (role directory name + "_") must be declared in that
role's meta/argument_specs.yml, and a declared value must be convertible to the declared type.

Names a role sets itself at run time start with an underscore (prometheus-community's
convention: `_role_x` for set_fact and role vars, `__role_x` for register), so they carry no
role's prefix and a fact cache bringing them into a later run never trips the check.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# Ansible's own spellings of booleans (ansible.module_utils.parsing.convert_bool).
TRUE_WORDS = frozenset({"y", "yes", "on", "1", "true", "t"})
FALSE_WORDS = frozenset({"n", "no", "off", "0", "false", "f"})
# A value Ansible could not template at check time (it refers to a fact): its type is not judged.
UNRESOLVED = object()


@dataclass
class RoleSpecs:
    """Every role's declared options: role -> name -> spec."""

    options: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    @property
    def roles(self) -> list[str]:
        """Role names, longest first, so the longest matching prefix wins."""
        return sorted(self.options, key=len, reverse=True)

    def role_of(self, name: str) -> str | None:
        """The role whose prefix `name` carries, or None for a name no role owns (a role's
        internal `_role_x` / `__role_x` included: those are the role's, never the inventory's)."""
        if name.startswith("_"):
            return None
        return next((role for role in self.roles if name.startswith(role + "_")), None)


def load_role_specs(roles_dir: str | Path) -> RoleSpecs:
    """Read meta/argument_specs.yml (every entry point) of each role."""
    specs = RoleSpecs()
    for role_dir in sorted(Path(roles_dir).iterdir()):
        spec_file = role_dir / "meta" / "argument_specs.yml"
        if not spec_file.is_file():
            continue
        data = yaml.safe_load(spec_file.read_text()) or {}
        options: dict[str, dict[str, Any]] = {}
        for entry in (data.get("argument_specs") or {}).values():
            options.update((entry or {}).get("options") or {})
        specs.options[role_dir.name] = options
    return specs


def _type_problem(value: Any, spec: dict[str, Any]) -> str | None:
    """Why `value` cannot be the spec's type (None when it can), in words for the user."""
    kind = spec.get("type", "str")
    text = value.strip().lower() if isinstance(value, str) else None
    if kind == "int":
        if isinstance(value, bool) or not (
            isinstance(value, int) or (text is not None and text.lstrip("+-").isdigit())
        ):
            return "must be a whole number"
    elif kind == "float":
        if isinstance(value, bool):
            return "must be a number"
        try:
            float(value)
        except (TypeError, ValueError):
            return "must be a number"
    elif kind == "bool":
        spelled = isinstance(value, bool) or text in TRUE_WORDS | FALSE_WORDS
        if not spelled and not (isinstance(value, int) and value in (0, 1)):
            return "must be true or false"
    elif kind == "list":
        if not isinstance(value, list | tuple):
            return "must be a list (in YAML, or as JSON with -e '{\"name\": [...]}')"
    elif kind == "dict":
        if not isinstance(value, dict):
            return "must be a mapping (in YAML, or as JSON with -e '{\"name\": {...}}')"
    elif kind in ("str", "path") and isinstance(value, dict | list):
        return "must be a single value, not a list or mapping"
    choices = spec.get("choices")
    if choices and not isinstance(value, list | dict) and str(value) not in map(str, choices):
        return "must be one of " + ", ".join(map(str, choices))
    return None


def _is_template(value: Any) -> bool:
    """A value still written as a Jinja template (`"{{ host_tuning_job_users }}"`): Ansible
    gives it its type when it templates it, so its text is not judged."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def nearest(name: str, candidates: set[str], prefix: str = "") -> str | None:
    """The declared name closest to a misspelt one (difflib), or None when none is close.

    The shared role prefix is left out of the comparison: it would make every name look close.
    """
    tails = {c[len(prefix) :]: c for c in candidates if c.startswith(prefix)}
    close = difflib.get_close_matches(name[len(prefix) :], sorted(tails), n=1, cutoff=0.6)
    return tails[close[0]] if close else None


def role_variable_problems(host_vars: dict[str, Any], specs: RoleSpecs) -> list[str]:
    """One sentence per unknown role-prefixed name or mistyped value, in name order."""
    problems: list[str] = []
    for name in sorted(host_vars):
        role = specs.role_of(name)
        if role is None:
            continue
        if name not in specs.options[role]:
            guess = nearest(name, set(specs.options[role]), role + "_")
            hint = f"did you mean {guess}?" if guess else "no declared variable is close"
            problems.append(
                f"{name} is not a variable of the role {role} ({hint}); a misspelt name is "
                f"ignored by Ansible, so fix or remove it (the declared names are in "
                f"ansible/roles/{role}/meta/argument_specs.yml)"
            )
            continue
        spec = specs.options[role].get(name)
        value = host_vars[name]
        if spec is None or value is None or value is UNRESOLVED or _is_template(value):
            continue
        why = _type_problem(host_vars[name], spec)
        if why is not None:
            problems.append(
                f"{name} is {host_vars[name]!r} but {why} (ansible/roles/{role}/meta/"
                "argument_specs.yml); fix it in the inventory or in -e"
            )
    return problems


# How alike a name's leading words and a prefix must be (difflib ratio): one letter doubled,
# dropped or swapped in "host_tuning" scores about 0.95; "sparkops_topology" against
# "sparkops_cli" 0.69.
PREFIX_CUTOFF = 0.8
# Names of the kit's own that carry no role's or playbook's prefix.
KIT_NAMES = frozenset({"sparkops_topology"})


def play_settings(playbooks_dir: str | Path) -> dict[str, frozenset[str]]:
    """Playbook file name -> its own settings: preflight.yml owns sparkops_preflight_*, each
    declared in ansible/playbooks/vars/preflight.yml (the play refuses an undeclared one)."""
    plays: dict[str, frozenset[str]] = {}
    for vars_file in sorted((Path(playbooks_dir) / "vars").glob("*.yml")):
        prefix = f"sparkops_{vars_file.stem}_"
        declared = {str(n) for n in yaml.safe_load(vars_file.read_text()) or {}}
        plays[vars_file.name] = frozenset(n for n in declared if n.startswith(prefix))
    return plays


def _ratio(head: str, prefix: str) -> float:
    return difflib.SequenceMatcher(None, head, prefix).ratio()


def _guess(name: str, prefix: str, declared: frozenset[str]) -> tuple[str, float] | None:
    """(the name meant, how close) when `name`'s leading words are close to `prefix` (without
    its final underscore); a dropped underscore (`hosttuning_x`) makes one word fewer, so both
    word counts are tried. A declared name wins over a merely close prefix."""
    words = name.split("_")
    count = prefix.count("_")
    found = None
    for n, target, cutoff in (
        (count, prefix[:-1], PREFIX_CUTOFF),
        (count - 1, prefix[:-1].replace("_", ""), 0.9),
    ):
        head = "_".join(words[:n])
        if n < 1 or len(words) <= n:
            continue
        ratio = _ratio(head, target)
        if ratio >= cutoff:
            meant = prefix + name[len(head) + 1 :]
            if meant in declared:
                return meant, ratio + 1
            found = found or (meant, ratio)
    return found


def misspelt_prefixes(
    names: Iterable[str], specs: RoleSpecs, plays: Mapping[str, frozenset[str]]
) -> list[str]:
    """One warning per name whose leading words are close to, but not, a role's prefix
    (`vlm_serving_port`) or a playbook's (`sparkops_prefligth_concurrency`), naming its
    owner and the variable meant, in name order. A name under any owner's own prefix
    (`sparkops_preflight_concurrency` is preflight.yml's, not a slip of spark_preflight_)
    is that owner's business: the role check or the play refuses it there."""
    owners: dict[str, tuple[str, frozenset[str]]] = {
        role + "_": (f"the role {role}", frozenset(options))
        for role, options in specs.options.items()
    }
    owners.update(
        {f"sparkops_{Path(play).stem}_": (play, declared) for play, declared in plays.items()}
    )
    warnings = []
    for name in sorted({str(n) for n in names}):
        if name.startswith("_") or name in KIT_NAMES or name.startswith(tuple(owners)):
            continue
        guesses = [
            (ratio, prefix, meant)
            for prefix, (_, declared) in owners.items()
            if (guess := _guess(name, prefix, declared))
            for meant, ratio in [guess]
        ]
        if not guesses:
            continue
        _, prefix, meant = max(guesses)
        owner, declared = owners[prefix]
        hint = f"did you mean {meant}?" if meant in declared else "no such variable either"
        role = owner.startswith("the role ")
        where = (
            f"ansible/roles/{owner.removeprefix('the role ')}/meta/argument_specs.yml"
            if role
            else f"ansible/playbooks/vars/{owner}"
        )
        kind = "a variable of" if role else "a setting of"
        keeps = "the role keeps its default" if role else f"{owner} keeps its default"
        warnings.append(
            f"{name} looks like {kind} {owner} with its prefix misspelt ({hint}); Ansible "
            f"ignores it, so {keeps}. Fix or remove it (the declared names are in {where})."
        )
    return warnings
