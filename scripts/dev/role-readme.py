#!/usr/bin/env python3
"""Write (or check) the variable section of every role README from its meta/argument_specs.yml.

argument_specs is each role's contract, and ansible-core enforces it; a hand-written variable
list beside it drifts the first time someone renames a variable. So the README holds a
generated section between two markers, and `--check` (run by tests/unit/test_role_readmes.py,
so `make test` in CI catches it) fails naming every README whose section is stale. Everything
outside the markers is prose a person writes.

    scripts/dev/role-readme.py            # rewrite the stale sections
    scripts/dev/role-readme.py --check    # exit 1 and list the stale READMEs, change nothing
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

BEGIN = "<!-- BEGIN VARIABLES -->"
END = "<!-- END VARIABLES -->"
ROLES_DIR = Path(__file__).resolve().parents[2] / "ansible" / "roles"
NO_DEFAULT = "*(none)*"


def cell(text: str) -> str:
    """Text safe inside one Markdown table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def show_default(option: dict[str, Any]) -> str:
    """The default as YAML would spell it, or a mark that there is none."""
    if "default" not in option or option["default"] is None:
        return NO_DEFAULT
    value = option["default"]
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, (list, dict)):
        return "`" + cell(json.dumps(value)) + "`"
    if value == "":
        return '`""`'
    return "`" + cell(str(value)) + "`"


def show_type(option: dict[str, Any]) -> str:
    kind = str(option.get("type", "str"))
    if kind == "list" and "elements" in option:
        kind = f"list of {option['elements']}"
    return kind


def describe(option: dict[str, Any]) -> str:
    text = option.get("description", "")
    if isinstance(text, list):
        text = " ".join(str(part) for part in text)
    text = cell(str(text))
    if option.get("choices"):
        text += " Choices: " + ", ".join(f"`{c}`" for c in option["choices"]) + "."
    if option.get("required"):
        text += " Required."
    return text


def variables_section(spec_file: Path) -> str:
    """The generated Markdown for one role: its entry points' options as tables."""
    specs = (yaml.safe_load(spec_file.read_text()) or {}).get("argument_specs") or {}
    lines = [BEGIN, "<!-- Generated from meta/argument_specs.yml by scripts/dev/role-readme.py"]
    lines += ["     (make docs). Edit the spec, not this section. -->", ""]
    for entry, spec in specs.items():
        options = (spec or {}).get("options") or {}
        if len(specs) > 1 or entry != "main":
            lines += [f"### Entry point `{entry}`", ""]
        if not options:
            lines += ["This role takes no variables.", ""]
            continue
        lines += ["| Variable | Type | Default | Description |", "| --- | --- | --- | --- |"]
        for name in sorted(options):
            option = options[name] or {}
            row = [f"`{name}`", show_type(option), show_default(option), describe(option)]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def updated_readme(readme: Path, section: str) -> str:
    """The README with its marked section replaced; markers missing or out of order is an error."""
    text = readme.read_text() if readme.exists() else ""
    start, stop = text.find(BEGIN), text.find(END)
    if start < 0 or stop < start:
        raise ValueError(f"{readme}: no '{BEGIN}' ... '{END}' section")
    return text[:start] + section + text[stop + len(END) :]


def shown(path: Path) -> str:
    """A path as the user can act on it: relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="list stale READMEs, exit 1 if any")
    parser.add_argument("--roles-dir", type=Path, default=ROLES_DIR, help="default: %(default)s")
    args = parser.parse_args(argv)
    roles = sorted(p.parent.parent for p in args.roles_dir.glob("*/meta/argument_specs.yml"))
    if not roles:
        print(
            f"role-readme: no role with meta/argument_specs.yml under {args.roles_dir}",
            file=sys.stderr,
        )
        return 2
    stale, broken = [], []
    for role in roles:
        readme = role / "README.md"
        try:
            new = updated_readme(readme, variables_section(role / "meta" / "argument_specs.yml"))
        except (ValueError, yaml.YAMLError) as exc:
            broken.append(str(exc).splitlines()[0].replace(str(role.parent) + "/", ""))
            continue
        if new != readme.read_text():
            stale.append(readme)
            if not args.check:
                readme.write_text(new)
    for line in broken:
        print(f"role-readme: {line}", file=sys.stderr)
    for readme in stale:
        verb = "stale" if args.check else "updated"
        print(f"role-readme: {verb}: {shown(readme)}", file=sys.stderr)
    if args.check and stale:
        print("role-readme: run `make docs` to regenerate", file=sys.stderr)
    return 1 if broken or (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
