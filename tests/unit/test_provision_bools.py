"""Every boolean role variable is converted with `| bool` wherever a role reads it.

`-e container_runtime_nvidia_set_default=false` arrives as the string "false", which Jinja
treats as true: a read without `| bool` flips the switch the wrong way (issue 24, item 10). The
argument specs name the booleans; every Jinja expression of every role (tasks, handlers, vars,
templates, `when:` conditions) is parsed with Jinja's own parser, and each read of a boolean
must be the operand of the `bool` filter. tests/infra/test_provision_bools.py passes them as
"false" through `-e` to a real host.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jinja2
import jinja2.nodes
import pytest
import yaml

ROLES = Path(__file__).resolve().parents[2] / "ansible" / "roles"
# Task keywords whose value is a bare Jinja expression (no braces).
CONDITIONS = {"when", "changed_when", "failed_when", "until", "that"}
ENV = jinja2.Environment()


def boolean_options(role: Path) -> set[str]:
    """The role's options declared `type: bool` in meta/argument_specs.yml."""
    spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text()) or {}
    return {
        name
        for entry in (spec.get("argument_specs") or {}).values()
        for name, option in ((entry or {}).get("options") or {}).items()
        if option.get("type") == "bool"
    }


def expressions(value: Any, key: str | None = None) -> Iterator[str]:
    """Every Jinja template in a parsed YAML document; conditions become `{{ ... }}`."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from expressions(v, str(k))
    elif isinstance(value, list):
        for item in value:
            yield from expressions(item, key)
    elif isinstance(value, str):
        if key in CONDITIONS and "{{" not in value:
            yield "{{ " + value + " }}"
        elif "{{" in value or "{%" in value:
            yield value
    elif isinstance(value, bool) or value is None:
        return


def unconverted(template: str, names: set[str]) -> list[str]:
    """Names of `names` read in `template` other than as the operand of `| bool`."""
    tree = ENV.parse(template)
    converted = set()
    for node in tree.find_all(jinja2.nodes.Filter):
        if node.name != "bool":
            continue
        operand = node.node  # `x | default(false) | bool` converts x too
        while isinstance(operand, jinja2.nodes.Filter) and operand.name in ("default", "d"):
            operand = operand.node
        converted.add(id(operand))
    return [
        node.name
        for node in tree.find_all(jinja2.nodes.Name)
        if node.name in names and node.ctx == "load" and id(node) not in converted
    ]


def role_templates(role: Path) -> Iterator[tuple[Path, str]]:
    """(file, template) for every Jinja template a role evaluates (not `files/`, which a
    role copies as they are: Prometheus' rules hold Go templates, `{{ $labels.x }}`)."""
    for path in sorted(role.rglob("*")):
        parts = path.relative_to(role).parts
        if not path.is_file() or "meta" in parts or parts[0] == "files":
            continue
        if path.suffix == ".j2":
            yield path, path.read_text()
        elif path.suffix in (".yml", ".yaml"):
            for document in yaml.safe_load_all(path.read_text()):
                for template in expressions(document):
                    yield path, template


ROLE_DIRS = sorted(p for p in ROLES.iterdir() if (p / "meta" / "argument_specs.yml").is_file())


@pytest.mark.parametrize("role", ROLE_DIRS, ids=lambda p: p.name)
def test_every_boolean_read_is_converted(role: Path) -> None:
    names = boolean_options(role) | {n for r in ROLE_DIRS for n in boolean_options(r)}
    problems = [
        f"{path.relative_to(ROLES)}: {name} without | bool in {template.strip()[:120]}"
        for path, template in role_templates(role)
        for name in unconverted(template, names)
    ]
    assert problems == []


def test_the_checker_finds_a_read_without_bool() -> None:
    names = {"role_flag"}
    assert unconverted("{{ role_flag and x }}", names) == ["role_flag"]
    assert unconverted("{{ 'a' if role_flag else 'b' }}", names) == ["role_flag"]
    assert unconverted("{{ role_flag | bool and not (role_flag | bool) }}", names) == []
    assert unconverted("{{ role_flag | default(false) | bool }}", names) == []
    assert unconverted("{{ role_flag | default(false) }}", names) == ["role_flag"]
    assert list(expressions({"when": ["role_flag"]})) == ["{{ role_flag }}"]
