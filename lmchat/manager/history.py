"""Resent histories: OpenAI clients send the whole conversation on every request.

With a session id, the manager compares the sent conversation with the
session's messages: when it extends them, only the new messages become the
turn (the engine keeps its cache); otherwise the session is replaced by the
sent conversation (atomically: the store keeps the old one until the new one
is saved).

Messages are compared as the client sees them, not byte for byte: the
visible content (an answer's reasoning and tool-call markup are not part of
it), stripped of edge whitespace (clients trim), and tool calls by name and
parsed arguments; tool call ids are not compared (the session keeps its
own). Each message is reduced to a digest once: a held answer is parsed when
it is committed or when the session is loaded, never again per request.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..messages import call_arguments, flatten_text, with_object_arguments
from ..tools import parse_response


def digest(message: Mapping[str, Any], template: Any = None, tools: Any = None) -> str:
    """What a client sees of ``message``, hashed; ``template`` parses a held raw answer."""
    role = message.get("role")
    content, calls = flatten_text(message.get("content")), message.get("tool_calls") or []
    if role == "assistant" and not calls and template is not None:  # a plain answer is held as the model wrote it
        parsed = parse_response(template, content, tools=tools)
        content, calls = parsed.content, parsed.tool_calls
    visible = [role, content.strip(), [_call(c) for c in calls if isinstance(c, Mapping)]]
    return hashlib.sha256(json.dumps(visible, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:32]


def _call(call: Mapping[str, Any]) -> list[Any]:
    function = call.get("function")
    if not isinstance(function, Mapping):
        function = {}
    return [function.get("name"), call_arguments(function.get("arguments"))]


def tools_digest(tools: Sequence[Any] | None) -> str:
    return hashlib.sha256(json.dumps(tools or [], sort_keys=True).encode()).hexdigest()[:32]


def new_messages(held: list[str], sent: list[str]) -> int | None:
    """How many of the sent messages the session already holds (it holds exactly those), else None."""
    if len(sent) > len(held) and sent[: len(held)] == held:
        return len(held)
    return None


def object_arguments(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages as templates expect them: tool call arguments as objects
    (:func:`lmchat.messages.call_arguments`), not JSON text."""
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls and isinstance(calls, list):
            message = {**message, "tool_calls": with_object_arguments(calls)}
        out.append(message)
    return out
