"""Call-section markers that hold no call (issue 40, item 9): every format whose calls come grouped between two
markers (``section`` in the formats table, :data:`lmchat.tools.registry.FORMATS`) keeps a stray begin or end as
the model wrote it, as content, with a note. They were dropped without one: Kimi-K2's
``Hello<|tool_calls_section_end|> world`` read as ``Hello world``. SGLang's Kimi-K2 detector gives such text back
verbatim too. Each case runs whole, cut at every split point and a character at a time."""
from __future__ import annotations

import pytest

from lmchat.tools import ResponseFormat, parse_response
from lmchat.tools.registry import FORMATS

from .parser_chunks import calls, check_every_split

SECTIONED = {name: cls.section for name, cls in FORMATS.items() if cls.section is not None}
SHAPES = ["Hello{end} world", "{end}", "Hello{begin} world", "Hello{begin}", "{begin}", "Hello{begin}\n\n",
          "Hello{begin}{end} world", "{begin} {end}", "Hello{end}{begin} world", "a{end}b{end}c"]


def test_the_formats_table_names_the_call_sections():
    assert {"kimi_k2", "deepseek_v3", "deepseek_v31", "command_r7b"} <= set(SECTIONED)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("fmt", sorted(SECTIONED))
def test_section_markers_around_no_call_are_kept_as_written_with_a_note(fmt, shape):
    begin, end = SECTIONED[fmt]
    text = shape.format(begin=begin, end=end)
    parsed = check_every_split(ResponseFormat(fmt), text)
    assert (parsed.content, parsed.tool_calls) == (text, []) and parsed.errors, parsed


@pytest.mark.parametrize("template, text", [
    ("kimi-k2", "Hello<|tool_calls_section_end|> world"),
    ("deepseek-v3", "Hello<｜tool▁calls▁end｜> world"),
    ("deepseek-v3.1", "Hello<｜tool▁calls▁end｜> world"),
    ("deepseek-v3", "Hello<｜tool▁calls▁begin｜> world"),
    ("deepseek-v3.1", "Hello<｜tool▁calls▁begin｜>"),
])
def test_the_answers_of_the_issue_come_back_verbatim(template, text):
    parsed = parse_response(template, text)
    assert parsed.content == text and any("kept as content" in e for e in parsed.errors), parsed


KIMI_CALL = '<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{"a": 1}<|tool_call_end|>'
DS_CALL = '<｜tool▁call▁begin｜>f<｜tool▁sep｜>{"a": 1}<｜tool▁call▁end｜>'


@pytest.mark.parametrize("fmt, call", [("kimi_k2", KIMI_CALL), ("deepseek_v31", DS_CALL)])
def test_markers_around_calls_are_markup_and_a_second_end_is_not(fmt, call):
    begin, end = SECTIONED[fmt]
    for text in (f"Hi {begin}{call}{end}", f"Hi {begin}\n{call}\n{end}", f"Hi {call}{end}"):  # a begin left out
        parsed = check_every_split(ResponseFormat(fmt), text)
        assert (parsed.content, [c[0] for c in calls(parsed)], parsed.errors) == ("Hi", ["f"], []), text
    parsed = check_every_split(ResponseFormat(fmt), f"{begin}{call}{end} done{end}")  # whitespace by a call goes
    assert (parsed.content, len(parsed.tool_calls)) == (f"done{end}", 1) and parsed.errors
