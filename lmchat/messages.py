"""OpenAI-style messages: normalisation and the checks every template shares.

Normalisation mirrors what transformers 5.x does before rendering a chat
template, so built-in templates see exactly what the official Jinja sees:
keys whose value is ``None`` are dropped, and ``reasoning_content`` /
``thinking`` / ``reasoning`` are aliased to each other.
"""
from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import InvalidMessages

REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")

# Any: a message's fields are read by name in every template (content a string, a list of parts or None;
# tool_calls; reasoning...), in the templates' and tools' modules too; a TypedDict would change all their reads
# at once. A message is checked where it comes in (validation.validate_messages, normalize_message)
Message = dict[str, Any]

_ATOMIC = (str, int, float, bool, type(None))


# Any: a copy of any JSON-shaped value, as its caller typed it (typed by a TypeVar, it would need casts, which
# cost a call per container on this hot path); call_arguments and calls_as keep what they are given in the same way
def json_copy(value: Any) -> Any:
    """A deep copy of a JSON-shaped value (dicts, lists, text, numbers), several times faster than
    ``copy.deepcopy``; anything else is deep-copied as ``copy.deepcopy`` does."""
    if isinstance(value, _ATOMIC):
        return value
    kind = type(value)
    if kind is dict:
        return {k: v if isinstance(v, _ATOMIC) else json_copy(v) for k, v in value.items()}
    if kind is list:
        return [v if isinstance(v, _ATOMIC) else json_copy(v) for v in value]
    return copy.deepcopy(value)


def normalize_message(message: object, index: int) -> Message:
    """Return a deep, normalised copy of one message (the caller's object is never touched)."""
    if type(message) is not dict and not isinstance(message, Mapping):  # an ABC check costs more: dicts first
        raise InvalidMessages(f"expected a message object, got {type(message).__name__}", index=index)
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise InvalidMessages("missing or non-string role", index=index, field="role")
    out = {k: json_copy(v) for k, v in message.items() if v is not None}
    reasoning = next((out[k] for k in REASONING_KEYS if k in out), None)
    if reasoning is not None:
        out = {"thinking": reasoning, **out, "reasoning_content": reasoning}
    return out


def normalize_messages(messages: Iterable[object], start: int = 0) -> list[Message]:
    if type(messages) is not list and (isinstance(messages, (str, bytes)) or not isinstance(messages, Iterable)):
        raise InvalidMessages(f"expected a list of messages, got {type(messages).__name__}")
    return [normalize_message(m, start + i) for i, m in enumerate(messages)]


def text(message: Message, index: int, field: str = "content") -> str:
    """The string value of ``field``; templates that concatenate content need a string."""
    value = message.get(field)
    if isinstance(value, str):
        return value
    if value is None:
        raise InvalidMessages("missing content", index=index, field=field)
    raise InvalidMessages(f"expected a string, got {type(value).__name__}", index=index, field=field)


def optional_text(message: Message, index: int, field: str = "content") -> str:
    """Like :func:`text` but a missing field reads as ''."""
    if message.get(field) is None:
        return ""
    return text(message, index, field)


def flatten_text(content: object) -> str:
    """The text of content parts (``[{"type": "text", "text": ...}, ...]``); other parts are left out."""
    if isinstance(content, str):
        return content
    if not isinstance(content, (list, tuple)):
        return ""
    return "".join(p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str))


def call_arguments(value: Any) -> Any:
    """Tool-call arguments as templates render them, the one rule wherever they are read (a model's parsed
    call, a resent history, a Responses function_call item, a history's digest).

    A string holding a JSON object becomes that object. Anything else is kept as given: an object; text that
    is not valid JSON (a model's malformed call, rendered and compared as the text it is); JSON that is not an
    object (a list, a number: arguments are an object, so the text is what the model or client meant); JSON
    nested too deep to parse. Templates render ``arguments | tojson``: OpenAI's JSON text would print quoted
    and escaped, and no longer be the tokens the model wrote (vLLM converts the same way before rendering).
    """
    if not isinstance(value, str):
        return value
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        return value
    return parsed if isinstance(parsed, dict) else value


def calls_as(calls: list[Any], form: str) -> list[Any]:
    """OpenAI tool calls with each ``function.arguments`` in the form a template reads them
    (:attr:`~lmchat.templates.base.BaseTemplate.call_arguments`): ``"object"``, by :func:`call_arguments`;
    ``"text"``, the JSON text as given (the model's own, printed back as it wrote it), an object written as
    JSON. A call that is not an object with a function object is kept as it is (validation names what is wrong
    with it)."""
    out = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and "arguments" in function:
            args = function["arguments"]
            args = call_arguments(args) if form == "object" else args if isinstance(args, str) else _json_text(args)
            call = {**call, "function": {**function, "arguments": args}}
        out.append(call)
    return out


def in_call_form(messages: list[Message], form: str) -> list[Message]:
    """Messages whose tool calls are in ``form`` (:func:`calls_as`)."""
    return [{**m, "tool_calls": calls_as(m["tool_calls"], form)} if isinstance(m.get("tool_calls"), list) else m
            for m in messages]


def _json_text(value: object) -> object:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return value  # not JSON: validation names it
