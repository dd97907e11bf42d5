"""Sessions carry tools and tool turns with the same delta invariant, for every tool-rendering template."""
from __future__ import annotations

import datetime as dt
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lmchat
from lmchat import Session, get_template
from lmchat.messages import calls_as
from lmchat.registry import template_class

from .conversations import TEXT, TOOLS
from .hypothesis_profiles import examples

DATE = dt.date(2024, 7, 26)
TOOL_TEMPLATES = [n for n in lmchat.template_names() if template_class(n).supports_tools]


@st.composite
def tool_scripts(draw):
    """Turns of (question, calls, results, answer): calls and results may be empty."""
    turns = []
    for k in range(draw(st.integers(1, 3))):
        n = draw(st.integers(0, 2))
        calls = [
            {"id": f"c{k}{j}".ljust(9, "x"), "type": "function",
             "function": {"name": draw(st.sampled_from(["add", "get_current_weather"])),
                          "arguments": draw(st.sampled_from([{"a": 1, "b": 2}, {"location": "上海"}, "{}"]))}}
            for j in range(n)
        ]
        results = [draw(TEXT) for _ in calls]
        turns.append((draw(TEXT), calls, results, draw(TEXT)))
    return turns


@pytest.mark.parametrize("name", TOOL_TEMPLATES)
@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=tool_scripts(), with_tools=st.booleans())
def test_tool_turns_keep_the_invariant(name, script, with_tools):
    template = get_template(name)
    session = Session(template, tools=TOOLS if with_tools else None, date=DATE)
    messages = []

    def check(delta, before):
        full = template.messages2prompt(messages, tools=TOOLS if with_tools else None, date=DATE)
        assert delta.text == full if delta.reset else before + delta.text == full
        assert session.context == full

    for question, calls, results, answer in script:
        step = [{"role": "user", "content": question}]
        for stage in ("question", "calls"):
            before = session.context
            try:
                delta = session.extend(step)
            except ValueError:
                return
            messages.extend(step)
            check(delta, before)
            if stage == "calls" or not calls:
                break
            raw = json.dumps([c["function"] for c in calls], ensure_ascii=False)
            session.commit(raw, content="", tool_calls=calls)
            # the session keeps calls in its template's form, as every path into it does
            held = calls_as(calls, template.call_arguments)
            messages.append({"role": "assistant", "content": "", "tool_calls": held})
            step = [{"role": "tool", "content": r, "tool_call_id": c["id"], "name": c["function"]["name"]}
                    for c, r in zip(calls, results, strict=True)]
        session.commit(answer)
        lead = template.lead
        messages.append({"role": "assistant",
                         "content": answer[len(lead):] if lead and answer.startswith(lead) else answer})


@pytest.mark.parametrize("given, read", [
    ('{"a": 1}', {"a": 1}), ({"a": 1}, {"a": 1}), ("not json", "not json"), ("[1, 2]", "[1, 2]"), ("3", "3"),
    ("[" * 100_000, "[" * 100_000),
])
def test_tool_call_arguments_are_read_by_one_rule_wherever_they_come_from(given, read):
    # a model's parsed call (the turn), a resent history (chat), a Responses function_call item and a history's
    # digest: a session holds them in its template's form (calls_as) whichever way they came, and a digest
    # reads them with call_arguments, so the same call matches in either form
    from lmchat.manager.history import digest, from_openai
    from lmchat.messages import call_arguments
    from lmchat.serve.items import input_messages

    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": given}}
    assert call_arguments(given) == read
    assert calls_as([call], "object")[0]["function"]["arguments"] == read
    as_text = calls_as([call], "text")[0]["function"]["arguments"]
    assert as_text == (given if isinstance(given, str) else json.dumps(given))  # the model's own text kept
    sent = [{"role": "assistant", "content": "", "tool_calls": [call]}]
    assert from_openai(sent) == sent  # the arguments as sent: the session puts them in its form
    held = {**sent[0], "tool_calls": [{**call, "function": {"name": "add", "arguments": read}}]}
    assert digest(sent[0]) == digest(held)
    if isinstance(given, str):
        item = {"type": "function_call", "call_id": "c1", "name": "add", "arguments": given}
        assert input_messages([item])[0]["tool_calls"][0]["function"]["arguments"] == given


def test_a_null_content_beside_calls_is_no_text():
    """OpenAI's clients send ``content: null`` with every call they resend; templates that read the content
    beside calls (DeepSeek) take it as ``""``, which renders what ``null`` renders wherever both render."""
    from lmchat.manager.history import from_openai

    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    assert from_openai([{"role": "assistant", "content": None, "tool_calls": [call]}])[0]["content"] == ""
    kept = [{"role": "assistant", "content": None}, {"role": "user", "content": None}]
    assert from_openai(kept) == kept  # no calls: validation says what is wrong
