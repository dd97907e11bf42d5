"""Kimi-K2-Instruct: its template against the official one, and the parser of its tool calls.

The parser cases take the outputs and expected calls of vLLM's ``tests/tool_use/test_kimi_k2_tool_parser.py``
(content before one call, two calls with spaces around the markers, calls written back to back) and of
llama.cpp's ``tests/test-chat.cpp`` Kimi-K2 cases (one call, content then a call), as far as they are known
here, from memory of their assertions: not copied, and not checked against the published files. The call's id
is the one the model wrote (``functions.NAME:IDX``), as both keep it; arguments are compared as JSON values.
Every case also runs cut at every split point and a character at a time.
"""
from __future__ import annotations

import pytest

from lmchat import ResponseStream, Session, get_template, match_template
from lmchat.tools import ResponseFormat, ToolCallStart

from .parser_chunks import calls, check_every_split
from .test_conformance import assert_same

FMT = ResponseFormat("kimi_k2")
BEGIN, END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"


def call(call_id, args, space=""):
    """The model's text of one call, as the template writes it (``space``: around each marker, as vLLM's cases)."""
    return (f"<|tool_call_begin|>{space}{call_id}{space}<|tool_call_argument_begin|>{space}{args}{space}"
            "<|tool_call_end|>")


BEIJING = ("functions.get_weather:0", "get_weather", {"city": "Beijing"})
SHANGHAI = ("functions.get_weather:1", "get_weather", {"city": "Shanghai"})
# (label, model output, content, calls)
CASES = [
    ("vllm_no_tools", "This is a test", "This is a test", []),
    ("vllm_content_before_call",
     "I'll help you check the weather. " + BEGIN + " " + call("functions.get_weather:0", '{"city": "Beijing"}', " ")
     + " " + END, "I'll help you check the weather.", [BEIJING]),  # vLLM keeps the space before the section
    ("vllm_two_calls_with_content_before",
     "I'll help you check the weather. " + BEGIN + " " + call("functions.get_weather:0", '{"city": "Beijing"}', " ")
     + " " + call("functions.get_weather:1", '{"city": "Shanghai"}', " ") + " " + END,
     "I'll help you check the weather.", [BEIJING, SHANGHAI]),  # lmchat drops whitespace next to calls
    ("vllm_concatenated_calls",
     BEGIN + call("functions.get_weather:0", '{"city": "Beijing"}') + call("functions.get_weather:1",
                                                                         '{"city": "Shanghai"}') + END,
     "", [BEIJING, SHANGHAI]),
    ("llama_cpp_one_call", BEGIN + call("functions.special_function:0", '{"arg1": 1}') + END, "",
     [("functions.special_function:0", "special_function", {"arg1": 1})]),
    ("llama_cpp_content_then_call",
     "Hello, world!\nWhat's up?" + BEGIN + call("functions.special_function:0", '{"arg1": 1}') + END,
     "Hello, world!\nWhat's up?", [("functions.special_function:0", "special_function", {"arg1": 1})]),
    # markup other than <|tool_call_end|> inside a string is text (that marker ends the call wherever it is, as
    # vLLM's pattern ends it)
    ("nested_and_markup_in_strings",
     BEGIN + call("functions.f.g:3", '{"a": {"b": [1, "<|tool_call_argument_begin|>"]}}') + END,
     "", [("functions.f.g:3", "f.g", {"a": {"b": [1, "<|tool_call_argument_begin|>"]}})]),
    ("bare_name_without_index", BEGIN + call("lookup", "{}") + END, "", [("lookup", "lookup", {})]),
]


@pytest.mark.parametrize("label, text, content, expected", CASES, ids=[c[0] for c in CASES])
def test_vllm_and_llama_cpp_cases_whole_and_streamed_at_every_split(label, text, content, expected):
    parsed = check_every_split(FMT, text, ids=True)
    assert (parsed.content, calls(parsed, ids=True), parsed.errors) == (content, expected, [])


def test_the_call_is_announced_with_the_written_id_once_it_is_complete():
    stream = ResponseStream(FMT)
    assert not any(isinstance(e, ToolCallStart) for e in stream.feed(BEGIN + "<|tool_call_begin|>functions.f:"))
    started = stream.feed('0<|tool_call_argument_begin|>{"x": ')
    assert [(e.id, e.name) for e in started if isinstance(e, ToolCallStart)] == [("functions.f:0", "f")]


@pytest.mark.parametrize("text, note", [
    (BEGIN + "<|tool_call_begin|>functions.f:0 no argument marker<|tool_call_end|>" + END,
     "without a 'functions.NAME:IDX<|tool_call_argument_begin|>' head"),
    (BEGIN + call("functions.f:0", '{"a": 1} trailing') + END, "text after the tool call's arguments"),
])
def test_markup_that_is_no_call_is_noted(text, note):
    parsed = check_every_split(FMT, text, ids=True)
    assert any(note in e for e in parsed.errors), parsed.errors


def test_a_call_cut_off_keeps_what_it_has_with_a_note():
    parsed = check_every_split(FMT, BEGIN + "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\": 1",
                               ids=True)
    assert [c[1] for c in calls(parsed, ids=True)] == ["f"] and parsed.errors


# ------------------------------------------------------------------ the template
def tool_calls(*pairs):
    return [{"id": i, "type": "function", "function": {"name": i.split(".")[-1].split(":")[0], "arguments": a}}
            for i, a in pairs]


def test_calls_the_template_renders_parse_back_with_their_ids():
    t = get_template("kimi-k2")
    pairs = (("functions.get_weather:0", '{"city": "Beijing"}'), ("functions.get_weather:1", {"city": "Shanghai"}))
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "Checking.", "tool_calls": tool_calls(*pairs)}]
    before, after = t.messages2prompt(messages[:-1]), t.messages2prompt(messages, add_generation_prompt=False)
    assert after.startswith(before)
    text = after[len(before):].removesuffix("<|im_end|>")
    parsed = check_every_split(FMT, text, ids=True)
    assert (parsed.content, calls(parsed, ids=True)) == ("Checking.", [BEIJING, SHANGHAI])


def test_the_template_names_the_format_and_bundles_the_model_settings():
    t = get_template("Kimi-K2-Instruct")
    assert t.name == "kimi-k2" and type(t).tool_format == "kimi_k2" and not type(t).reasoning
    assert (t.temperature, t.session_len) == (0.6, 131072)


def test_a_session_holds_a_call_by_its_id_and_only_appends():
    session = Session("kimi-k2")
    first = session.prompt("Weather in Beijing?")
    assert first.text.startswith("<|im_system|>system<|im_middle|>You are Kimi")
    session.commit(BEGIN + call("functions.get_weather:0", '{"city": "Beijing"}') + END)
    delta = session.prompt("Thanks")
    assert not delta.reset and delta.text == "<|im_user|>user<|im_middle|>Thanks<|im_end|>" \
                                             "<|im_assistant|>assistant<|im_middle|>"


@pytest.mark.parametrize("model", ["moonshotai/Kimi-K2-Instruct", "moonshotai/Kimi-K2-Instruct-0905",
                                   "unsloth/Kimi-K2-Instruct-GGUF"])
def test_model_names_match(model):
    assert match_template(model) == "kimi-k2"


# fixed conversations compared with the official template (golden vectors)
def u(content, **extra):
    return {"role": "user", "content": content, **extra}


TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Wetter für 北京",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
GOLDEN_CONVERSATIONS = [
    [u("q")],
    [{"role": "system", "content": "S", "name": "policy"}, u("q", name="bob")],
    [u([{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "u"}}, {"type": "text"},
        {"type": "image", "image": "x"}, {"text": None}])],
    [u("q"), {"role": "assistant", "content": "c", "tool_calls": tool_calls(
        ("functions.get_weather:0", {"city": "北京"}), ("functions.get_weather:1", '{"city": "x"}'))},
     {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "sunny"},
     {"role": "tool", "content": [{"type": "text", "text": "t"}]}, {"role": "assistant", "content": "Done."}],
    [u("q"), {"role": "assistant", "tool_calls": [{"function": {"arguments": None}}]}],  # no id, no content
    [u("q"), {"role": "assistant", "content": "x", "tool_calls": [{"function": {"name": "f"}}]}],  # fails
    [u("q"), {"role": "assistant", "content": "x", "tool_calls": []}, {"role": "critic", "content": "y"}],
    [u(5)],  # fails: content that is neither a string nor a list
]
GOLDEN = [("kimi-k2", messages, {"tools": tools, "add_generation_prompt": generation_prompt})
          for messages in GOLDEN_CONVERSATIONS for tools in (None, [TOOL])
          for generation_prompt in (True, False)]


@pytest.mark.parametrize("name, messages, options", GOLDEN)
def test_parts_names_and_calls_render_as_the_official_template_does(name, messages, options):
    assert_same(name, messages, **options)
