"""Calls written in Python syntax, read without running anything.

ChatGLM3 writes ``tool_call(location="beijing")`` and its reference code runs
``eval`` on it; Llama 3.1 writes built-in calls as ``brave_search.call(query="x")``.
Here the text is only *parsed* (``ast.parse``), each keyword value must be a
literal (``ast.literal_eval`` on its node: strings, numbers, lists, dicts,
booleans, None), and anything else (positional arguments, names, calls such as
``__import__('os')``) is refused with a reason.
"""
from __future__ import annotations

import ast

from ..jsontypes import JSON


def literal_call(code: str, function: str | None = None) -> tuple[str, dict[str, JSON]]:
    """``(name, kwargs)`` of ``function(k=v, ...)``, or of ``name.call(k=v, ...)`` when ``function`` is None.

    Raises ValueError saying why the text is not such a call.
    """
    try:
        tree = ast.parse(code.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ValueError(f"not a Python call ({type(exc).__name__})") from None
    call = tree.body
    if not isinstance(call, ast.Call):
        raise ValueError("not a Python call")
    name = _callee(call.func, function)
    if call.args:
        raise ValueError("positional arguments are not accepted (only name=literal)")
    kwargs: dict[str, JSON] = {}
    for keyword in call.keywords:
        if keyword.arg is None:
            raise ValueError("**arguments are not accepted")
        try:
            kwargs[keyword.arg] = ast.literal_eval(keyword.value)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            raise ValueError(f"argument {keyword.arg!r} is not a literal") from None
    return name, kwargs


def _callee(func: ast.expr, function: str | None) -> str:
    if function is not None:
        if isinstance(func, ast.Name) and func.id == function:
            return function
        raise ValueError(f"expected a call of {function}()")
    if isinstance(func, ast.Attribute) and func.attr == "call" and isinstance(func.value, ast.Name):
        return func.value.id
    raise ValueError("expected name.call(...)")
