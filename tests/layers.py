"""lmchat's import graph, read from the source (``ast``): which module imports which, and how.

An edge is *eager* when the import runs as the module is imported (top level, also inside
``try``/``if``/``with`` and class bodies) and *lazy* when it sits in a function. Imports under
``if TYPE_CHECKING:`` are no edges: they never run.
"""
from __future__ import annotations

import ast
from pathlib import Path

import attrs

PACKAGE = Path(__file__).resolve().parent.parent / "lmchat"


@attrs.frozen
class Edge:
    source: str
    target: str
    line: int
    eager: bool


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _absolute(source: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = source.split(".") if is_package else source.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(node: ast.AST, source: str, is_package: bool, known: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    origin = _absolute(source, is_package, node)
    # ``from pkg import mod`` needs the module pkg.mod; ``from pkg import name`` needs pkg's own code
    submodules = [f"{origin}.{alias.name}" for alias in node.names if f"{origin}.{alias.name}" in known]
    return submodules + ([origin] if len(submodules) < len(node.names) else [])


def edges_of(path: Path, known: set[str]) -> list[Edge]:
    source, is_package = module_name(path), path.name == "__init__.py"
    found: list[Edge] = []

    def visit(node: ast.AST, eager: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit(other, eager)
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                found.extend(Edge(source, target, child.lineno, eager)
                             for target in _targets(child, source, is_package, known)
                             if target in known and target != source)
            else:  # a function body runs when called, not when the module is imported
                visit(child, eager and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(path.read_text(encoding="utf-8")), True)
    return found


def graph() -> list[Edge]:
    mods = modules()
    known = set(mods)
    return [edge for path in mods.values() for edge in edges_of(path, known)]


def cycles(edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    out: dict[str, list[str]] = {}
    for e in edges:
        out.setdefault(e.source, []).append(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in out.get(v, []):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(out):
        if v not in index:
            connect(v)
    return found
