"""No function of lmchat takes more than 9 parameters (issue 40): options that belong together are a record
(``SessionPolicy``, ``ManagerLimits``, the llama.cpp backend's ``KVTiers``...), not one more keyword."""
from __future__ import annotations

import ast
from pathlib import Path

import lmchat

MOST = 9


def counts(path: Path) -> dict[str, int]:
    """Each function of the module (``Class.method``, ``outer.inner``) and how many parameters it takes: every
    name, ``*args`` and ``**kwargs``, but a method's ``self`` or ``cls``."""
    out: dict[str, int] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = child.args
                names = [a.arg for a in (*args.posonlyargs, *args.args)]
                skip = 1 if isinstance(node, ast.ClassDef) and names[:1] in (["self"], ["cls"]) else 0
                out[prefix + child.name] = (len(names) - skip + len(args.kwonlyargs) + (args.vararg is not None)
                                            + (args.kwarg is not None))
                walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(ast.parse(path.read_text(encoding="utf-8")), "")
    return out


def test_the_count_sees_methods_nested_functions_and_every_kind_of_parameter(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("class C:\n    def m(self, a, /, b, *args, c, **kw):\n        def inner(x): ...\n"
                      "    @classmethod\n    def k(cls): ...\ndef f(self, a): ...\n")
    assert counts(module) == {"C.m": 5, "C.m.inner": 1, "C.k": 0, "f": 2}


def test_no_function_takes_more_than_nine_parameters():
    root = Path(lmchat.__file__).parent
    over = {f"{path.relative_to(root.parent)}: {name}": n
            for path in sorted(root.rglob("*.py")) for name, n in counts(path).items() if n > MOST}
    assert not over, f"more than {MOST} parameters (group options that belong together in a record): {over}"
