"""Chat completions with a session id: reuse the session when the client resends its history.

OpenAI clients send the whole conversation every time. With a session id the
server compares it with the session's messages: when the sent conversation
extends them, only the new messages become the turn (the engine keeps its
cache); otherwise the session is reset to the sent conversation.

Messages are compared as the client sees them, not byte for byte: the
visible content (an answer's reasoning and tool-call markup are not part of
it), stripped of edge whitespace (clients trim), and tool calls by name and
parsed arguments. Tool call ids are not compared: the session keeps its own.
"""
from __future__ import annotations

import json
from typing import Any

from ..manager import SessionManager
from ..tools import parse_response
from .deps import blocking


async def plan_turn(mgr: SessionManager, sid: str, who: str | None, sent: list[dict], tools: list | None
                    ) -> tuple[list[dict], Any]:
    """The messages to send for this turn, and the session's template; creates or resets the session."""
    session = await blocking(mgr.find, sid, who)
    if session is None:
        await blocking(mgr.create, sid, who, tools=tools)  # SessionExists (409): another key's session
        return sent, mgr.template
    held = session.messages
    if _canonical_tools(session.tools) == _canonical_tools(tools) and len(sent) > len(held) and all(
        _same(session.template, session.tools, h, s) for h, s in zip(held, sent)
    ):
        return sent[len(held):], session.template
    # another conversation under this id (edited, regenerated, or new tools): start it over
    await blocking(mgr.end, sid, who)
    await blocking(mgr.create, sid, who, tools=tools)
    return sent, mgr.template


def for_session(messages: list[dict]) -> list[dict]:
    """OpenAI messages as templates expect them: tool call arguments as objects, not JSON text.

    Templates render ``arguments | tojson``; given OpenAI's JSON string they would
    print it quoted (vLLM converts them the same way before rendering).
    """
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls and isinstance(calls, list):
            message = {**message, "tool_calls": [_with_object_arguments(c) for c in calls]}
        out.append(message)
    return out


def _with_object_arguments(call: Any) -> Any:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
        return call  # the session's validation names what is wrong with it
    try:
        arguments = json.loads(function["arguments"])
    except ValueError:
        return call
    return {**call, "function": {**function, "arguments": arguments}} if isinstance(arguments, dict) else call


def _same(template, tools, held: dict, sent: dict) -> bool:
    if held.get("role") != sent.get("role"):
        return False
    held_content, held_calls = _text(held.get("content")), held.get("tool_calls") or []
    if held["role"] == "assistant" and not held_calls:  # a plain answer is stored as the model wrote it
        parsed = parse_response(template, held_content, tools=tools)
        held_content, held_calls = parsed.content, parsed.tool_calls
    return held_content.strip() == _text(sent.get("content")).strip() and _calls(held_calls) == _calls(
        sent.get("tool_calls") or []
    )


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):  # content parts: their text
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def _calls(calls: list) -> list:
    out = []
    for call in calls:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                pass  # compared as the text it is
        out.append((function.get("name"), arguments))
    return out


def _canonical_tools(tools: list | None) -> str:
    return json.dumps(tools or [], sort_keys=True)
