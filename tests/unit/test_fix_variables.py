"""Every variable a message under src/sparkops tells the user to set is one the kit reads:
a role variable (ansible/roles/*/meta/argument_specs.yml), a play variable (the keys of
ansible/playbooks/vars/*.yml), or an inventory variable a playbook reads (sparkops_topology).
A fix naming a variable that does not exist is worse than none: setting it is silently
ignored ("raise ... its sparkops_gpu_memory_gib" once named vllm_serving_gpu_memory_gib)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "sparkops"
ROLES = REPO / "ansible" / "roles"
PLAYBOOKS = REPO / "ansible" / "playbooks"


def _prefixes() -> list[str]:
    roles = {p.name for p in ROLES.iterdir() if (p / "meta" / "argument_specs.yml").is_file()}
    return sorted(roles | {"sparkops"}, key=len, reverse=True)


NAME = re.compile(rf"\b(?:{'|'.join(_prefixes())})_[a-z0-9_]*[a-z0-9]\b")


def real_variables() -> set[str]:
    names: set[str] = set()
    for spec in ROLES.glob("*/meta/argument_specs.yml"):
        for entry in (yaml.safe_load(spec.read_text()).get("argument_specs") or {}).values():
            names |= set((entry or {}).get("options") or {})
    for play_vars in PLAYBOOKS.glob("vars/*.yml"):
        names |= set(yaml.safe_load(play_vars.read_text()) or {})
    # inventory variables a play reads (validate_inventory.yml: sparkops_topology)
    plays = "\n".join(p.read_text() for p in PLAYBOOKS.glob("*.yml"))
    names |= set(re.findall(r"\b(sparkops_[a-z0-9_]*[a-z0-9])\b", plays))
    return names


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def message_variables() -> dict[str, set[str]]:
    """Variable-looking names in the string literals of src/sparkops (docstrings left out:
    they speak of filters and modules, not of what a user sets) -> the files saying them."""
    found: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) in docs:
                    continue
                for name in NAME.findall(node.value):
                    found.setdefault(name, set()).add(str(path.relative_to(REPO)))
    return found


def test_the_scan_finds_the_names_messages_use() -> None:
    found = message_variables()
    assert "vllm_serving_gpu_memory_gib" in found  # profiles/checks.py's memory fix
    assert "vllm_serving_hf_token" in found
    assert NAME.findall("set sparkops_gpu_memory_gib in the inventory") == [
        "sparkops_gpu_memory_gib"
    ]
    assert "sparkops_topology" in real_variables()
    assert "sparkops_gpu_memory_gib" not in real_variables()


def test_every_variable_a_message_names_exists() -> None:
    real = real_variables()
    unknown = {
        name: sorted(files) for name, files in message_variables().items() if name not in real
    }
    assert not unknown, unknown


def test_user_facing_files_name_the_benchmark_notes_not_the_seed() -> None:
    """ "The seed" is the project's own word for its source; a user reads "the published GB10
    benchmark notes", which docs/planning.md links."""
    files = [
        REPO / "README.md",
        *REPO.glob("docs/*.md"),
        *REPO.glob("inventory/**/*.yml"),
        *SRC.glob("profiles/*.yaml"),
        *ROLES.glob("*/README.md"),
        *ROLES.glob("*/meta/argument_specs.yml"),
    ]
    said = [
        str(path.relative_to(REPO))
        for path in files
        if re.search(r"the seed's fastest|the first seed", path.read_text(), re.IGNORECASE)
    ]
    assert said == []
    planning = (REPO / "docs" / "planning.md").read_text()
    assert "https://www.drmvalente.com.au/blog-rtx-spark-dgx-spark-batch-inference.html" in planning
