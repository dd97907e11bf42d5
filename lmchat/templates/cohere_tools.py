"""Command-R's tool declarations: each tool as a Python function stub, read from JSON as Jinja reads it.

The official ``tool_use`` templates print every tool as ``def NAME(arg: type, ...) -> List[Dict]:`` with its
description and an ``Args:`` list in the docstring. Command R+'s template reads OpenAI tools (``function.parameters``
as JSON Schema, types mapped to Python names) or Cohere's own (``parameter_definitions``: a type string and a
``required`` flag per argument); Command-R v01's reads only Cohere's. Jinja's lookups are reproduced where the
schema is unusual: ``spec.items`` is the dict's ``items`` method (so an array is always ``List[Union[]]``), a
missing type is an empty ``Union[]``, and a type name the map does not know makes the official macro recurse
without end (an error here).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import TemplateRuleError
from ..jsontypes import JSON
from .render_utils import jstr


class _Missing:
    """What Jinja's lookup of an absent key gives (``Undefined``): falsy, printed as nothing."""

    def __bool__(self) -> bool:
        return False


MISSING = _Missing()
BASIC = {"string": "str", "number": "float", "integer": "int", "boolean": "bool"}


def attr(value: JSON, key: str) -> JSON:
    """``value.key`` in Jinja for a JSON value: a dict's entry, else undefined."""
    return value.get(key, MISSING) if isinstance(value, dict) else MISSING


def printed(value: JSON) -> str:
    """``{{ value }}``: nothing for an undefined value."""
    return "" if value is MISSING else jstr(value)


def _bad(reason: str) -> TemplateRuleError:
    return TemplateRuleError("tool-declaration", reason, field="tools")


def concat(value: JSON, what: str) -> str:
    """A value the official template joins with ``+``: it must be a string."""
    if not isinstance(value, str):
        raise _bad(f"{what} must be a string (the official template concatenates it)")
    return value


def py_type(spec: JSON) -> str:
    """The official ``json_to_python_type`` macro."""
    return _of_type(attr(spec, "type"), spec)


def _of_type(kind: JSON, spec: JSON) -> str:
    if isinstance(kind, str) and kind in BASIC:
        return BASIC[kind]
    if kind == "array":
        return "List[Union[]]"  # ``json_spec.items`` is the dict's items method, which has no type
    if kind == "object":
        values = attr(spec, "additionalProperties")
        if values is MISSING:  # the macro reads ``.type`` of an undefined value, which Jinja refuses
            raise _bad("an object parameter without additionalProperties: the official template fails on it")
        return "Dict[str, " + py_type(values) + "]"
    if kind is MISSING or kind == "":
        return "Union[]"  # undefined and '' iterate as nothing
    if isinstance(kind, str):
        raise _bad(f"parameter type {kind!r}: the official template recurses without end on a type it does not map")
    if isinstance(kind, (list, dict)):
        return "Union[" + ",".join(py_type({"type": t}) for t in kind) + "]"
    # "Any": the Python type name the official template prints (tests/any_count.py counts the string)
    return "Any"


def _contains(container: JSON, key: str) -> bool:
    """``key in container`` as Jinja tests it (an undefined container holds nothing)."""
    if container is MISSING:
        return False
    if isinstance(container, (list, dict, str)):
        return key in container
    raise _bad(f"'required' must be a list, got {type(container).__name__}")


def _mapping(value: JSON, what: str, *, missing_ok: bool) -> dict[str, Any]:
    if value is MISSING and missing_ok:
        return {}
    if not isinstance(value, dict):
        raise _bad(f"{what} must be an object")
    return value


def _stub(name: JSON, params: list[tuple[str, str, bool, str]], description: JSON) -> str:
    """One tool: ``params`` are (name, type, optional, description)."""
    sig = ", ".join(f"{p}: Optional[{t}] = None" if opt else f"{p}: {t}" for p, t, opt, _ in params)
    out = f"```python\ndef {concat(name, 'a tool name')}({sig}) -> List[Dict]:\n    \"\"\"{printed(description)}"
    if params:
        args = "\n        ".join(f"{p} (Optional[{t}]): {d}" if opt else f"{p} ({t}): {d}" for p, t, opt, d in params)
        out += "\n\n    Args:\n        " + args
    return out + '\n    """\n    pass\n```'


def _new_tool(tool: JSON) -> str:
    """Command R+'s ``new_tool_parser``: an OpenAI tool (or its bare function) with a JSON Schema."""
    fn = tool["function"] if isinstance(tool, dict) and "function" in tool else tool
    name = concat(attr(fn, "name"), "a tool name")
    parameters = attr(fn, "parameters")
    if parameters is MISSING:
        raise _bad(f"tool {name!r} has no parameters")
    properties = _mapping(attr(parameters, "properties"), "parameters.properties", missing_ok=True)
    required = attr(parameters, "required")
    params = []
    for p, fields in properties.items():
        description = concat(attr(fields, "description"), f"the description of argument {p!r}")
        params.append((p, py_type(fields), not _contains(required, p), description))
    return _stub(name, params, attr(fn, "description"))


def _old_tool(tool: JSON, strict: bool) -> str:
    """Cohere's tool format: ``parameter_definitions`` maps each argument to its type, description and
    ``required`` flag (``strict``: v01's template calls ``.items()``, which needs them)."""
    name = concat(attr(tool, "name"), "a tool name")
    definitions = _mapping(attr(tool, "parameter_definitions"), "parameter_definitions", missing_ok=not strict)
    params = []
    for p, fields in definitions.items():
        optional = not attr(fields, "required")
        kind = attr(fields, "type")
        kind = concat(kind, f"the type of argument {p!r}") if optional else printed(kind)
        description = concat(attr(fields, "description"), f"the description of argument {p!r}")
        params.append((p, kind, optional, description))
    return _stub(name, params, attr(tool, "description"))


def _listed(tools: JSON) -> Iterable[JSON]:
    if isinstance(tools, (list, tuple, dict, str)):
        return tools
    raise _bad(f"tools must be a list, got {type(tools).__name__}")


def plus_tools(tools: JSON) -> str:
    """Command R+'s declarations: Cohere's format when any tool has ``parameter_definitions``, else OpenAI's."""
    listed = list(_listed(tools))
    cohere = any(isinstance(t, dict) and "parameter_definitions" in t for t in listed)
    return "\n\n".join(_old_tool(t, strict=False) if cohere else _new_tool(t) for t in listed)


def v01_tools(tools: JSON) -> str:
    """Command-R v01's declarations: Cohere's format only (an OpenAI tool has no ``name`` at its top)."""
    return "\n\n".join(_old_tool(t, strict=True) for t in _listed(tools))
