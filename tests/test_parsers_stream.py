"""Streaming: events for any chunking fold to the whole-text result; nothing shown is taken back."""
import functools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lmchat
from lmchat import ResponseStream, parse_response
from lmchat.tools import (
    FORMATS,
    ContentDelta,
    ReasoningDelta,
    ResponseFormat,
    ToolCallArgumentsDelta,
    ToolCallStart,
    collect,
)
from lmchat.tools.registry import output_markers, response_format

from .hypothesis_profiles import examples
from .parser_chunks import normal

COMMON = ["text ", "\n", " ", "{", "}", '"', "\\", "日本😀", "<think>", "</think>", "<", "|"]
PIECES = {
    "plain": [],
    "hermes": ["<tool_call>", "</tool_call>", '{"name": "f", "arguments": {"a": 1}}', '{"name"', ': "g"',
               ', "arguments": {"x": "é\n"', "}}", "[", "]", ",", "<tool_", '{"arguments": {"b": [true, null]}, '],
    "llama3_json": ["<|python_tag|>", '{"name": "f", "parameters": {"a": 1}}', ";", "brave_search.call(query='x')",
                    '"name"', ":", '"g"', "<|python"],
    "mistral": ["[TOOL_CALLS]", " [", '{"name": "f", "arguments": {"a": [1, 2]}}', ",", "]", '"id": "abcdefghi"',
                "[TOOL"],
    "mistral_v11": ["[TOOL_CALLS]", "add", "[ARGS]", "[CALL_ID]", "abcdEF123", '{"a": [1, 2]}', '[{"name": "f", '
                    '"arguments": {}}]', "[TOOL", "[AR"],
    "granite": ["<|tool_call|>", "[", '{"name": "f", "arguments": {"a": 1.5e3}}', "]", ","],
    "granite33": ["<|tool_call|>", "[", '{"name": "f", "arguments": {"a": 1.5e3}}', "]", ",", "<response>",
                  "</response>", "<resp", "</resp"],
    "internlm": ["<|action_start|>", "<|plugin|>", "<|interpreter|>", "<|action_end|>",
                 '{"name": "f", "parameters": {"a": 1}}', "```python\n", "print(1)\n", "```", "<|action_st"],
    "chatglm3": ["<|assistant|>", "get_weather\n", "```python\n", "tool_call(a=1, b='x')", "\n```", "interpreter\n",
                 "tool_call(__import__('os'))", "<|assist"],
    "glm4": ["<|assistant|>", "get_weather\n", '{"a": 1}', '{"b": [', "hello"],
    "glm45": ["<tool_call>", "</tool_call>", "get_weather", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
              "city", "3", "[1]", "<arg_"],
    "deepseek_v3": ["<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "function", "<｜tool▁sep｜>",
                    "get_weather", "```json\n", '{"a": 1}', "\n```", "<｜tool▁call▁end｜>",
                    "<｜tool▁calls▁end｜>", "<｜tool"],
    "deepseek_v31": ["<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "get_weather", "<｜tool▁sep｜>", '{"a": 1}',
                     "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "<｜tool"],
    "command_r": ["Action:", " ```json\n", "```", "[", "]", ",", '{"tool_name": "f", "parameters": {"a": 1}}',
                  '{"tool_name": "directly_answer", "parameters": {}}', "Act", "``"],
    "command_r7b": ["<|START_THINKING|>", "<|END_THINKING|>", "<|START_ACTION|>", "<|END_ACTION|>",
                    "<|START_RESPONSE|>", "<|END_RESPONSE|>", "[", "]", ",",
                    '{"tool_call_id": "0", "tool_name": "f", "parameters": {"a": 1}}', "<|START", "<|END_"],
    "kimi_k2": ["<|tool_calls_section_begin|>", "<|tool_call_begin|>", "functions.get_weather:0",
                "<|tool_call_argument_begin|>", '{"a": 1}', "<|tool_call_end|>", "<|tool_calls_section_end|>",
                "<|tool"],
    "phi4_mini": ["<|tool_call|>", "<|/tool_call|>", "functools[", "functools", "[", '{"name": "f", "arguments": '
                  '{"a": 1}}', "]", ",", '{"name": "g", "parameters": {}}', "<|tool", "<|/tool"],
    "functionary_v3_1": ["<function=", "f>", "</function>", "<|python_tag|>", '{"a": 1}', "print('x')", "<func",
                         "</fun", "<|python"],
    "functionary_v3_2": [">>>", "all\n", "f\n", "python\n", '{"a": [1]}', "x = 1", ">>", "get_weather"],
    "firefunction_v2": [" functools[", "functools", "[", "]", ",", '{"name": "f", "arguments": {"a": 1}}', "functo"],
    "qwen3_coder": ["<tool_call>", "</tool_call>", "<function=", "f>", "</function>", "<parameter=", "k>",
                    "</parameter>", "42", '{"a": [1]}', "null", "<param", "</func"],
    "gemma4": ["<|channel>", "thought\n", "<channel|>", "<|tool_call>", "call:", "get_weather", "{", "}",
               "<tool_call|>", '<|"|>', "location:", ",", "[1,2.5]", "true", "null", "<|tool", "<|\"", "<chan"],
    "harmony": ["<|start|>", "assistant", "<|channel|>", "analysis", "final", "commentary", " to=functions.f",
                " to=", "<|constrain|>", "json", "<|message|>", "<|end|>", "<|call|>", "<|return|>",
                '{"a": 1}', "<|chan", "<|mess"],
}
assert set(PIECES) == set(FORMATS)


def streamed(template, text, cuts, **options):
    stream = ResponseStream(template, **options)
    events, start = [], 0
    for end in sorted(cuts) + [len(text)]:
        events += stream.feed(text[start:end])
        start = end
    return events + stream.finish()


@functools.cache
def pieces(name: str) -> st.SearchStrategy:
    """Up to 14 of a format's pieces or short texts; made once per format (a strategy made inside a draw is
    validated again at every draw)."""
    return st.lists(st.sampled_from(PIECES[name] + COMMON) | st.text(max_size=3), max_size=14)


@st.composite
def answers(draw, name):
    text = "".join(draw(pieces(name)))
    cuts = draw(st.lists(st.integers(0, len(text)), max_size=len(text)))
    return text, cuts, draw(st.booleans()), draw(st.booleans())


@pytest.mark.parametrize("name", sorted(FORMATS))
@settings(max_examples=examples(120), deadline=None)
@given(data=st.data())
def test_any_chunking_gives_the_whole_text_result(name, data):
    text, cuts, reasoning, opened = data.draw(answers(name))
    fmt = ResponseFormat(name, reasoning=reasoning)
    whole = parse_response(fmt, text, prompt_opened=opened)
    events = streamed(fmt, text, cuts, prompt_opened=opened)
    assert normal(collect(events)) == normal(whole)
    assert all(event.text for event in events if isinstance(event, (ContentDelta, ReasoningDelta)))


@pytest.mark.parametrize("template, text", [
    ("qwen3", '<think>\nplan\n</think>\n\nSure.\n<tool_call>\n{"name": "get_weather", "arguments": '
              '{"city": "巴黎", "days": [1, 2]}}\n</tool_call>'),
    ("llama3.1", '{"name": "get_weather", "parameters": {"city": "巴黎", "days": [1, 2]}}'),
    ("mistral-v0.3", '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "巴黎", "days": [1, 2]}}]'),
    ("internlm2", '<|action_start|><|plugin|>\n{"name": "get_weather", '
                  '"parameters": {"city": "巴黎", "days": [1, 2]}}'),
    ("glm4", 'get_weather\n{"city": "巴黎", "days": [1, 2]}'),
    ("deepseek-r1", '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n'
                    '```json\n{"city": "巴黎", "days": [1, 2]}\n```'
                    '<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
])
def test_names_come_whole_and_arguments_stream_as_they_arrive(template, text):
    stream = ResponseStream(template)
    seen = []  # (characters fed so far, event)
    for k, ch in enumerate(text):
        seen += [(k + 1, e) for e in stream.feed(ch)]
    seen += [(len(text), e) for e in stream.finish()]
    starts = [e for _, e in seen if isinstance(e, ToolCallStart)]
    assert [e.name for e in starts] == ["get_weather"]
    deltas = [(k, e.text) for k, e in seen if isinstance(e, ToolCallArgumentsDelta)]
    assert len(deltas) > 5 and deltas[0][0] < text.index("巴黎") + 3  # not buffered until the call ends
    assert json.loads("".join(t for _, t in deltas)) == {"city": "巴黎", "days": [1, 2]}


@pytest.mark.parametrize("template, before, after", [
    ("qwen2.5", "Hello <tool_", 'call>{"name": "f", "arguments": {}}</tool_call>'),
    ("qwen3", "<thi", "nk>x</think>Hello"),
    ("internlm2", "Hi<|action_start|><|plu", 'gin|>\n{"name": "f", "parameters": {}}'),
    ("deepseek-v3", "Hi<｜tool▁call",
     "s▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n{}<｜tool▁call▁end｜>"),
])
def test_a_marker_prefix_at_a_chunk_end_is_held_back(template, before, after):
    stream = ResponseStream(template)
    shown = "".join(e.text for e in stream.feed(before) if isinstance(e, ContentDelta))
    assert "<" not in shown
    result = collect(stream.feed(after) + stream.finish())
    assert "<" not in result.content and not result.errors


def test_a_marker_prefix_that_stays_text_is_released_at_the_end():
    stream = ResponseStream("qwen2.5")
    events = stream.feed("a <tool_") + stream.finish()
    assert collect(events).content == "a <tool_"


def test_a_finished_stream_takes_no_more_text():
    stream = ResponseStream("qwen2.5")
    assert collect(stream.feed("Hi ") + stream.finish()).content == "Hi "
    assert stream.finish() == []
    with pytest.raises(RuntimeError):
        stream.feed("more")


@pytest.mark.parametrize("template", lmchat.template_names())
@settings(max_examples=examples(40), deadline=None)
@given(data=st.data())
def test_every_template_parses_a_whole_answer_as_its_stream_does(template, data):
    """``parse_response`` skips the parser for answers without markup (most of them): on every registered
    template, with the prompt opening a think block or not as the template does, it agrees with the parser."""
    name = response_format(template).tools
    text, _, _, _ = data.draw(answers(name))
    plain = data.draw(st.booleans())
    if plain:  # an answer without markers: the skip is taken unless the text itself can be a call
        for marker in output_markers(template):
            text = text.replace(marker, marker[:-1])
    parser = ResponseStream(template)
    assert normal(parse_response(template, text)) == normal(collect(parser.feed(text) + parser.finish()))
