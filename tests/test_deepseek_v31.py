"""DeepSeek-V3.1: its template (thinking switch, history policy, tool calls) against the official one, and the
parser of its tool calls and reasoning.

The parser cases take the outputs and expected messages of llama.cpp's ``tests/test-chat.cpp`` DeepSeek-V3.1
cases (reasoning forced open by the prompt or not, one call, content and reasoning before several calls, a call
written inside the reasoning) and of vLLM's ``tests/tool_use/test_deepseekv31_tool_parser.py`` (content then one
call, two calls), as far as they are known here, from memory of their assertions: not copied, and not checked
against the published files. Where lmchat's conventions differ (content is "" rather than None; arguments are
compared as JSON values) the case says so. Every case also runs cut at every split point and a character at a
time.
"""
from __future__ import annotations

import pytest

from lmchat import ResponseStream, Session, get_template, match_template, parse_response
from lmchat.tools import ResponseFormat, ToolCallArgumentsDelta, ToolCallStart, collect
from lmchat.tools.registry import prompt_opens_think

from .parser_chunks import calls, check_every_split
from .test_conformance import assert_same

FMT = ResponseFormat("deepseek_v31", reasoning=True)
BEGIN, END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
EOS = "<｜end▁of▁sentence｜>"


def call(name, args):
    """The model's text of one call, as the template writes it."""
    return f"<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{args}<｜tool▁call▁end｜>"


TOKYO = call("get_time", '{"city": "Tokyo"}')
# (label, model output, whether the prompt opened <think>, content, reasoning, calls)
CASES = [
    # llama.cpp: thinking forced open (the prompt ends with <think>), the reasoning closed, no answer yet
    ("llama_cpp_reasoning_only", "I'm\nthinking</think>", True, "", "I'm\nthinking", []),
    ("llama_cpp_reasoning_and_content", "I'm\nthinking</think>Hello, world!\nWhat's up?", True,
     "Hello, world!\nWhat's up?", "I'm\nthinking", []),
    # llama.cpp: the prompt did not open the block (non-thinking): a </think> the model writes is content
    # (llama.cpp: content "REASONING</think>ok"; lmchat also notes the stray marker)
    ("llama_cpp_not_opened", "REASONING</think>ok", False, "REASONING</think>ok", None, []),
    # llama.cpp: "happy path for when it works as the model card says it should"
    ("llama_cpp_one_call", BEGIN + TOKYO + END, False, "", None, [("get_time", {"city": "Tokyo"})]),
    ("llama_cpp_reasoning_then_call", "REASONING</think>" + BEGIN + TOKYO + END, True, "", "REASONING",
     [("get_time", {"city": "Tokyo"})]),
    ("llama_cpp_content_and_two_calls",
     "REASONING</think>CONTENT" + BEGIN + call("get_time", '{"city": "Paris"}')
     + call("get_weather", '{"city": "Paris"}') + END, True, "CONTENT", "REASONING",
     [("get_time", {"city": "Paris"}), ("get_weather", {"city": "Paris"})]),
    # llama.cpp: a call written inside the reasoning is reasoning text; only the one after </think> is a call
    ("llama_cpp_call_inside_reasoning",
     "REASONING" + BEGIN + call("get_time2", '{"city": "Tokyo2"}') + END + "REASONING</think>" + BEGIN + TOKYO + END,
     True, "", "REASONING" + BEGIN + call("get_time2", '{"city": "Tokyo2"}') + END + "REASONING",
     [("get_time", {"city": "Tokyo"})]),
    ("llama_cpp_plain_content", "CONTENT", False, "CONTENT", None, []),
    # vLLM: content, then one call (vLLM compares the arguments' text '{"x":1}')
    ("vllm_with_tool", "normal text" + BEGIN + call("foo", '{"x":1}') + END, False, "normal text", None,
     [("foo", {"x": 1})]),
    ("vllm_with_multiple_tools", "normal text" + BEGIN + call("foo", '{"x":1}') + call("bar", '{"y":2}') + END,
     False, "normal text", None, [("foo", {"x": 1}), ("bar", {"y": 2})]),
    ("nested_arguments", BEGIN + call("f", '{"a": {"b": [1, "}<"]}, "c": "<｜tool▁sep｜>"}') + END, False, "", None,
     [("f", {"a": {"b": [1, "}<"]}, "c": "<｜tool▁sep｜>"})]),
]


@pytest.mark.parametrize("label, text, opened, content, reasoning, expected", CASES, ids=[c[0] for c in CASES])
def test_llama_cpp_and_vllm_cases_whole_and_streamed_at_every_split(label, text, opened, content, reasoning,
                                                                    expected):
    parsed = check_every_split(FMT, text, prompt_opened=opened)
    assert (parsed.content, parsed.reasoning_content, calls(parsed)) == (content, reasoning, expected)
    assert bool(parsed.errors) == (label == "llama_cpp_not_opened")


def test_llama_cpp_difference_a_call_in_reasoning_never_closed_stays_reasoning():
    # llama.cpp reads the call out of an unclosed reasoning block when the output is complete (its V3.1 "hack");
    # lmchat keeps the whole output as reasoning, with a note, as it does for every template
    text = "REASONING" + BEGIN + TOKYO + END
    parsed = check_every_split(FMT, text, prompt_opened=True)
    assert (parsed.content, parsed.reasoning_content, calls(parsed)) == ("", text, [])
    assert parsed.errors


def test_the_name_is_announced_at_the_separator_and_arguments_stream():
    stream = ResponseStream(FMT)
    events = stream.feed(BEGIN + "<｜tool▁call▁begin｜>get_ti")
    assert not any(isinstance(e, ToolCallStart) for e in events)
    started = stream.feed('me<｜tool▁sep｜>{"city": "To')
    assert [e.name for e in started if isinstance(e, ToolCallStart)] == ["get_time"]
    assert any(isinstance(e, ToolCallArgumentsDelta) for e in started)
    rest = stream.feed('kyo"}<｜tool▁call▁end｜>' + END) + stream.finish()
    assert calls(collect(events + started + rest)) == [("get_time", {"city": "Tokyo"})]


@pytest.mark.parametrize("text, note", [
    (BEGIN + "<｜tool▁call▁begin｜>no separator<｜tool▁call▁end｜>" + END, "without a 'name<｜tool▁sep｜>' head"),
    (BEGIN + call("f", '{"a": 1} trailing') + END, "text after the tool call's arguments"),
])
def test_markup_that_is_no_call_is_noted(text, note):
    parsed = check_every_split(FMT, text)
    assert any(note in e for e in parsed.errors), parsed.errors


def test_a_v3_call_is_not_read_as_v31():
    v3 = BEGIN + "<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜>" + END
    assert calls(parse_response(FMT, v3)) != [("f", {})]


# ------------------------------------------------------------------ the template
def answer_of(messages):
    """The text of the last (assistant) message as the template renders it after the prompt: what the model wrote."""
    t = get_template("deepseek-v3.1")
    before = t.messages2prompt(messages[:-1])
    after = t.messages2prompt(messages, add_generation_prompt=False)
    assert after.startswith(before)
    return after[len(before):].removesuffix(EOS)


def tool_calls(*pairs):
    return [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in pairs]


def test_calls_the_template_renders_parse_back():
    message = {"role": "assistant", "content": "Let me check.",
               "tool_calls": tool_calls(("get_time", '{"city": "Tokyo"}'), ("get_weather", '{"city": "Paris"}'))}
    text = answer_of([{"role": "user", "content": "Hi"}, message])
    assert text == "Let me check." + BEGIN + TOKYO + call("get_weather", '{"city": "Paris"}') + END
    parsed = check_every_split(FMT, text)
    assert (parsed.content, calls(parsed), parsed.errors) == \
        ("Let me check.", [("get_time", {"city": "Tokyo"}), ("get_weather", {"city": "Paris"})], [])


def test_the_template_names_the_format_and_bundles_the_model_settings():
    for name in ("DeepSeek-V3.1", "deepseek_v3.1", "DeepSeek-V3.1-Terminus"):
        t = get_template(name)
        assert t.name == "deepseek-v3.1"
    assert type(t).tool_format == "deepseek_v31" and type(t).reasoning
    assert (t.temperature, t.top_p, t.session_len) == (0.6, 0.95, 163840)
    assert not prompt_opens_think(t) and prompt_opens_think(t, thinking=True)


def test_without_thinking_a_session_only_appends():
    session = Session("deepseek-v3.1")
    assert session.prompt("Hi").text == "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>"
    session.commit("Hello.")
    delta = session.prompt("Again")
    assert not delta.reset and delta.text == EOS + "<｜User｜>Again<｜Assistant｜></think>"


def test_with_thinking_the_reasoning_is_dropped_from_history_and_the_session_resets_honestly():
    session = Session("deepseek-v3.1", template_kwargs={"thinking": True})
    assert session.prompt("Hi").text.endswith("<｜Assistant｜><think>")
    session.commit("the user greets</think>Hello.")
    delta = session.prompt("Again")
    assert delta.reset and delta.sequence_start and delta.reason
    assert delta.text == ("<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>Hello." + EOS
                          + "<｜User｜>Again<｜Assistant｜><think>")


def test_after_tool_results_the_model_answers_with_no_generation_prompt():
    session = Session("deepseek-v3.1")
    session.prompt("Time in Tokyo?")
    session.commit(BEGIN + TOKYO + END)
    full = get_template("deepseek-v3.1").messages2prompt([
        {"role": "user", "content": "Time in Tokyo?"},
        {"role": "assistant", "content": "", "tool_calls": tool_calls(("get_time", '{"city": "Tokyo"}'))},
        {"role": "tool", "content": "12:00"}])
    assert full.endswith(END + EOS + "<｜tool▁output▁begin｜>12:00<｜tool▁output▁end｜>")


# fixed conversations compared with the official template (golden vectors)
def u(text):
    return {"role": "user", "content": text}


def a(text, **extra):
    return {"role": "assistant", "content": text, **extra}


def tool(text):
    return {"role": "tool", "content": text}


GOLDEN_CONVERSATIONS = [
    [u("q")],
    [{"role": "system", "content": "A"}, u("q"), {"role": "system", "content": "B"}],
    [u("q"), a("why</think>because</think>then"), u("q2")],
    [u("q"), a("plain"), u("q2"), a("thought</think>", prefix=True)],
    [u("q"), a("", prefix=True)],
    [u("q"), a("c", tool_calls=tool_calls(("f", '{"x": 1}'), ("g", "{}"))), tool("r1"), tool("r2"),
     a("x</think>kept"), u("q2")],
    [u("q"), a("c", tool_calls=[]), tool("r")],
    [u("q"), {"role": "assistant", "tool_calls": tool_calls(("f", "{}"))}],  # no content: the official fails
    [u("q"), a("c", tool_calls=tool_calls(("f", {"x": 1})))],  # arguments not a string: the official fails
    [u("q"), a("c", tool_calls=[{"function": {"name": "f", "arguments": "{}"}}]), u("q2")],  # no type: fine
    [tool("r"), u("q"), {"role": "critic", "content": "x"}],
    [u("q"), tool("r"), a("after tool</think>x")],
]
GOLDEN = [("deepseek-v3.1", messages, {"add_generation_prompt": generation_prompt, **thinking})
          for messages in GOLDEN_CONVERSATIONS for thinking in ({}, {"thinking": True}, {"thinking": False})
          for generation_prompt in (True, False)]


@pytest.mark.parametrize("name, messages, options", GOLDEN)
def test_thinking_history_and_calls_render_as_the_official_template_does(name, messages, options):
    assert_same(name, messages, **options)


@pytest.mark.parametrize("model, name", [
    ("deepseek-ai/DeepSeek-V3.1", "deepseek-v3.1"), ("deepseek-ai/DeepSeek-V3.1-Terminus", "deepseek-v3.1"),
    ("unsloth/DeepSeek-V3.1-GGUF", "deepseek-v3.1"), ("deepseek-ai/DeepSeek-V3", "deepseek-v3"),
    ("deepseek-ai/DeepSeek-V3-0324", "deepseek-v3"),
])
def test_model_names_match(model, name):
    assert match_template(model) == name
