"""Sessions carry tools and tool turns with the same delta invariant, for every tool-rendering template."""
from __future__ import annotations

import datetime as dt
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lmchat
from lmchat import Session, get_template
from lmchat.registry import template_class

from .conversations import TOOLS, text_strategy

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
        results = [draw(text_strategy()) for _ in calls]
        turns.append((draw(text_strategy()), calls, results, draw(text_strategy())))
    return turns


@pytest.mark.parametrize("name", TOOL_TEMPLATES)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
            messages.append({"role": "assistant", "content": "", "tool_calls": calls})
            step = [{"role": "tool", "content": r, "tool_call_id": c["id"], "name": c["function"]["name"]}
                    for c, r in zip(calls, results)]
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
    # digest all read arguments with call_arguments: a session holds them alike whichever way they came
    from lmchat.manager.history import digest, object_arguments
    from lmchat.messages import call_arguments, with_object_arguments
    from lmchat.serve.items import input_messages

    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": given}}
    assert call_arguments(given) == read
    assert with_object_arguments([call])[0]["function"]["arguments"] == read
    sent = [{"role": "assistant", "content": "", "tool_calls": [call]}]
    assert object_arguments(sent)[0]["tool_calls"][0]["function"]["arguments"] == read
    held = {**sent[0], "tool_calls": [{**call, "function": {"name": "add", "arguments": read}}]}
    assert digest(sent[0]) == digest(held)
    if isinstance(given, str):
        item = {"type": "function_call", "call_id": "c1", "name": "add", "arguments": given}
        assert input_messages([item])[0]["tool_calls"][0]["function"]["arguments"] == read
