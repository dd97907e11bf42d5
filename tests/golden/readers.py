"""The test files that can see the corpus: those importing ``tests/oracle.py``, directly or not.

``LMCHAT_CONFORMANCE`` and ``LMCHAT_SEEDS`` act only through ``tests/oracle.py``
(lmchat itself never reads them), so these files are the whole of what a run with
the corpus hidden can change. ``.ci/run`` runs them a second time that way:

    python -m tests.golden.readers    # one path per line, relative to the repository
"""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def imports(path: Path) -> set[str]:
    """The ``tests`` modules a file imports (``tests.golden`` counts as ``golden``), by their first name."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level >= 1:  # from . import x / from .x import y
            out.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests."):
            out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[1] for a in node.names if a.name.startswith("tests."))
    return out


def readers() -> list[str]:
    graph = {p.stem: imports(p) for p in TESTS.glob("*.py")}
    graph["golden"] = {"oracle"}
    seeing = {"oracle"}
    while True:
        more = {name for name, deps in graph.items() if deps & seeing} - seeing
        if not more:
            break
        seeing |= more
    root = TESTS.parent
    return sorted(str((TESTS / f"{n}.py").relative_to(root)) for n in seeing if n.startswith("test_"))


if __name__ == "__main__":
    print("\n".join(readers()))
