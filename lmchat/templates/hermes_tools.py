"""The Hermes ``tool_use`` template (Hermes 2 Pro and Hermes 3 ship the same text), rendered from code.

transformers renders it instead of the default one whenever ``tools`` are given (``[]`` too). It opens with a
system block that lists each tool as a JSON-looking line whose description is a Python signature
(``name(city: str, days: int) -> dict - description`` and an ``Args:`` list) written by the template's
``json_to_python_type`` macro, then the pydantic schema of a call and the ``<tool_call>`` instructions.
Calls render as ``<|im_start|>assistant`` and, per call, ``\\n<tool_call>\\n{"name": "NAME", "arguments":
ARGS}\\n</tool_call>`` (the content of such a message is not rendered); consecutive tool results share one
``<|im_start|>tool`` block of ``<tool_response>`` elements. Values are read from the data as Jinja reads them.
:mod:`.hermes` holds the templates.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping

from ..errors import InvalidMessages, TemplateConfigError
from ..jsontypes import JSON
from .chat import Chat
from .render_utils import jstr, tojson

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
INTRO = (
    "You are a function calling AI model. You are provided with function signatures within <tools></tools> XML "
    "tags. You may call one or more functions to assist with the user query. Don't make assumptions about what "
    "values to plug into functions. Here are the available tools: <tools> "
)
OUTRO = (
    " </tools>"
    'Use the following pydantic model json schema for each tool call you will make: {"properties": {"name": '
    '{"title": "Name", "type": "string"}, "arguments": {"title": "Arguments", "type": "object"}}, "required": '
    '["name", "arguments"], "title": "FunctionCall", "type": "object"}}\n'
    "For each function call return a json object with function name and arguments within <tool_call></tool_call> "
    "XML tags as follows:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-dict>}\n'
    f"</tool_call>{IM_END}\n"
)
BASIC_TYPES = {"string": "str", "number": "float", "integer": "int", "boolean": "bool"}


class _Undefined:
    """Jinja's Undefined where the macro reads it: falsy, iterable and empty, printed as nothing."""

    def __bool__(self) -> bool:
        return False

    def __iter__(self) -> Iterator[object]:
        return iter(())


UNDEFINED = _Undefined()
#: what ``json_spec|items`` passes for an array's items: a generator, in which every attribute is undefined
_PAIRS = object()


def _get(value: JSON, key: str) -> JSON:
    """``value.key`` as Jinja reads it from JSON data: the key of a mapping, else undefined."""
    return value[key] if isinstance(value, Mapping) and key in value else UNDEFINED


def _text(value: JSON, where: str) -> str:
    """An operand of Jinja's ``+`` on text: only a string works (undefined and other types raise)."""
    if not isinstance(value, str):
        what = "a missing value" if value is UNDEFINED else f"a {type(value).__name__}"
        raise TemplateConfigError(f"expected a string, got {what}", field=where)
    return value


def python_type(spec: JSON, depth: int = 0) -> str:
    """The ``json_to_python_type`` macro: a JSON schema as the Python type the tool's signature shows.

    Read as Jinja reads it: an array's items are passed as ``spec|items`` (a generator, typed ``Union[]``), a
    type the macro does not know is iterated as a union (a string by its characters, which recurse for ever).
    """
    kind = _get(spec, "type")
    if isinstance(kind, str) and kind in BASIC_TYPES:
        return BASIC_TYPES[kind]
    if kind == "array":
        return "list[" + python_type(_PAIRS, depth + 1) + "]"
    if kind == "object":
        extra = _get(spec, "additionalProperties")
        return "dict" if extra is UNDEFINED else "dict[str, " + python_type(extra, depth + 1) + "]"
    if kind is UNDEFINED or isinstance(kind, (str, list, tuple, Mapping)):
        if depth > 50 or (isinstance(kind, str) and len(kind) == 1):
            # the official macro recurses for ever on a one-character type (Jinja raises RecursionError)
            raise TemplateConfigError(f"type {kind!r} is not one the template can print", field="tools")
        return "Union[" + ",".join(python_type({"type": t}, depth + 1) for t in kind) + "]"
    # "Any": the Python type name the official template prints (tests/any_count.py counts the string)
    return "Any"


def _properties(parameters: JSON, where: str) -> list[tuple[JSON, JSON]]:
    """``tool.parameters.properties|items``: an undefined ``parameters`` raises, undefined properties are none."""
    if parameters is UNDEFINED:
        raise TemplateConfigError("a tool without parameters ('properties' of an undefined value)", field=where)
    properties = _get(parameters, "properties")
    if properties is UNDEFINED:
        return []
    if not isinstance(properties, Mapping):
        raise TemplateConfigError("parameters.properties must be an object", field=where)
    return list(properties.items())


def tool_line(tool: JSON) -> str:
    """One tool as the template lists it."""
    if _get(tool, "function") is not UNDEFINED:
        tool = _get(tool, "function")
    name = _text(_get(tool, "name"), "tools")
    properties = _properties(_get(tool, "parameters"), "tools")
    returns = _get(tool, "return")
    out = ['{"type": "function", "function": {"name": "', name, '", "description": "', name, "("]
    out.append(", ".join(_text(k, "tools") + ": " + python_type(v) for k, v in properties))
    out.append(")")
    if returns is not UNDEFINED:
        out.append(" -> " + python_type(returns))
    out.append(" - " + _text(_get(tool, "description"), "tools") + "\n\n")
    if properties:
        out.append("    Args:\n")
    for key, spec in properties:
        description = _get(spec, "description")
        trimmed = "" if description is UNDEFINED else jstr(description).strip()
        out.append("        " + _text(key, "tools") + "(" + python_type(spec) + "): " + trimmed)
    if returns is not UNDEFINED and _get(returns, "description") is not UNDEFINED:
        out.append("\n    Returns:\n        " + _text(_get(returns, "description"), "tools"))
    out.append('", "parameters": ')
    out.append("{}" if not properties else _json(_get(tool, "parameters"), "tools"))
    out.append("}")
    return "".join(out)


def _json(value: JSON, where: str, index: int | None = None) -> str:
    try:
        return tojson(value)
    except (TypeError, ValueError) as exc:
        if index is None:
            raise TemplateConfigError(f"not JSON: {exc}", field=where) from None
        raise InvalidMessages(f"not JSON: {exc}", index=index, field=where) from None


def _iterate(value: JSON, where: str, index: int | None = None) -> list[JSON]:
    """What ``{% for x in value %}`` visits (a mapping's keys, a string's characters)."""
    if isinstance(value, (str, list, tuple, Mapping)):
        return list(value)
    if index is None:
        raise TemplateConfigError(f"cannot iterate a {type(value).__name__}", field=where)
    raise InvalidMessages(f"cannot iterate a {type(value).__name__}", index=index, field=where)


def tools_system(tools: JSON) -> str:
    """The system block that opens every rendering with tools."""
    return IM_START + "system\n" + INTRO + "\n".join(tool_line(t) for t in _iterate(tools, "tools")) + OUTRO


def _call(call: JSON, i: int) -> str:
    if _get(call, "function") is not UNDEFINED:
        call = _get(call, "function")
    name = _get(call, "name")
    out = '\n<tool_call>\n{"name": "' + ("" if name is UNDEFINED else jstr(name)) + '", '
    arguments = _get(call, "arguments")
    if arguments is not UNDEFINED:
        out += '"arguments": ' + (arguments if isinstance(arguments, str) else _json(arguments, "tool_calls", i))
    return out + "}\n</tool_call>"


def tool_use_piece(chat: Chat, i: int) -> str:
    """Message ``i`` as the tool_use template renders it (other roles than these four render nothing)."""
    message = chat.messages[i]
    role = message["role"]
    if role in ("user", "system") or (role == "assistant" and "tool_calls" not in message):
        return f"{IM_START}{role}\n{chat.text(i)}{IM_END}\n"
    if role == "assistant":
        calls = _iterate(message["tool_calls"], "tool_calls", i)
        return IM_START + "assistant" + "".join(_call(c, i) for c in calls) + IM_END + "\n"
    if role != "tool":
        return ""
    last = i == len(chat.messages) - 1
    out = f"{IM_START}tool\n" if i > 0 and chat.role(i - 1) != "tool" else ""
    out += "<tool_response>\n" + jstr(message.get("content", "")) + "\n</tool_response>" + ("" if last else "\n")
    if last or chat.role(i + 1) != "tool":
        out += IM_END
    return out
