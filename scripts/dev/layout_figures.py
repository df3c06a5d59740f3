#!/usr/bin/env python3
"""Issue 20's layout figures for one source tree, so before and after are counted alike.

    scripts/dev/layout_figures.py [SRC]          (default: src; SRC holds sparkops/)
    scripts/dev/layout_figures.py SRC --stops    (also list the config trace's stops)

Prints the lines of sparkops/batch and its share of the package, the files over 500 lines,
the `dict[str, Any]` count, the package import cycles (imports inside functions count, as in the
import contracts of pyproject.toml) and the config trace.

The config trace is a taint walk over `ast`, not a reading by eye: it starts at `batch run`'s
handler in batch/cli.py (`_run(args)`, the parsed arguments tainted), and follows every call
whose arguments carry a tainted value into the called function (resolved through the module's
own definitions, its `sparkops` imports, `self.` methods and locals built from a known class).
A value is tainted when it is a tainted parameter, a local assigned from a tainted expression,
or a `self.` attribute so assigned. A stop is a function that reads a tainted value; each is
visited once, in source order (depth first). A visit to a file is a maximal run of consecutive
stops in it; a return is a visit to a file already left. Calls into classes without their own
`__init__` (pydantic models, dataclasses) are not stops.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import Counter
from pathlib import Path


def _module_of(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else module


class Tree:
    """Every module of the package: its parsed tree, functions, classes and imports."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, Path] = {}
        self.trees: dict[str, ast.Module] = {}
        for path in sorted((root / "sparkops").rglob("*.py")):
            module = _module_of(root, path)
            self.files[module] = path
            self.trees[module] = ast.parse(path.read_text(encoding="utf-8"))
        self.imports = {m: self._imports(m, t) for m, t in self.trees.items()}

    def _imports(self, module: str, tree: ast.Module) -> dict[str, str]:
        """Local name -> the dotted sparkops name it stands for (module or module.attr)."""
        is_pkg = self.files[module].name == "__init__.py"
        package = module if is_pkg else module.rpartition(".")[0]
        names: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        names[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:
                    names[alias.asname or alias.name] = f"{base}.{alias.name}"
        return {k: v for k, v in names.items() if v.startswith("sparkops")}

    def package_graph(self) -> dict[str, set[str]]:
        graph: dict[str, set[str]] = {}
        for module in self.trees:
            edges = graph.setdefault(_package_of(module), set())
            for target in self.imports[module].values():
                for candidate in (target, target.rpartition(".")[0]):
                    if candidate in self.trees and _package_of(candidate) != _package_of(module):
                        edges.add(_package_of(candidate))
        return graph

    def definition(self, dotted: str) -> tuple[str, ast.AST] | None:
        """The function or class a dotted name points at (following one re-export)."""
        module, _, name = dotted.rpartition(".")
        if module not in self.trees:
            return None
        for node in self.trees[module].body:
            kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
            if isinstance(node, kinds) and node.name == name:
                return module, node
        again = self.imports[module].get(name)
        return self.definition(again) if again and again != dotted else None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of packages that reach each other (each pair checked both ways)."""

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reached = {node: reach(node) for node in graph}
    groups: list[list[str]] = []
    for node in sorted(graph):
        group = sorted({node} | {o for o in reached[node] if node in reached.get(o, ())})
        if len(group) > 1 and group not in groups:
            groups.append(group)
    return groups


def _names(expr: ast.AST) -> set[str]:
    """Plain names and `self.x` attributes an expression reads (as 'x' and 'self.x')."""
    found: set[str] = set()
    for node in ast.walk(expr):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            found.add(f"{node.value.id}.{node.attr}")  # self.cfg, or engine.cfg of a holder
    return found


CONFIG_WORD = re.compile(r"config|settings|options|view", re.IGNORECASE)
PLAIN = {"dict", "min", "max", "int", "float", "str", "bool", "Path"}


def _target_name(expr: ast.AST) -> str | None:
    """'x' for a name, 'self.x' for a self attribute, else None."""
    if isinstance(expr, ast.Name):
        return expr.id
    if (
        isinstance(expr, ast.Attribute)
        and isinstance(expr.value, ast.Name)
        and expr.value.id == "self"
    ):
        return f"self.{expr.attr}"
    return None


class Trace:
    """The config's taint walk (see the module docstring)."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.stops: list[tuple[str, str]] = []  # (file, qualified function)
        self.seen: set[int] = set()
        self.class_taint: dict[int, set[str]] = {}
        self.attr_types: dict[int, dict[str, tuple[str, ast.ClassDef]]] = {}

    def walk(
        self,
        module: str,
        func: ast.AST,
        tainted: set[str],
        cls: ast.ClassDef | None,
        typed: dict[str, tuple[str, ast.ClassDef]] | None = None,
    ) -> None:
        if id(func) in self.seen:
            return
        self.seen.add(id(func))
        assert isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef))
        ctaint = self.class_taint.setdefault(id(cls), set()) if cls else set()
        local_types: dict[str, tuple[str, ast.ClassDef]] = dict(typed or {})
        taint = set(tainted) | {f"self.{a}" for a in ctaint}
        for param, (_, kind) in (typed or {}).items():  # engine.cfg in send(engine, ...)
            taint |= {f"{param}.{a}" for a in self.class_taint.get(id(kind), ())}
        reads = False
        body = sorted(
            (n for n in ast.walk(func) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.Call))),
            key=lambda n: (n.lineno, n.col_offset),
        )
        position = len(self.stops)
        for node in body:
            if isinstance(node, ast.AnnAssign) and node.value is None:
                continue
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                reads |= bool(_names(node.value) & taint)
                made = self._class_of(module, node.value)
                held = self._is_config(module, node.value, taint)
                for target in targets:
                    name = _target_name(target)
                    if held and name:
                        taint.add(name)
                        if name.startswith("self.") and cls is not None:
                            ctaint.add(name[5:])
                    if made and isinstance(target, ast.Name):
                        local_types[target.id] = made
                    elif made and name and name.startswith("self.") and cls is not None:
                        self.attr_types.setdefault(id(cls), {})[name[5:]] = made
                continue
            assert isinstance(node, ast.Call)
            reads |= bool(_names(node) & taint)
            target = self._callee(module, node.func, cls, local_types)
            if target is None:
                continue
            t_module, t_func, t_cls = target
            params = [a.arg for a in t_func.args.args]
            if params and params[0] == "self":
                params = params[1:]
            passed = {
                params[i]
                for i, a in enumerate(node.args)
                if i < len(params) and self._is_config(module, a, taint)
            }
            passed |= {
                k.arg for k in node.keywords if k.arg and self._is_config(module, k.value, taint)
            }
            if any(
                k.arg is None and self._is_config(module, k.value, taint) for k in node.keywords
            ):
                passed |= {a.arg for a in t_func.args.kwonlyargs} | set(params)
            # an object that holds config values (self.transport) passed on: its type goes too
            holders = {}
            for i, a in enumerate(node.args):
                holder = self._holder(module, a, cls, local_types)
                if holder and i < len(params):
                    holders[params[i]] = holder
            holds = t_cls is not None and bool(self.class_taint.get(id(t_cls)))
            if passed or holds or holders:
                self.walk(t_module, t_func, passed, t_cls, holders)
        if reads:
            name = f"{cls.name}.{func.name}" if cls else func.name
            path = self.tree.files[module].relative_to(self.tree.root / "sparkops")
            self.stops.insert(position, (str(path), name))

    def _is_config(self, module: str, expr: ast.AST, taint: set[str]) -> bool:
        """Whether an expression is a job configuration object or one of its values: a tainted
        name, a field of one (`cfg.timeout`, `self.cfg.api_key`), a `*config`/`*settings`
        method of one, a plain conversion of one (`dict(...)`, `min(...)`), or a call of a
        class or function named for config, settings, options or a view. What a function
        computes from a value (records read from `cfg.input`) is not the config."""
        if isinstance(expr, ast.Await):
            expr = expr.value
        name = _target_name(expr)
        if name in taint:
            return True
        if isinstance(expr, ast.Attribute):  # a field of one: cfg.timeout, self.cfg.api_key
            if isinstance(expr.value, ast.Name) and f"{expr.value.id}.{expr.attr}" in taint:
                return True
            return self._is_config(module, expr.value, taint)
        if isinstance(expr, ast.Call):
            if isinstance(expr.func, ast.Name) and expr.func.id in PLAIN:
                return any(self._is_config(module, a, taint) for a in expr.args)
            if isinstance(expr.func, ast.Attribute) and _target_name(expr.func.value) in taint:
                return bool(CONFIG_WORD.search(expr.func.attr))
            found = self._resolve(module, expr.func)
            called = getattr(found[1], "name", "") if found else _target_name(expr.func) or ""
            return bool(CONFIG_WORD.search(called.rpartition(".")[2]))
        return False

    def _holder(
        self,
        module: str,
        expr: ast.AST,
        cls: ast.ClassDef | None,
        local_types: dict[str, tuple[str, ast.ClassDef]],
    ) -> tuple[str, ast.ClassDef] | None:
        """The class of `x` or `self.x` when its instances hold config values."""
        name = _target_name(expr)
        kind = None
        if name == "self" and cls is not None:
            kind = (module, cls)
        elif name and name.startswith("self.") and cls is not None:
            kind = self.attr_types.get(id(cls), {}).get(name[5:])
        elif name in local_types:
            kind = local_types[name]
        return kind if kind and self.class_taint.get(id(kind[1])) else None

    def _class_of(self, module: str, expr: ast.AST) -> tuple[str, ast.ClassDef] | None:
        if isinstance(expr, ast.Await):
            expr = expr.value
        if isinstance(expr, ast.Call):
            found = self._resolve(module, expr.func)
            if found and isinstance(found[1], ast.ClassDef):
                return found[0], found[1]
        return None

    def _resolve(self, module: str, func: ast.AST) -> tuple[str, ast.AST] | None:
        if isinstance(func, ast.Name):
            local = self.tree.definition(f"{module}.{func.id}")
            if local:
                return local
            dotted = self.tree.imports[module].get(func.id)
            return self.tree.definition(dotted) if dotted else None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            dotted = self.tree.imports[module].get(func.value.id)
            if dotted and dotted in self.tree.trees:
                return self.tree.definition(f"{dotted}.{func.attr}")
        return None

    def _callee(
        self,
        module: str,
        func: ast.AST,
        cls: ast.ClassDef | None,
        local_types: dict[str, tuple[str, ast.ClassDef]],
    ) -> tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, ast.ClassDef | None] | None:
        """(module, function node, its class or None) a call lands on, when it can be known."""
        owner: tuple[str, ast.ClassDef] | None = None
        name = None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.value.id == "self" and cls is not None:
                owner, name = (module, cls), func.attr
            elif func.value.id in local_types:
                owner, name = local_types[func.value.id], func.attr
        elif isinstance(func, ast.Attribute) and cls is not None:
            held = _target_name(func.value)  # self.fates.error(...): a class self.fates holds
            if held and held.startswith("self."):
                owner = self.attr_types.get(id(cls), {}).get(held[5:])
                name = func.attr
        if owner is None:
            found = self._resolve(module, func)
            if found is None:
                return None
            if isinstance(found[1], ast.ClassDef):
                owner, name = (found[0], found[1]), "__init__"
            else:
                return found[0], found[1], None
        for node in owner[1].body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return owner[0], node, owner[1]
        return None


def trace(tree: Tree) -> list[tuple[str, str]]:
    found = tree.definition("sparkops.batch.cli._run")
    if found is None:
        sys.exit("batch/cli.py has no _run(args): the trace's start moved; update the script")
    walker = Trace(tree)
    walker.walk(found[0], found[1], {"args"}, None)
    return walker.stops


def trace_figures(stops: list[tuple[str, str]]) -> dict[str, object]:
    visits: list[str] = []
    for file, _ in stops:
        if not visits or visits[-1] != file:
            visits.append(file)
    per_file = Counter(visits)
    top = per_file.most_common(1)[0] if per_file else ("-", 0)
    return {
        "stops": len(stops),
        "files": len(per_file),
        "returns": len(visits) - len(per_file),
        "most_visits": f"{top[1]} ({top[0]})",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", nargs="?", default="src", type=Path)
    parser.add_argument("--stops", action="store_true", help="list the config trace's stops")
    args = parser.parse_args()
    tree = Tree(args.src)
    lines = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in tree.files.items()}
    every = [
        p
        for p in (args.src / "sparkops").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    ]  # the share is of all of src/ (templates, samples too), as issue 20 counted it
    total = sum(len(p.read_bytes().splitlines()) for p in every)
    batch = sum(n for m, n in lines.items() if m.startswith("sparkops.batch"))
    nbatch = sum(1 for m in lines if m.startswith("sparkops.batch"))
    big = sorted(((n, m) for m, n in lines.items() if n > 500), reverse=True)
    dicts = sum(  # lines that name it, as `grep -c` counts
        sum("dict[str, Any]" in line for line in p.read_text(encoding="utf-8").splitlines())
        for p in tree.files.values()
    )
    print(f"src lines: {total:,}; batch: {batch:,} in {nbatch} .py files ({batch / total:.0%})")
    print("files over 500 lines: " + (", ".join(f"{m} {n}" for n, m in big) or "none"))
    print(f"dict[str, Any]: {dicts}")
    loops = cycles(tree.package_graph())
    print("package cycles: " + ("; ".join(" <-> ".join(g) for g in loops) or "none"))
    stops = trace(tree)
    print("config trace: " + ", ".join(f"{k} {v}" for k, v in trace_figures(stops).items()))
    if args.stops:
        for i, (file, name) in enumerate(stops, 1):
            print(f"  {i:3}. {file}: {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
