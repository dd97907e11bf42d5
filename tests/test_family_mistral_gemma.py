"""Mistral and Gemma families: rules, tool formats, odd content, and where sessions re-render."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lmchat import Session, get_template
from lmchat.errors import TemplateRuleError
from lmchat.registry import canonical_name

from . import oracle
from .conversations import TEXT, TOOLS, a, s, u
from .hypothesis_profiles import examples
from .test_conformance import assert_same, assert_same_as_oracle

ID, ID2 = "abcDEF123", "xyz000789"


def call(name, arguments, id=ID):
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def result(content, id=ID):
    return {"role": "tool", "content": content, "tool_call_id": id}


@pytest.mark.parametrize(
    "alias, name",
    [
        ("mistral-instruct", "mistral"),
        ("Mistral-7B-Instruct", "mistral"),
        ("mistral-v0.1", "mistral"),
        ("mixtral-instruct", "mixtral"),
        ("mixtral-8x7b", "mixtral"),
        ("mistral_v0.3", "mistral-v0.3"),
        ("mixtral-8x22b", "mistral-v0.3"),
        ("gemma", "gemma"),  # XTuner's and LMDeploy's name
        ("gemma-it", "gemma"),
        ("gemma-1.1", "gemma"),
    ],
)
def test_aliases(alias, name):
    assert canonical_name(alias) == name


@pytest.mark.parametrize(
    "name, messages, rule",
    [
        ("mistral", [u("a"), u("b")], "alternation"),
        ("mistral", [s("x"), a("a")], "alternation"),
        ("mistral", [u("a"), s("late")], "role-unsupported"),
        ("mistral-v0.3", [u("a"), s("late")], "role-unsupported"),
        ("mistral-v0.3", [u("a"), a("", tool_calls=[call("add", {})]), u("b")], "alternation"),
        ("mistral-v0.3", [u("a"), a("", tool_calls=[call("add", {}, "call_1")])], "tool-call-id"),
        ("mistral-v0.3", [u("a"), a("", tool_calls=[call("add", {})]), result("3", "short")], "tool-call-id"),
        ("gemma", [s("x"), u("a")], "system-unsupported"),
        ("gemma2", [a("x")], "alternation"),
        ("gemma3", [s("x"), a("a")], "alternation"),
        ("gemma3", [u(5)], "content-type"),
    ],
)
def test_rules(name, messages, rule):
    with pytest.raises(TemplateRuleError) as info:
        get_template(name).messages2prompt(messages)
    assert info.value.rule == rule


ODD = {
    "gemma": [
        [u(5), a(["x", " y "]), u({"k": 1}), a(True)],
        [u("a"), {"role": "assistant"}, u("b"), {"role": "tool", "content": " r "}],
    ],
    "gemma3": [
        [s([{"type": "text", "text": " sys "}]), u([{"type": "text", "text": " hi "}, {"type": "image"}, 5, "s"])],
        [s("sys"), u({"type": "text"}), a([{"type": "text"}, {"type": "text", "text": 7}]), u("x")],
        [s([]), u("x")],
        [s(5)],
        [{"role": "system"}, u("x")],
        [u("a"), {"role": "assistant"}, u("b"), s(" mid ")],
    ],
    "mistral": [[s(5)], [s(5), u("x")], [u("x"), {"role": "assistant"}], [s(" s "), u(" q "), a(" a ")]],
    "mistral-v0.3": [
        [u("x"), a(5), u("y"), {"role": "assistant"}],
        [s(5), u("x"), a("y")],
        [u("x"), a("y", tool_calls=[]), result({"content": {"a": 1}})],
        [u("x"), {"role": "system", "content": "y", "tool_calls": [call("f", "abc")]}, result(None)],
        [u("x"), a("", tool_calls=[{"id": ID, "function": "abc"}]), result(True), result([1, 2], ID2)],
        [u("x"), a("", tool_calls=[{"id": ID}])],
        [u("x"), result("r", 123456789)],
    ],
}


ODD_TOOL_LIST = [{"type": "function", "function": {"name": 5, "description": 'say "hi"', "return": {"x": 1}}}]

#: the official renderings these tests compare with (tests/golden)
GOLDEN = [(n, m, {"add_generation_prompt": True, "tools": tools}) for n, ms in ODD.items() for m in ms
          for tools in (None, TOOLS)] + [("mistral-v0.3", [s("sys"), u("q")], {"tools": ODD_TOOL_LIST})]


@pytest.mark.parametrize("name, messages", [(n, m) for n, ms in ODD.items() for m in ms])
@pytest.mark.parametrize("tools", [None, TOOLS])
def test_odd_content_matches_official(name, messages, tools):
    assert_same(name, messages, add_generation_prompt=True, tools=tools)


def test_tool_list_odd_fields_match_official():
    assert_same("mistral-v0.3", [s("sys"), u("q")], tools=ODD_TOOL_LIST)
    with pytest.raises(ValueError):
        get_template("mistral-v0.3").messages2prompt([u("q")], tools=[{"type": "function"}])


# ---------------------------------------------------------------- random tool conversations
IDS = st.sampled_from([ID, ID2, ID, ID2, "call_1"])
CALLS = st.lists(st.builds(call, st.sampled_from(["add", "get_current_weather"]), st.just({"a": 1}), IDS), max_size=2)


@st.composite
def tool_turns(draw, max_turns=3):
    """Mostly well-formed: user turns answered directly or through calls and their results."""
    messages = [s(draw(TEXT))] if draw(st.booleans()) else []
    for _ in range(draw(st.integers(1, max_turns))):
        messages.append(u(draw(st.sampled_from(["same", "other", " pad "]))))
        if draw(st.booleans()):
            calls = draw(CALLS)
            messages.append(a(draw(TEXT), tool_calls=calls))
            messages += [result(draw(TEXT), c["id"]) for c in calls]
        if draw(st.booleans()):
            messages.append(a(draw(TEXT)))
    return messages


@st.composite
def any_messages(draw, max_messages=7):
    """Anything goes: the official template rejects most of these."""
    messages = []
    for _ in range(draw(st.integers(1, max_messages))):
        kind = draw(st.sampled_from(["system", "user", "user", "assistant", "call", "tool"]))
        content = draw(st.sampled_from(["same", "other"]) | TEXT)
        if kind == "call":
            messages.append(a(content, tool_calls=draw(CALLS)))
        elif kind == "tool":
            messages.append(result(content, draw(IDS)))
        else:
            messages.append({"role": kind, "content": content})
    return messages


@st.composite
def session_batch(draw):
    """What a client sends before each answer: a user turn, perhaps with a call made and its results."""
    batch = [u(draw(st.sampled_from(["same", "other", " pad "])))]
    if draw(st.booleans()):
        calls = draw(CALLS)
        batch += [a("", tool_calls=calls)] + [result(draw(TEXT), c["id"]) for c in calls]
    return batch


def tool_conversations(max_messages=7):
    return tool_turns() | any_messages(max_messages)


@oracle.needs_oracle_for_random
@settings(max_examples=examples(250), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=tool_conversations(), tools=st.sampled_from([None, TOOLS]), prompt=st.booleans())
def test_random_tool_conversations_v3(messages, tools, prompt):
    assert_same_as_oracle("mistral-v0.3", messages, add_generation_prompt=prompt, tools=tools)


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=st.lists(session_batch(), min_size=1, max_size=5), system=st.none() | TEXT)
def test_v3_session_invariant_with_tools(script, system):
    """Deltas extend the context or reset to the full prompt, tools moving between repeated user turns."""
    template = get_template("mistral-v0.3")
    session = Session(template, system=system, tools=TOOLS, date=oracle.DATE)
    for batch in script:
        before = session.context
        try:
            full = template.messages2prompt(session.messages + batch, tools=TOOLS)
        except ValueError:
            with pytest.raises(ValueError):
                session.extend(batch)
            assert session.context == before
            continue
        delta = session.extend(batch)
        assert (delta.text == full) if delta.reset else (before + delta.text == full)
        session.commit(" answer")


def test_v3_rerender_from_finds_earlier_copies_of_the_last_user_turn():
    template = get_template("mistral-v0.3")
    chat = template.make_chat([u("same"), a("x"), u("other"), a("y"), u("same")], tools=TOOLS)
    assert template.rerender_from(chat, 3) == 0  # message 0 gains the tool list
    chat = template.make_chat([u("one"), a("x"), u("two"), a("y"), u("three")], tools=TOOLS)
    assert template.rerender_from(chat, 3) == 2  # the old last user turn loses it
    chat = template.make_chat([u("one"), a("x"), u("two"), a("y"), u("two")], tools=TOOLS)
    assert template.rerender_from(chat, 3) == 2  # same text again: only the default window
    chat = template.make_chat([u("one"), a("x"), u("two"), a("y"), u("three")])
    assert template.rerender_from(chat, 3) == 2


def test_v3_answers_committed_with_their_leading_space_extend_the_context():
    session = Session("mistral-v0.3", date=oracle.DATE)
    assert session.prompt("Hi").text == "<s>[INST] Hi[/INST]"
    session.commit(" Hello")  # as the model's first token '▁Hello' decodes; v0.3 trims the stored answer
    delta = session.prompt("More")
    assert not delta.reset and delta.text == "</s>[INST] More[/INST]"
    session.commit("Bare")  # without the space the canonical rendering differs
    assert session.prompt("Again").reset


def test_gemma_session_deltas():
    session = Session("gemma", date=oracle.DATE)
    assert session.prompt("Hi").text == "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    session.commit("Hello")
    assert session.prompt("More").text == "\n<start_of_turn>user\nMore<end_of_turn>\n<start_of_turn>model\n"


def test_gemma3_system_prompt_joins_first_turn():
    session = Session("gemma3", system=" Be brief. ", date=oracle.DATE)
    first = session.prompt("Hi").text
    assert first == "<bos><start_of_turn>user\n Be brief. \n\nHi<end_of_turn>\n<start_of_turn>model\n"
    session.commit("Hello")
    assert not session.prompt("More").reset
