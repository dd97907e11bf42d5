"""Llama 2 / Llama 3.x / Zephyr specifics: variables, tool edge cases, rules, sessions."""
from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lmchat import Session, get_template
from lmchat.errors import TemplateRuleError
from lmchat.registry import canonical_name

from . import oracle
from .conversations import TEXT, TOOLS, a, call, s, tool, u
from .hypothesis_profiles import examples
from .test_conformance import assert_same, assert_same_as_oracle

LLAMA31 = ("llama3.1", "llama3.2")


@pytest.mark.parametrize(
    "alias, name",
    [
        ("llama2_chat", "llama2"), ("llama-2", "llama2"), ("llama2-chat", "llama2"),
        ("llama3_chat", "llama3"), ("llama-3", "llama3"),
        ("llama3_1", "llama3.1"), ("llama-3.1", "llama3.1"), ("llama3.3", "llama3.1"),
        ("llama3_2", "llama3.2"), ("llama-3.2", "llama3.2"), ("tinyllama-chat", "tinyllama"),
    ],
)
def test_aliases(alias, name):
    assert canonical_name(alias) == name


ODD_NAMES = ["llama2", "llama3", *LLAMA31, "zephyr"]
ODD_CONTENT = [
    [u(["a list"]), a(5), u(True)],  # Llama 3 trims str() of anything
    [{"role": "user"}, {"role": "assistant"}],  # missing content
    [s("sys"), {"role": "tool"}, u("x")],
    [u("x"), {"role": "ipython", "content": 3}],
    [u("x"), {"role": "ipython", "content": {"t": 1}}],
    [u("x"), {"role": "ipython", "content": [1, "2"]}],
    [u("x"), {"role": "weird", "content": ["not", "read"]}, u("y")],
    [s(" a "), u(""), a(" b "), u("")],
]
VARIABLES = [
    {"tools_in_user_message": False},
    {"builtin_tools": ["brave_search", "code_interpreter", "wolfram_alpha"]},
    {"builtin_tools": ["brave_search"], "tools_in_user_message": False},
    {"date_string": "01 Jan 2025"},
    {"custom_tools": TOOLS[:1]},
    {"custom_tools": None},
]
VARIABLE_CONVERSATIONS = [
    [s("sys"), u("q")],
    [a("assistant first takes the tools"), u("q")],
    [u("q"), a("", tool_calls=[call("brave_search", {"query": "x", "n": "2"})]), tool("res")],
    [u("q"), a("", tool_calls=[call("get_current_weather", '{"location": "Paris"}')]), tool({"t": 1})],
    [u("q"), a("", tool_calls=[{"function": {"name": "brave_search"}}])],  # no arguments
    [u("q"), a("", tool_calls=[call("brave_search", {"query": 5})])],
    [u("q"), a("", tool_calls=[call("brave_search", "not a mapping")])],
    [u("q"), a("", tool_calls=[])],
    [u("q"), a("", tool_calls=[{"function": {"name": 7, "arguments": {}}}])],
    [u("q"), a("", tool_calls=["bad"])],
    [s("only system")],
]
USER_CALL = [u("q"), {"role": "user", "content": "x", "tool_calls": [call("add", {"a": 1, "b": 2})]}]

#: the official renderings these tests compare with (tests/golden)
GOLDEN = (
    [(n, m, {"add_generation_prompt": g}) for n in ODD_NAMES for m in ODD_CONTENT for g in (True, False)]
    + [(n, m, {"tools": tools, **kwargs})
       for n in LLAMA31 for kwargs in VARIABLES for tools in (TOOLS, None) for m in VARIABLE_CONVERSATIONS]
    + [("llama3.1", USER_CALL, {})]
)


@pytest.mark.parametrize("name", ODD_NAMES)
@pytest.mark.parametrize("messages", ODD_CONTENT)
def test_odd_content_matches_official(name, messages):
    for gen in (True, False):
        assert_same(name, messages, add_generation_prompt=gen)


@pytest.mark.parametrize("name", LLAMA31)
@pytest.mark.parametrize("kwargs", VARIABLES)
@pytest.mark.parametrize("tools", [TOOLS, None])
def test_template_variables(name, kwargs, tools):
    for messages in VARIABLE_CONVERSATIONS:
        assert_same(name, messages, tools=tools, **kwargs)


def test_user_message_with_tool_calls_renders_as_call():
    assert '{"name": "add"' in assert_same("llama3.1", USER_CALL)


def test_rules():
    with pytest.raises(TemplateRuleError) as err:
        get_template("llama2").messages2prompt([u("a"), u("b")])
    assert err.value.rule == "alternation" and err.value.index == 1
    with pytest.raises(TemplateRuleError) as err:
        get_template("llama3.1").messages2prompt([u("q"), a("", tool_calls=[call("add", {}), call("add", {})])])
    assert err.value.rule == "single-tool-call" and err.value.index == 1
    with pytest.raises(TemplateRuleError) as err:
        get_template("llama3.2").messages2prompt([s("sys")], tools=TOOLS)
    assert err.value.rule == "tools-need-user-message"


def test_dates():
    day = dt.date(2025, 3, 5)
    for name in LLAMA31:
        out = get_template(name).messages2prompt([u("q")], date=day)
        assert "Today Date: 05 Mar 2025\n" in out
        out = get_template(name).messages2prompt([u("q")], date=day, date_string="x")
        assert "Today Date: x\n" in out
    assert "Today Date: 26 Jul 2024\n" in get_template("llama3.1").messages2prompt([u("q")])


def test_session_llama2_keeps_no_eos():
    """The answer as decoded (leading space) extends the context; the delta supplies ` </s>`."""
    session = Session("llama2", system="Be brief.", date=oracle.DATE)
    assert session.prompt("Hi").text == "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]"
    session.commit(" Hello.")
    delta = session.prompt("More")
    assert not delta.reset and delta.text == " </s><s>[INST] More [/INST]"


def test_session_llama31_with_tools():
    session = Session("llama3.1", tools=TOOLS, date=dt.date(2025, 1, 2))
    first = session.prompt("Weather?").text
    assert ("Today Date: 02 Jan 2025" in first
            and first.endswith("Weather?<|eot_id|>" + get_template("llama3.1").assistant))
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_current_weather", "arguments": {"location": "Paris"}}}
    session.commit('{"name": "get_current_weather", "parameters": {"location": "Paris"}}', tool_calls=[call])
    delta = session.extend([tool('{"temperature": 22}')])
    assert not delta.reset
    assert delta.text == (
        '<|start_header_id|>ipython<|end_header_id|>\n\n"{\\"temperature\\": 22}"<|eot_id|>'
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_session_zephyr_delta():
    session = Session("zephyr", date=oracle.DATE)
    assert session.prompt("Hi").text == "<|user|>\nHi</s>\n<|assistant|>\n"
    session.commit("Hello")
    assert session.prompt("Bye").text == "\n<|user|>\nBye</s>\n<|assistant|>\n"


@st.composite
def tool_conversations(draw):
    roles = ("system", "user", "assistant", "tool", "ipython", "call")
    out = []
    for _ in range(draw(st.integers(1, 6))):
        role = draw(st.sampled_from(roles))
        if role == "call":
            args = draw(st.sampled_from([{"query": "x"}, '{"a": 1}', {"a": 1}]))
            out.append(a(draw(TEXT),
                         tool_calls=[call(draw(st.sampled_from(["add", "brave_search"])), args)]))
        else:
            out.append({"role": role, "content": draw(st.one_of(TEXT, st.integers(), st.just([1])))})
    return out


@oracle.needs_oracle_for_random
@pytest.mark.parametrize("name", LLAMA31)
@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=tool_conversations(),
    tools=st.sampled_from([TOOLS, None]),
    kwargs=st.sampled_from([{}, {"builtin_tools": ["brave_search"]}, {"tools_in_user_message": False}]),
)
def test_random_tool_conversations(name, messages, tools, kwargs):
    assert_same_as_oracle(name, messages, tools=tools, **kwargs)
