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

from ..jsontypes import JSONObject
from ..messages import Message, call_arguments, flatten_text
from ..tools import parse_response
from ..tools.registry import TemplateLike


def digest(message: Mapping[str, object], template: TemplateLike | None = None,
           tools: list[JSONObject] | None = None) -> str:
    """What a client sees of ``message``, hashed; ``template`` parses a held raw answer."""
    role = message.get("role")
    held_calls = message.get("tool_calls")  # a list: the messages were validated
    content, calls = flatten_text(message.get("content")), held_calls if isinstance(held_calls, list) else []
    if role == "assistant" and not calls and template is not None:  # a plain answer is held as the model wrote it
        parsed = parse_response(template, content, tools=tools)
        content, calls = parsed.content, parsed.tool_calls
    visible = [role, content.strip(), [_call(c) for c in calls if isinstance(c, Mapping)]]
    return hashlib.sha256(json.dumps(visible, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:32]


def _call(call: Mapping[str, object]) -> list[object]:
    function = call.get("function")
    if not isinstance(function, Mapping):
        function = {}
    return [function.get("name"), call_arguments(function.get("arguments"))]


def tools_digest(tools: Sequence[object] | None) -> str:
    return hashlib.sha256(json.dumps(tools or [], sort_keys=True).encode()).hexdigest()[:32]


def new_messages(held: list[str], sent: list[str]) -> int | None:
    """How many of the sent messages the session already holds (it holds exactly those), else None."""
    if len(sent) > len(held) and sent[: len(held)] == held:
        return len(held)
    return None


def from_openai(messages: list[Message]) -> list[Message]:
    """OpenAI messages as templates take them: an assistant message's ``content: null`` (or none) beside its tool
    calls is no text (``""``). OpenAI's clients send that null back with every call; the templates that read the
    content beside calls (DeepSeek, Granite, QwQ...) fail on a missing one, and none renders ``""`` otherwise
    than ``null`` where both render. The calls' arguments stay as sent: a session keeps them in its template's
    form (:func:`lmchat.messages.calls_as`)."""
    return [{**m, "content": ""} if m.get("role") == "assistant" and m.get("content") is None
            and m.get("tool_calls") else m for m in messages]
