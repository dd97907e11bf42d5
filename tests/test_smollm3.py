"""SmolLM3-3B: its template (the metadata header, the reasoning mode and its flags, the tool listings) against the
official one, sessions, and the parser of its answers (``<think>`` reasoning, Hermes' ``<tool_call>`` tags).

The parser cases take the outputs and expected messages of llama.cpp's ``tests/test-chat.cpp`` Hermes 2 Pro
cases (which llama.cpp's handler for templates with ``<tool_call>`` runs; plain content, reasoning then content,
one call, reasoning then a call, content then a call) and of vLLM's ``tests/entrypoints/openai/tool_parsers/
test_hermes_tool_parser.py`` (one call, two calls, content before a call), the parser vLLM's SmolLM3 recipe
names, as far as they are known here, from memory of their assertions: not copied, and not checked against the
published files. Content is "" rather than None and arguments are compared as JSON values. Every case also runs
cut at every split point, a character at a time and in odd chunk sizes.
"""
from __future__ import annotations

import datetime as dt
import json

import pytest

from lmchat import Session, get_template, match_template, parse_response
from lmchat.tools.registry import prompt_opens_think

from .conversations import TOOLS, a, call, s, tool, u
from .parser_chunks import calls, check_every_split
from .test_conformance import assert_same

HELLO = "Hello, world!\nWhat's up?"
SPECIAL = ("special_function", {"arg1": 1})
SIZES = ([1], [2], [3], [5], [7, 1], [11, 2, 1])  # a character at a time, then odd chunk sizes
SPECIAL_CALL = '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>'
SF = {"location": "San Francisco, California, United States", "unit": "celsius"}
SF_CALL = '<tool_call>{"name": "get_current_temperature", "arguments": ' + json.dumps(SF) + "}</tool_call>"
# (label, model output, content, reasoning, calls)
CASES = [
    ("llama_cpp_content", HELLO, HELLO, None, []),
    ("llama_cpp_thoughts", "<think>I'm\nthinking</think>" + HELLO, HELLO, "I'm\nthinking", []),
    ("llama_cpp_call", SPECIAL_CALL, "", None, [SPECIAL]),
    ("llama_cpp_thoughts_then_call", "<think>I'm\nthinking</think>" + SPECIAL_CALL, "", "I'm\nthinking", [SPECIAL]),
    ("llama_cpp_content_then_call", HELLO + "\n" + SPECIAL_CALL, HELLO, None, [SPECIAL]),
    ("vllm_one_call", SF_CALL, "", None, [("get_current_temperature", SF)]),
    ("vllm_two_calls", SF_CALL + "\n" + SF_CALL.replace("San Francisco", "Paris"), "", None,
     [("get_current_temperature", SF),
      ("get_current_temperature", {**SF, "location": "Paris, California, United States"})]),
    ("vllm_content_before_call", "I'll check the temperature.\n" + SF_CALL, "I'll check the temperature.", None,
     [("get_current_temperature", SF)]),
    # SmolLM3's thinking answer as its system prompt asks for it, then a call
    ("smollm3_think_then_call", "<think>\nThe user wants the weather.\n</think>\n" + SPECIAL_CALL, "",
     "The user wants the weather.", [SPECIAL]),
]


@pytest.mark.parametrize("label, text, content, reasoning, expected", CASES, ids=[c[0] for c in CASES])
def test_llama_cpp_and_vllm_cases_whole_and_streamed_at_every_split(label, text, content, reasoning, expected):
    parsed = check_every_split("smollm3", text, sizes=SIZES)
    assert (parsed.content, parsed.reasoning_content, calls(parsed), parsed.errors) == \
        (content, reasoning, expected, [])


def test_the_no_think_prompt_closes_its_block_and_answers_are_content():
    assert not prompt_opens_think("smollm3") and not prompt_opens_think("smollm3", enable_thinking=False)
    parsed = parse_response("smollm3", "Paris.")
    assert (parsed.content, parsed.reasoning_content) == ("Paris.", None)


# ------------------------------------------------------------------ the template
def test_names_and_bundled_settings():
    t = get_template("SmolLM3-3B")
    assert t.name == "smollm3" and get_template("smollm3-3b").name == "smollm3"
    assert (type(t).tool_format, type(t).reasoning) == ("hermes", True)
    assert (t.temperature, t.top_p, t.session_len, t.stop_words) == (0.6, 0.95, 65536, ("<|im_end|>",))


@pytest.mark.parametrize("model", ["HuggingFaceTB/SmolLM3-3B", "ggml-org/SmolLM3-3B-GGUF", "unsloth/SmolLM3-3B-GGUF"])
def test_model_names_match(model):
    assert match_template(model) == "smollm3"


PYTHON_TOOLS = [{"name": "search", "description": "web search", "args": {"q": "str"}}, "plain string tool"]
CONVERSATIONS = [
    [u("hi")],
    [s("Be brief."), u("hi"), a("hello"), u("again")],
    [s("Be brief. /no_think"), u("hi"), a("\n\nhello"), u("again")],
    [s("/think Be brief.  \n"), u("hi"), a("<think>\nhmm\n</think>\nhello")],
    [s("both /no_think and /think")],
    [s("/no_think")],  # no instructions left: the default ones
    [s("Custom block. /system_override /think  "), u("hi")],
    [s("sys"), u("hi"), s("later systems are skipped"), {"role": "critic", "content": "x"}, u("again")],
    [u("Weather?"), a("", tool_calls=[call("get_current_weather", {"location": "Paris"})]), tool("22"), tool("23")],
    [u(["not a string"]), a({"k": 1}), {"role": "tool"}],  # content that is not a string: ''
    [a("\n\nfirst"), u("hi")],
    [s(["parts"]), u("hi")],  # a system prompt that is not a string: the official template fails
    [{"role": "system"}, u("hi")],
]
OPTIONS = [
    {}, {"enable_thinking": False}, {"enable_thinking": None}, {"add_generation_prompt": False},
    {"tools": TOOLS}, {"tools": TOOLS, "enable_thinking": False}, {"tools": []}, {"xml_tools": TOOLS[1:]},
    {"tools": TOOLS[:1], "xml_tools": TOOLS[1:]}, {"python_tools": PYTHON_TOOLS},
    {"tools": TOOLS, "python_tools": PYTHON_TOOLS}, {"date": dt.date(2025, 12, 1)},
]
GOLDEN = [("smollm3", m, o) for m in CONVERSATIONS for o in OPTIONS] + [
    ("smollm3", [u("hi")], {"enable_thinking": False, "date": dt.date(2025, 12, 1)})]


@pytest.mark.parametrize("name, messages, options", GOLDEN)
def test_render_as_the_official_template_does(name, messages, options):
    assert_same(name, messages, **options)


def test_the_header_names_the_date_and_mode_and_ends_only_with_tools():
    text = assert_same("smollm3", [u("hi")], enable_thinking=False, date=dt.date(2025, 12, 1))
    assert "Today Date: 01 December 2025\nReasoning Mode: /no_think\n" in text
    assert text.endswith("trained by Hugging Face.\n\n<|im_start|>user\nhi<|im_end|>\n"
                         "<|im_start|>assistant\n<think>\n\n</think>\n")
    text = assert_same("smollm3", [u("hi")], tools=TOOLS)
    assert "{'type': 'function', 'function': {'name': 'get_current_weather'" in text  # as Python prints it
    assert "</tool_call>\n\n<|im_end|>\n<|im_start|>user\nhi" in text


# ------------------------------------------------------------------ sessions
DATE = dt.date(2025, 8, 1)


@pytest.mark.parametrize("options", [{}, {"enable_thinking": False}])
def test_a_session_only_appends_in_either_mode(options):
    session = Session("smollm3", template_kwargs=options, date=DATE)
    first = session.prompt("2+2?")
    thinking = not options
    assert first.text.endswith("<|im_start|>assistant\n" + ("" if thinking else "<think>\n\n</think>\n"))
    session.commit("<think>\nadd\n</think>\n4" if thinking else "4")
    delta = session.prompt("3+3?")
    assert not delta.reset
    assert delta.text == "\n<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n" + \
        ("" if thinking else "<think>\n\n</think>\n")


def test_the_flag_in_the_system_prompt_outweighs_enable_thinking():
    session = Session("smollm3", system="Be brief. /no_think", template_kwargs={"enable_thinking": True}, date=DATE)
    text = session.prompt("hi").text
    assert "Reasoning Mode: /no_think" in text and "Be brief.\n\n" in text
    assert text.endswith("<think>\n\n</think>\n")


def test_an_answer_opening_with_newlines_is_rewritten_and_the_session_resets_honestly():
    session = Session("smollm3", date=DATE)
    session.prompt("hi")
    session.commit("\n\nHello.")
    delta = session.prompt("again")
    assert delta.reset and delta.sequence_start and "renders earlier turns differently" in delta.reason
    assert "<|im_start|>assistant\nHello.<|im_end|>\n" in delta.text


def test_a_call_kept_as_tool_calls_is_not_rendered_and_the_session_resets_honestly():
    # the official template renders an answer's content only: the call the model wrote is gone from the history
    session = Session("smollm3", tools=TOOLS, template_kwargs={"enable_thinking": False}, date=DATE)
    session.prompt("Weather in Paris?")
    raw = '<tool_call>\n{"name": "get_current_weather", "arguments": {"location": "Paris"}}\n</tool_call>'
    parsed = parse_response("smollm3", raw)
    session.commit(raw, content=parsed.content, tool_calls=parsed.tool_calls)
    delta = session.extend([tool("22", parsed.tool_calls[0]["id"])])
    assert delta.reset and delta.reason
    assert delta.text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n<|im_end|>\n<|im_start|>user\n22"
                               "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n")
