"""Gemma 4's own notation for values, tool declarations and tool results, as its official template writes them.

Strings are quoted with the ``<|"|>`` token, keys are bare (or quoted, in declared enums and defaults), mappings
are sorted by key as Jinja's ``dictsort`` sorts them (case-insensitively), and a declaration is the
``format_function_declaration`` / ``format_parameters`` macros: read from JSON data as Jinja reads it (an
undefined key is falsy and prints nothing, a mapping's ``items`` is its bound method). :mod:`.gemma4` is the
template.
"""
from __future__ import annotations

from collections.abc import Mapping

from ..errors import InvalidMessages
from ..jsontypes import JSON
from .gpt_oss_tools import UNDEFINED, _get
from .render_utils import jstr

QUOTE = '<|"|>'
#: the keys ``format_parameters`` leaves out when it lists an object schema's own keys as its properties
STANDARD_KEYS = ("description", "type", "properties", "required", "nullable")


def dictsort(value: JSON, where: str) -> list[tuple[JSON, JSON]]:
    """Jinja's ``value | dictsort``: a mapping's items by key, case-insensitively (stable for equal keys)."""
    if not isinstance(value, Mapping):
        raise InvalidMessages(f"{where}: expected an object, got {type(value).__name__}", field=where)
    return sorted(value.items(), key=lambda kv: kv[0].lower() if isinstance(kv[0], str) else kv[0])


def iterate(value: JSON, where: str) -> list[JSON]:
    """What a Jinja ``for`` goes over: a list's items, a mapping's keys, a string's characters."""
    if isinstance(value, (list, tuple, str)):
        return list(value)
    if isinstance(value, Mapping):
        return list(value)
    raise InvalidMessages(f"{where}: cannot iterate over a {type(value).__name__}", field=where)


def text(value: JSON) -> str:
    """``{{ value }}``: nothing for an undefined value, else ``str()``."""
    return "" if value is UNDEFINED else jstr(value)


def upper(value: JSON) -> str:
    """``value | upper``: Jinja stringifies first (an undefined value is '')."""
    return text(value).upper()


def is_sequence(value: JSON) -> bool:
    """Jinja's ``is sequence`` on JSON data: text, lists and mappings (and an undefined value) are."""
    return value is UNDEFINED or isinstance(value, (str, list, tuple, Mapping))


def argument(value: JSON, escape_keys: bool = True) -> str:
    """The ``format_argument`` macro: a value in Gemma's notation."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return QUOTE + value + QUOTE
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        items = [(QUOTE + jstr(k) + QUOTE if escape_keys else jstr(k)) + ":" + argument(v, escape_keys)
                 for k, v in dictsort(value, "arguments")]
        return "{" + ",".join(items) + "}"
    if is_sequence(value):  # an undefined value iterates as empty: '[]'
        listed = [] if value is UNDEFINED else iterate(value, "arguments")
        return "[" + ",".join(argument(v, escape_keys) for v in listed) + "]"
    return jstr(value)


def quoted_list(value: JSON, where: str) -> str:
    """``[<|"|>a<|"|>,<|"|>b<|"|>]``: a ``required`` list."""
    return "[" + ",".join(QUOTE + jstr(item) + QUOTE for item in iterate(value, where)) + "]"


def _items(items: Mapping[str, JSON]) -> str:
    """An array schema's ``items``, key by key (``None`` values left out)."""
    out = []
    for key, value in dictsort(items, "items"):
        if value is None:
            continue
        if key == "properties":
            inner = parameters(value) if isinstance(value, Mapping) else ""
            out.append("properties:{" + inner + "}")
        elif key == "required":
            out.append("required:" + quoted_list(value, "items.required"))
        elif key == "type":
            if isinstance(value, str):
                out.append("type:" + argument(value.upper()))
            else:
                out.append("type:" + argument([jstr(v).upper() for v in iterate(value, "items.type")]))
        else:
            out.append(jstr(key) + ":" + argument(value))
    return ",".join(out)


def parameters(properties: JSON, filter_keys: bool = False) -> str:
    """The ``format_parameters`` macro: each property as ``name:{description:...,type:<|"|>T<|"|>}``."""
    out = []
    for key, value in dictsort(properties, "properties"):
        if filter_keys and key in STANDARD_KEYS:
            continue
        fields: list[str] = []
        description = _get(value, "description")
        if description:
            fields.append("description:" + QUOTE + jstr(description) + QUOTE)
        kind = upper(_get(value, "type"))
        if kind == "STRING":
            enum = _get(value, "enum")
            if enum:
                fields.append("enum:" + argument(enum))
        elif kind == "ARRAY":
            items = _get(value, "items")
            if isinstance(items, Mapping) and items:
                fields.append("items:{" + _items(items) + "}")
        if _get(value, "nullable"):
            fields.append("nullable:true")
        if kind == "OBJECT":
            nested = _get(value, "properties")
            if isinstance(nested, Mapping):
                fields.append("properties:{" + parameters(nested) + "}")
            elif isinstance(value, Mapping):
                fields.append("properties:{" + parameters(value, filter_keys=True) + "}")
            required = _get(value, "required")
            if required:
                fields.append("required:" + quoted_list(required, "required"))
        fields.append("type:" + QUOTE + kind + QUOTE + "}")
        out.append(jstr(key) + ":{" + ",".join(fields))
    return ",".join(out)


def declaration(tool: JSON, index: int) -> str:
    """The ``format_function_declaration`` macro, trimmed: ``declaration:NAME{description:...,parameters:{...}}``.

    As upstream, the parameters' brace is closed only by their ``type`` and the response's only by an object type.
    """
    function = _get(tool, "function")
    if not isinstance(function, Mapping):
        raise InvalidMessages(f"tools[{index}] has no function object", field="tools")
    out = ["declaration:", text(_get(function, "name")), "{description:", QUOTE,
           text(_get(function, "description")), QUOTE]
    params = _get(function, "parameters")
    if params:
        out.append(",parameters:{")
        properties = _get(params, "properties")
        if properties:
            out.append("properties:{" + parameters(properties) + "},")
        required = _get(params, "required")
        if required:
            out.append("required:" + quoted_list(required, "parameters.required") + ",")
        kind = _get(params, "type")
        if kind:
            out.append("type:" + QUOTE + upper(kind) + QUOTE + "}")
    if "response" in function:
        response = function["response"]
        out.append(",response:{")
        description = _get(response, "description")
        if description:
            out.append("description:" + QUOTE + jstr(description) + QUOTE + ",")
        if upper(_get(response, "type")) == "OBJECT":
            out.append("type:" + QUOTE + "OBJECT" + QUOTE + "}")
    out.append("}")
    return "".join(out).strip()


def tool_response(name: str, response: JSON) -> str:
    """The ``format_tool_response_block`` macro: ``<|tool_response>response:NAME{...}<tool_response|>``."""
    if isinstance(response, Mapping):
        body = ",".join(jstr(k) + ":" + argument(v, escape_keys=False) for k, v in dictsort(response, "response"))
    else:
        body = "value:" + argument(response, escape_keys=False)
    return "<|tool_response>response:" + name + "{" + body + "}<tool_response|>"
