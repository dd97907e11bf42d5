"""A tool call and its result, through the session manager and the server, for every template with a call syntax.

The echo backend answers the call as the template itself renders it, so the parser reads it back, the turn
commits the parsed call, and the next turn sends its result: the session must render that history. Templates
read a call's arguments either as an object (``tojson``) or as the JSON text (DeepSeek, Kimi-K2, Functionary,
FireFunction print them as they are): a committed call is kept in the template's form, whichever way it came
(a parsed answer, a resent OpenAI history with JSON text, an object), so the next turn never fails on it.
Before, the manager stored objects for every template and the turn after a DeepSeek or Functionary call was
refused.
"""
from __future__ import annotations

import json

import pytest

import lmchat
from lmchat import SessionManager
from lmchat.backends.echo import EchoBackend
from lmchat.manager import TurnRequest
from lmchat.registry import template_class
from lmchat.tools import prompt_opens_think

from .constraint_schemas import TOOLS
from .test_forcing import CALLS, rendered

#: templates whose model writes calls in a syntax of its own
WITH_CALLS = sorted(n for n in lmchat.template_names()
                    if template_class(n).supports_tools and template_class(n).tool_format != "plain")


def answer_of(template: str) -> str | None:
    """What the model writes for one call: the call as the template renders it (after a reasoning block the
    prompt opened, closed first); None where the template renders no call of these tools."""
    try:
        text = rendered(template, CALLS[:1])
    except lmchat.errors.InvalidMessages:  # tools the template refuses (Command-R's OpenAI schema rules)
        return None
    if not text:
        return None
    return ("Checking.\n</think>\n\n" + text) if prompt_opens_think(template) else text


@pytest.mark.parametrize("template", WITH_CALLS)
def test_a_committed_call_and_its_result_render_in_the_next_turn(template):
    text = answer_of(template)
    if text is None:
        pytest.skip(f"{template} renders no call of these tools")
    mgr = SessionManager(EchoBackend(prefix=""), template=template)
    sid = mgr.create(tools=TOOLS)
    r = mgr.run_turn(TurnRequest(sid, [{"role": "user", "content": text}]))
    [call] = r.parsed.tool_calls
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == CALLS[0]
    stored = mgr.get(sid).messages[-1]["tool_calls"][0]["function"]["arguments"]
    form = template_class(template).call_arguments
    assert isinstance(stored, str) if form == "text" else stored == CALLS[0][1]
    mgr.run_turn(TurnRequest(sid, [{"role": "tool", "tool_call_id": call["id"], "content": "sunny"}]))
    assert mgr.get(sid).messages[-2]["role"] == "tool"
    mgr.close()


@pytest.mark.parametrize("template", ["deepseek-v3.1", "deepseek-r1", "functionary-v3.1", "kimi-k2", "qwen2.5"])
def test_a_stateless_client_resends_the_call_as_openai_sends_it(template):
    """The openai client resends the whole history, the call's arguments as JSON text: a template that prints
    the text gets it as sent, one that renders an object gets the object, on a stored session and a one-off."""
    pytest.importorskip("openai")
    pytest.importorskip("fastapi")
    from .serve_helpers import InProcess

    s = InProcess("--template", template, "--store", "memory", "--backend-option", "prefix=")
    try:
        client = s.openai()
        ask = {"role": "user", "content": "The weather in Paris?"}
        call = {"id": "call0abcd", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 2}'}}
        history = [ask, {"role": "assistant", "content": None, "tool_calls": [call]},
                   {"role": "tool", "tool_call_id": "call0abcd", "content": "sunny"}]
        sid = f"round-trip-{template}"
        for extra in ({}, {"extra_headers": {"X-Session-Id": sid}}):
            r = client.chat.completions.create(model="echo", messages=history, tools=TOOLS, **extra)
            assert r.choices[0].finish_reason in ("stop", "length")
        held = s.http.app.state.manager.get(sid).messages[1]["tool_calls"][0]["function"]["arguments"]
        text = template_class(template).call_arguments == "text"
        assert held == (call["function"]["arguments"] if text else {"city": "Paris", "days": 2})
    finally:
        s.stop()
