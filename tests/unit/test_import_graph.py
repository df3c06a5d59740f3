"""The packages of src/sparkops import each other without a loop (a layer cut: a package
never imports one that imports it back, directly or through others). Imports inside
functions count: a deferred import is still a dependency."""

from __future__ import annotations

import ast
from pathlib import Path

import sparkops

SRC = Path(sparkops.__file__).parent


def _unit(module: str) -> str:
    """The node an import lands on: sparkops.<package> for a subpackage, sparkops.<module>
    for a top-level module (sparkops.errors), sparkops for the package itself (a name
    imported from it, `from sparkops import __version__`)."""
    parts = module.split(".")
    if len(parts) >= 2 and ((SRC / parts[1]).is_dir() or (SRC / f"{parts[1]}.py").is_file()):
        return ".".join(parts[:2])
    return "sparkops"


def _module_of(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_graph() -> dict[str, set[str]]:
    """sparkops unit -> the sparkops units it imports (itself left out)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        module = _module_of(path)
        source = _unit(module)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges = graph.setdefault(source, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            for target in targets:
                if target.startswith("sparkops.") and _unit(target) != source:
                    edges.add(_unit(target))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one unit (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_loop() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_deferred_and_relative_imports() -> None:
    graph = package_graph()
    assert "sparkops.errors" in graph["sparkops.render"]
    assert "sparkops.profiles" in graph["sparkops.plan"]  # plan/cli.py, inside a function
    assert "sparkops.local_stack" in graph["sparkops.batch"]
    assert "sparkops.batch" not in graph["sparkops.pipeline"]
    assert len(graph) > 10


def test_sparkops_packages_import_each_other_without_a_loop() -> None:
    graph = package_graph()
    loops = cycles(graph)
    detail = [
        " <-> ".join(loop)
        + ": "
        + "; ".join(f"{a} imports {b}" for a in loop for b in sorted(graph[a]) if b in loop)
        for loop in loops
    ]
    assert not loops, detail
