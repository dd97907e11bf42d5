"""``tool_choice`` forced (``"required"`` or a named function): the answer is tool calls, in the syntax the
template's model writes them, each naming a tool of the request with arguments valid for its ``parameters``.

The calls become a :class:`~lmchat.constraints.Constraint` of kind ``lark`` (an llguidance Lark grammar, the
arguments a ``%json`` schema per tool), so only a backend that enforces such grammars (the llama.cpp engine)
can force a call. The answer is then parsed as any other, by the template's own tool-call parser.
A tool-call format without a grammar here is refused: forcing it cannot be promised.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..constraints import Constraint
from ..errors import ConstraintUnsupported
from .registry import response_format

#: JSON written as the templates render calls: ``{"name": "f", "arguments": {"x": 1}}``
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def _hermes(call: str, parallel: bool) -> str:
    # Qwen2.5's system prompt: <tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>
    # a newline may follow the last call: a model that writes one after a tag can still end there
    calls = 'call ("\\n" call)* "\\n"?' if parallel else 'call "\\n"?'
    return f'start: {calls}\ncall: "<tool_call>\\n" args "\\n</tool_call>"\nargs: %json {call}'


#: the tool-call formats (:data:`lmchat.tools.FORMATS`) a call can be forced in, with their grammar
SYNTAXES = {"hermes": _hermes}


def forced_calls(tools: Sequence[dict[str, Any]], template: Any, *, names: Sequence[str] | None = None,
                 parallel: bool = False) -> Constraint:
    """One call (``parallel``: one or more) of ``tools`` (OpenAI's schemas, chat's nested shape or Responses'
    flat one), of those named ``names`` only when given, in ``template``'s tool-call syntax."""
    fmt = response_format(template).tools
    if fmt not in SYNTAXES:
        name = template if isinstance(template, str) else getattr(template, "registered_name", None)
        raise ConstraintUnsupported(
            f"a tool call cannot be forced with the template {name or type(template).__name__!r} yet: its tool-call "
            f"format {fmt!r} has no grammar (forced calls: {', '.join(SYNTAXES)} format: qwen2.5, qwen3, qwq, "
            "hermes); use tool_choice 'auto'", field="tool_choice")
    schemas = []
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, dict) else {}
        if names is not None and fn.get("name") not in names:
            continue
        params = fn.get("parameters") or {"type": "object"}
        schemas.append({"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
                        "properties": {"name": {"const": fn.get("name")}, "arguments": params}})
    if not schemas:
        raise ConstraintUnsupported("no tool to call: the request gives none of those chosen", field="tool_choice")
    call = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    grammar = SYNTAXES[fmt](json.dumps({**call, "x-guidance": JSON_OPTIONS}, ensure_ascii=False), parallel)
    return Constraint(kind="lark", grammar=grammar, name="tool_choice")
