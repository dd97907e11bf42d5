"""How often lmchat says ``Any``, per 1,000 lines (issue 40: at most 14).

An occurrence is a use of the name in code (``Any``, ``typing.Any``, also inside a quoted
annotation); the import that brings it, docstrings and comments are no occurrences. Lines are
all lines of lmchat's ``.py`` files, as the issue counted them (31.4k lines, 879 uses, 28).
Run ``python tests/any_count.py [-v]`` for the figure (``-v``: per file, most first).
"""
from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "lmchat"


def _uses(tree: ast.AST) -> int:
    count = 0
    for node in ast.walk(tree):
        if (isinstance(node, ast.Name) and node.id == "Any") or (
                isinstance(node, ast.Attribute) and node.attr == "Any"):
            count += 1
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "Any" in node.value:
            count += _quoted(node.value)
    return count


def _quoted(text: str) -> int:
    """Uses inside a string that parses as an annotation (docstrings and prose do not)."""
    try:
        return _uses(ast.parse(text, mode="eval"))
    except SyntaxError:
        return 0


def per_file() -> Counter[str]:
    return Counter({str(path.relative_to(PACKAGE.parent)): _uses(ast.parse(path.read_text()))
                    for path in sorted(PACKAGE.rglob("*.py"))})


def lines() -> int:
    return sum(len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py"))


def per_thousand() -> tuple[int, int, float]:
    uses, total = sum(per_file().values()), lines()
    return uses, total, 1000 * uses / total


if __name__ == "__main__":
    uses, total, rate = per_thousand()
    print(f"Any: {uses} uses in {total} lines of lmchat: {rate:.1f} per 1,000 lines")
    if "-v" in sys.argv[1:]:
        for name, count in per_file().most_common():
            if count:
                print(f"{count:5d} {name}")
