"""Reasoning: ``<think>`` blocks split from answers, whether the model or the prompt opened them."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lmchat
from lmchat import ResponseStream, parse_response
from lmchat.reasoning import split_reasoning
from lmchat.tools import (
    ReasoningDelta,
    ResponseFormat,
    collect,
    prompt_opens_think,
    response_format,
)

from .hypothesis_profiles import examples


@pytest.mark.parametrize("template, text, reasoning, content", [
    ("qwen3", "<think>\nThe user greets.\n</think>\n\nHello!", "The user greets.", "Hello!"),
    ("qwen3", "<think>\n\n</think>\n\nHello!", None, "Hello!"),  # an empty block carries no reasoning
    ("qwen3", "Hello!", None, "Hello!"),  # enable_thinking=False: the prompt closed the block
    ("qwq", "Let me think.\n</think>\n\n42", "Let me think.", "42"),  # the prompt opened the block
    ("deepseek-r1", "<think>\nhmm\n</think>\n\n42", "hmm", "42"),
    ("phi4", "<think>step</think>\n\n42", "step", "42"),  # Phi-4-reasoning
    (ResponseFormat("glm45", reasoning=True), "\n<think>a\nb</think>c", "a\nb", "c"),
    ("qwen2.5", "<think>x</think>y", None, "<think>x</think>y"),  # not a reasoning model
])
def test_reasoning_is_split_off(template, text, reasoning, content):
    assert split_reasoning(template, text) == (reasoning, content)
    parsed = parse_response(template, text)
    assert (parsed.reasoning_content, parsed.content, parsed.errors) == (reasoning, content, [])


def test_templates_say_whether_their_prompt_opens_the_block():
    assert prompt_opens_think("qwq") and prompt_opens_think(lmchat.get_template("qwq"))
    assert not prompt_opens_think("qwen3")
    assert not prompt_opens_think("qwen3", enable_thinking=False)  # an empty, closed block
    assert not prompt_opens_think("deepseek-r1")  # this template revision leaves <think> to the model
    assert not prompt_opens_think(ResponseFormat("glm45", reasoning=True))


def test_reasoning_templates_are_known():
    thinking = [name for name in lmchat.template_names() if response_format(name).reasoning]
    assert thinking == ["command-r7b",
                        "deepseek-r1", "deepseek-r1-distill", "deepseek-v3.1", "gemma4", "gemma4-e4b", "glm-4.5",
                        "gpt-oss", "granite-3.3", "phi4", "phi4-reasoning", "qwen3", "qwen3-thinking-2507", "qwq",
                        "smollm3"]
    assert response_format("deepseek_r1") == response_format(lmchat.get_template("deepseek-r1"))


def test_prompt_opened_overrides_the_template():
    # R1 served with a later Hub revision of its template, which ends the prompt with <think>\n
    assert split_reasoning("deepseek-r1-distill", "hmm\n</think>\n\n42") == ("hmm", "42")  # its prompt opens it
    assert split_reasoning("deepseek-r1", "hmm\n</think>\n\n42", prompt_opened=True) == ("hmm", "42")
    parsed = parse_response("deepseek-r1", "hmm\n</think>\n\n42")
    assert parsed.content == "hmm\n</think>\n\n42" and "prompt_opened=True" in parsed.errors[0]


def test_an_answer_cut_off_while_thinking_is_all_reasoning():
    parsed = parse_response("qwq", "Step 1.\nStep 2.\n")
    assert (parsed.reasoning_content, parsed.content) == ("Step 1.\nStep 2.", "")
    assert parsed.errors == ["the output ends inside <think> (no </think>): all of it is reasoning"]


def test_a_think_block_later_in_the_answer_is_content():
    parsed = parse_response("qwen3", "Sure. <think>x</think> done")
    assert parsed.reasoning_content is None and parsed.content == "Sure. <think>x</think> done"
    assert len(parsed.errors) == 1  # the stray </think>


def test_reasoning_then_tool_calls():
    text = ('<think>\nNeed weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": '
            '{"city": "Paris"}}\n</tool_call>')
    parsed = parse_response("qwen3", text)
    assert parsed.reasoning_content == "Need weather." and parsed.content == ""
    assert parsed.tool_calls[0]["function"]["arguments"] == '{"city": "Paris"}'
    text = "<think>x</think><tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"
    assert parse_response(ResponseFormat("glm45", reasoning=True), text).reasoning_content == "x"


def test_a_tool_call_inside_reasoning_stays_reasoning():
    text = '<think>maybe <tool_call>{"name": "f", "arguments": {}}</tool_call></think>no'
    parsed = parse_response("qwen3", text)
    assert parsed.tool_calls == [] and parsed.content == "no" and "<tool_call>" in parsed.reasoning_content


def test_reasoning_streams_before_the_block_closes():
    stream = ResponseStream("qwq")
    early = stream.feed("First, ") + stream.feed("consider")
    assert "".join(e.text for e in early if isinstance(e, ReasoningDelta)) == "First, consider"


@settings(max_examples=examples(200), deadline=None)
@given(
    pieces=st.lists(st.sampled_from(["<think>", "</think>", "\n", " ", "a", "<th", "</", "b\n\n"]), max_size=12),
    cut_seed=st.lists(st.integers(0, 200), max_size=10),
    opened=st.booleans(),
)
def test_any_chunking_splits_reasoning_the_same(pieces, cut_seed, opened):
    text = "".join(pieces)
    cuts = sorted({c % (len(text) + 1) for c in cut_seed})
    stream = ResponseStream("qwen3", prompt_opened=opened)
    events, start = [], 0
    for end in cuts + [len(text)]:
        events += stream.feed(text[start:end])
        start = end
    result = collect(events + stream.finish())
    whole = parse_response("qwen3", text, prompt_opened=opened)
    assert result == whole
    assert split_reasoning("qwen3", text, prompt_opened=opened) == (whole.reasoning_content, whole.content)


def test_rendered_reasoning_parses_back():
    template = lmchat.get_template("qwen3")
    answer = {"role": "assistant", "content": "Paris.", "reasoning_content": "Capital of France."}
    messages = [{"role": "user", "content": "Capital?"}, answer]
    prefix = template.messages2prompt(messages[:1])
    full = template.messages2prompt(messages, add_generation_prompt=False)
    text = full[len(prefix): -len(template.eoa + template.separator)]
    assert text == "<think>\nCapital of France.\n</think>\n\nParis."
    assert split_reasoning(template, text) == ("Capital of France.", "Paris.")
