"""DeepSeek (LLM, V2, Coder, V3, R1) and Phi-3/Phi-4: quirks of their official templates."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lmchat import Session, get_template
from lmchat.registry import canonical_name

from . import oracle
from .conversations import TEXT, a, call, s, tool, u
from .hypothesis_profiles import examples
from .test_conformance import assert_same, assert_same_as_oracle

NAMES = ["deepseek", "deepseek-v2", "deepseek-coder", "deepseek-v3", "deepseek-r1", "phi3", "phi4"]
EOS = "<｜end▁of▁sentence｜>"
DATE = oracle.DATE


def test_aliases():
    expected = {
        "deepseek": ["deepseek-chat", "deepseek_moe", "deepseek-moe"],
        "deepseek-coder": ["deepseek_coder", "deepseekcoder"],
        "deepseek-v2": ["deepseek_v2"],
        "deepseek-v3": ["deepseek_v3"],
        "deepseek-r1": ["deepseek_r1"],
        "phi3": ["phi-3", "phi3_chat"],
        "phi4": ["phi-4"],
    }
    for name, aliases in expected.items():
        assert all(canonical_name(alias) == name for alias in aliases)


# ---------------------------------------------------------------- random conversations with every role
@st.composite
def messages_with_tools(draw):
    """Any roles (tool and unknown ones too); assistants may carry calls, string or dict arguments."""
    out = []
    for k in range(draw(st.integers(1, 7))):
        role = draw(st.sampled_from(["system", "user", "assistant", "tool", "ipython"]))
        message = {"role": role}
        if draw(st.integers(0, 9)):  # content is sometimes missing
            message["content"] = draw(TEXT)
        if role == "assistant" and draw(st.booleans()):
            args = draw(st.sampled_from(['{"a": 1}', "", {"a": 1}]))
            message["tool_calls"] = [call(draw(st.sampled_from(["add", "f"])), args, f"c{k}")] * draw(st.integers(0, 2))
        out.append(message)
    return out


@oracle.needs_oracle_for_random
@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=messages_with_tools(), generation_prompt=st.booleans())
def test_random_tool_conversations(name, messages, generation_prompt):
    assert_same_as_oracle(name, messages, add_generation_prompt=generation_prompt)


QUIRKS = {
    # R1's ns.is_first / ns.is_output_first are never reset: later calls and results lose their openers
    "two-tool-rounds": [
        u("q"), a("c", tool_calls=[call("f", "{}")]), tool("1"), s("late"), a("x</think>y"),
        u("q2"), a("d", tool_calls=[call("f", "{}"), call("g", "[]")]), tool("2"), tool("3"),
    ],
    "calls-no-content-later": [u("q"), a("", tool_calls=[call("f", "{}")]), {"role": "assistant", "tool_calls": []}],
    "content-missing": [u("q"), {"role": "assistant", "tool_calls": [call("f", "{}")]}],
    "dict-arguments": [u("q"), a("", tool_calls=[call("f", {"a": 1})])],
    "unknown-role": [u("q"), {"role": "ipython", "content": "x"}, {"role": "tool"}],
    "system-late": [u("q"), a("x"), s("S1"), u("again"), s("S2")],
    "non-string-system": [{"role": "system", "content": ["x"]}, u("q")],
}

#: the official renderings these tests compare with (tests/golden)
GOLDEN = [(name, messages, {"add_generation_prompt": generation_prompt})
          for name in NAMES for messages in QUIRKS.values() for generation_prompt in (True, False)]


@pytest.mark.parametrize("name", NAMES)
def test_fixed_quirks(name):
    for label, messages in QUIRKS.items():
        for generation_prompt in (True, False):
            try:
                assert_same(name, messages, add_generation_prompt=generation_prompt)
            except AssertionError as exc:
                raise AssertionError(f"{label}: {exc}") from exc


# ---------------------------------------------------------------- sessions
def test_deepseek_answer_lead_is_the_models_space():
    session = Session("deepseek", date=DATE)
    assert session.prompt("Hi").text == "<｜begin▁of▁sentence｜>User: Hi\n\nAssistant:"
    session.commit(" Hello")  # as generated after 'Assistant:'
    assert session.messages[-1]["content"] == "Hello"
    delta = session.prompt("Bye")
    assert not delta.reset and delta.text == EOS + "User: Bye\n\nAssistant:"
    session.commit("NoSpace")  # the model skipped its space: history renders differently
    assert session.prompt("Again").reset


def test_deepseek_coder_default_system_leaves_when_a_system_message_arrives():
    template = get_template("deepseek-coder")
    session = Session(template, date=DATE)
    first = session.prompt("Hi")
    assert "Deepseek Coder model" in first.text
    session.commit("Hello")
    assert session.prompt("more").text == "\n<|EOT|>\n### Instruction:\nmore\n### Response:\n"
    session.commit("ok")
    chat = template.make_chat(session.messages + [{"role": "system", "content": "S"}])
    assert template.rerender_from(chat, len(chat.messages) - 1) == 0
    delta = session.prompt("S", role="system")
    assert delta.reset and delta.text.startswith("<｜begin▁of▁sentence｜>### Instruction:\nHi\n")


@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-r1"])
def test_tool_results_end_the_block_instead_of_a_generation_prompt(name):
    session = Session(name, date=DATE)
    session.prompt("Weather?")
    call = {"id": "c1", "type": "function", "function": {"name": "get_current_weather", "arguments": "{}"}}
    session.commit("", tool_calls=[call])
    delta = session.extend([tool("22", "c1")])
    assert delta.text.endswith("<｜tool▁output▁end｜><｜tool▁outputs▁end｜>") and not delta.reset
    session.commit("It is 22.")
    assert session.prompt("Thanks").text == EOS + "<｜User｜>Thanks<｜Assistant｜>"


def test_r1_drops_reasoning_from_history():
    session = Session("deepseek-r1", date=DATE)
    session.prompt("2+2?")
    session.commit("<think>\nadd\n</think>\n\n4")
    delta = session.prompt("3+3?")
    assert delta.reset
    assert delta.text.endswith("<｜Assistant｜>\n\n4" + EOS + "<｜User｜>3+3?<｜Assistant｜>")
    session.commit("6")  # without reasoning the next turn extends the context
    assert not session.prompt("ok").reset


def test_v3_system_prompts_are_joined_into_the_header():
    template = get_template("deepseek-v3")
    text = template.messages2prompt([s("A"), u("q"), s("B")], date=DATE)
    assert text == "<｜begin▁of▁sentence｜>A\n\nB<｜User｜>q<｜Assistant｜>"


def test_phi3_without_generation_prompt_ends_with_eos():
    text = get_template("phi3").messages2prompt([u("Hi")], add_generation_prompt=False)
    assert text == "<|user|>\nHi<|end|>\n<|endoftext|>"


@pytest.mark.parametrize("name", ["phi3", "phi4", "deepseek-coder", "deepseek-v3", "deepseek-r1"])
def test_later_turns_are_pure_deltas(name):
    session = Session(name, system="Be brief.", date=DATE)
    session.prompt("Hi")
    session.commit("Hello")
    delta = session.prompt("More")
    full = get_template(name).messages2prompt([s("Be brief."), u("Hi"), a("Hello"), u("More")], date=DATE)
    assert not delta.reset and session.context == full


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.sampled_from(["user", "tool", "system"]), TEXT, TEXT),
                      max_size=6))
def test_session_invariant_with_tool_results(name, steps):
    template = get_template(name)
    session = Session(template, date=DATE)
    for role, content, answer in steps:
        before = session.context
        try:
            full = template.messages2prompt(session.messages + [{"role": role, "content": content}], date=DATE)
        except ValueError:
            return
        delta = session.prompt(content, role=role)
        assert delta.text == full if delta.reset else before + delta.text == full
        session.commit(answer)
