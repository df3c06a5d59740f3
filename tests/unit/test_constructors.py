"""A class whose constructor only stores what it is given, and whose methods never set an
attribute again, is a frozen dataclass (issue 38 item 5): the fields are declared where a
reader looks for them, and nothing can set one after construction.

Read from the source (ast), so the rule covers every class of src/sparkops, a new one too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import sparkops

SRC = Path(sparkops.__file__).parent


def _assigned_attributes(node: ast.AST) -> set[str]:
    """The attributes of `self` that `node` assigns (plain, augmented or annotated)."""
    found = set()
    for sub in ast.walk(node):
        targets = sub.targets if isinstance(sub, ast.Assign) else []
        if isinstance(sub, ast.AugAssign | ast.AnnAssign):
            targets = [sub.target]
        for target in targets:
            for part in ast.walk(target):
                if (
                    isinstance(part, ast.Attribute)
                    and isinstance(part.value, ast.Name)
                    and part.value.id == "self"
                ):
                    found.add(part.attr)
    return found


def _only_stores(init: ast.FunctionDef) -> bool:
    """The constructor's body is assignments to attributes of `self` (and a docstring)."""
    body = [
        s for s in init.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
    ]
    return bool(body) and all(
        isinstance(s, ast.Assign | ast.AnnAssign)
        and _assigned_attributes(s)
        and all(
            isinstance(t, ast.Attribute | ast.Tuple)
            for t in (s.targets if isinstance(s, ast.Assign) else [s.target])
        )
        for s in body
    )


def _hand_written_records(tree: ast.Module) -> list[str]:
    """Classes whose __init__ only stores attributes that no other method sets again."""
    found = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        methods = [m for m in cls.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)]
        init = next((m for m in methods if m.name == "__init__"), None)
        if not isinstance(init, ast.FunctionDef) or not _only_stores(init):
            continue
        if not any(_assigned_attributes(m) for m in methods if m is not init):
            found.append(cls.name)
    return found


def test_a_constructor_that_only_stores_its_arguments_is_a_frozen_dataclass() -> None:
    found = {
        f"{path.relative_to(SRC)}:{name}"
        for path in SRC.rglob("*.py")
        for name in _hand_written_records(ast.parse(path.read_text(encoding="utf-8")))
    }
    assert found == set()


def test_the_rule_finds_a_hand_written_record() -> None:
    """The check can fail: a class like the four converted ones is found; one whose method
    sets an attribute again (a lock's file descriptor) is not."""
    record = ast.parse(
        "class Api:\n    def __init__(self, store, runner):\n"
        "        self.store = store\n        self.runner = runner\n"
    )
    stateful = ast.parse(
        "class Lock:\n    def __init__(self, fd):\n        self._fd = fd\n"
        "    def release(self):\n        self._fd = None\n"
    )
    assert _hand_written_records(record) == ["Api"]
    assert _hand_written_records(stateful) == []
