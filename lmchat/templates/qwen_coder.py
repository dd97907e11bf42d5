"""Qwen3-Coder: ChatML with its own tool syntax, tools listed as XML (``<tools><function><name>...``) and calls
written as ``<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>``
(parsed by :mod:`lmchat.tools.qwen3_coder`). Qwen2.5, Qwen3 and QwQ are in :mod:`.qwen`.
"""
from __future__ import annotations

from typing import Any

from ..errors import InvalidMessages
from ..jsontypes import JSON
from ..registry import template
from .base import stops
from .chat import Chat
from .chatml import IM_END, IM_START, ChatML
from .render_utils import jstr, tojson

CODER_SYSTEM = "You are Qwen, a helpful AI assistant that can interact with a computer to solve tasks."
CODER_TOOLS_OUTRO = (
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested "
    "within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the function call, "
    "but NOT after\n- If there is no function call available, answer the question like normal with your current "
    "knowledge and do not tell the user about function calls\n</IMPORTANT>"
)
_MISSING = object()


# Any here: a value's attribute as Jinja reads it, read further by the template: any value
def _field(obj: JSON, key: str) -> Any:
    """Jinja's ``obj.key`` on JSON values: the item of a mapping, else undefined (``_MISSING``)."""
    return obj.get(key, _MISSING) if isinstance(obj, dict) else _MISSING


def _concat(value: JSON) -> str:
    """What Jinja's ``~`` and ``| string`` print: ``str()``, nothing for an undefined value."""
    return "" if value is _MISSING else jstr(value)


def _coder_value(value: JSON) -> str:
    """Qwen3-Coder's rendering of a value: JSON for mappings and lists, ``| string`` for the rest."""
    return tojson(value) if isinstance(value, (dict, list)) else jstr(value)


def _extra_keys(fields: JSON, handled: tuple[str, ...]) -> str:
    """Qwen3-Coder's ``render_extra_keys`` macro: every other key of a mapping as ``<key>value</key>``."""
    if not isinstance(fields, dict):
        return ""
    return "".join(f"\n<{k}>{_coder_value(v)}</{k}>" for k, v in fields.items() if k not in handled)


def _trimmed(value: JSON) -> str:
    return jstr(value).strip()


def coder_tool(tool: JSON) -> str:
    """One function of Qwen3-Coder's ``<tools>`` list, in its XML layout."""
    function = _field(tool, "function")
    tool = tool if function is _MISSING else function
    out = f"\n<function>\n<name>{_concat(_field(tool, 'name'))}</name>"
    if (description := _field(tool, "description")) is not _MISSING:
        out += f"\n<description>{_trimmed(description)}</description>"
    out += "\n<parameters>"
    parameters = _field(tool, "parameters")
    properties = _field(parameters, "properties")
    if isinstance(properties, dict):
        for name, fields in properties.items():
            out += f"\n<parameter>\n<name>{name}</name>"
            if (kind := _field(fields, "type")) is not _MISSING:
                out += f"\n<type>{jstr(kind)}</type>"
            if (description := _field(fields, "description")) is not _MISSING:
                out += f"\n<description>{_trimmed(description)}</description>"
            out += _extra_keys(fields, ("name", "type", "description")) + "\n</parameter>"
    out += _extra_keys(parameters, ("type", "properties")) + "\n</parameters>"
    return out + _extra_keys(tool, ("type", "name", "description", "parameters")) + "\n</function>"


def coder_call(call: JSON, i: int) -> str:
    """One call of an answer: ``<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>...``."""
    function = _field(call, "function")
    fn = call if function is _MISSING else function
    name = _field(fn, "name")
    if not isinstance(name, str):
        raise InvalidMessages("a tool call needs a string name", index=i, field="tool_calls")
    out = f"\n<tool_call>\n<function={name}>\n"
    arguments = _field(fn, "arguments")
    if arguments is not _MISSING:
        if not isinstance(arguments, dict):  # the template iterates the arguments' items
            raise InvalidMessages("tool call arguments must be an object", index=i, field="tool_calls")
        out += "".join(f"<parameter={k}>\n{_coder_value(v)}\n</parameter>\n" for k, v in arguments.items())
    return out + "</function>\n</tool_call>"


@template("qwen3-coder", "qwen3-coder-30b-a3b-instruct", "qwen3-coder-480b-a35b-instruct")
class Qwen3Coder(ChatML):
    """Qwen3-Coder: ChatML with tools and calls in XML (``<function=NAME>``, ``<parameter=KEY>``).

    Tools are listed as ``<function>`` elements in the system message (a default
    system prompt comes with them); argument values are written as they are
    (strings) or as JSON. Consecutive tool results share one ``user`` block.
    """

    official = "Qwen__Qwen3-Coder-30B-A3B-Instruct"
    hyperparameter_source = (
        "Qwen3-Coder-30B-A3B-Instruct generation_config.json and model card: temperature 0.7, top_p 0.8, top_k 20, "
        "repetition_penalty 1.05; 256K (262,144) native context"
    )
    roles = None
    supports_tools = True
    tool_format = "qwen3_coder"

    session_len: int = 262144
    top_k: int | None = 20
    temperature: float = 0.7
    repetition_penalty: float = 1.05
    stop_words: tuple[str, ...] | None = stops(IM_END, "<|endoftext|>")

    def header(self, chat: Chat) -> str:
        system: str | None = None
        if chat.role(0) == "system" and "content" in chat.messages[0]:  # a missing content is undefined
            system = chat.text(0)
        if not chat.tools:
            return "" if system is None else f"{IM_START}system\n{system}{IM_END}\n"
        listed = "".join(coder_tool(t) for t in chat.tools)
        intro = "\n\n# Tools\n\nYou have access to the following functions:\n\n<tools>"
        return f"{IM_START}system\n{CODER_SYSTEM if system is None else system}{intro}{listed}{CODER_TOOLS_OUTRO}" \
               f"{IM_END}\n"

    def piece(self, chat: Chat, i: int) -> str:
        first = 1 if chat.role(0) == "system" else 0  # the official loop skips a leading system message
        if i < first:
            return ""
        m = chat.messages[i]
        role = m["role"]
        calls = m.get("tool_calls")
        if role == "assistant" and isinstance(calls, (list, str, dict)) and calls:
            if not isinstance(calls, list):
                raise InvalidMessages("tool_calls must be a list", index=i, field="tool_calls")
            content = m.get("content")
            head = f"\n{content.strip()}\n" if isinstance(content, str) and content.strip() else ""
            return f"{IM_START}assistant{head}" + "".join(coder_call(c, i) for c in calls) + f"{IM_END}\n"
        if role == "tool":
            opening = f"{IM_START}user\n" if i > first and chat.role(i - 1) != "tool" else ""
            closing = f"{IM_END}\n" if chat.role(i + 1) != "tool" else ""
            content = jstr(m["content"]) if "content" in m else ""
            return f"{opening}<tool_response>\n{content}\n</tool_response>\n{closing}"
        return f"{IM_START}{role}\n{chat.text(i)}{IM_END}\n"
