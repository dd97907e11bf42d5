"""FireFunction v2 (Fireworks): its template against the official one, and the parser of its calls.

The parser cases take the outputs and expected calls of llama.cpp's ``tests/test-chat.cpp`` FireFunction v2
cases (plain content, `` functools[{"name": "special_function", "arguments": {"arg1": 1}}]``), as far as they
are known here, from memory of their assertions: not copied, and not checked against the published file (vLLM
and SGLang ship no FireFunction parser); the other cases are lmchat's own. Every case also runs cut at every
split point and in odd chunk sizes.
"""
from __future__ import annotations

import datetime as dt
import json

import pytest

from lmchat import Session, get_template, match_template
from lmchat.errors import TemplateConfigError
from lmchat.interop.battery import TOOLS
from lmchat.tools import ResponseFormat

from .parser_chunks import calls, check_every_split
from .test_conformance import assert_same

FMT = ResponseFormat("firefunction_v2")
SIZES = ([1], [2], [3, 5], [7, 1, 4])
KWARGS = {"functions": json.dumps(TOOLS, indent=4), "datetime": "2024-07-26"}


CASES = [
    ("llama_cpp_content", "Hello, world!\nWhat's up?", "Hello, world!\nWhat's up?", []),
    ("llama_cpp_call", ' functools[{"name": "special_function", "arguments": {"arg1": 1}}]', "",
     [("special_function", {"arg1": 1})]),
    ("content_then_two_calls", 'Sure. functools[{"name": "a", "arguments": {}}, {"name": "b", "arguments": '
     '{"x": ["]"]}}]', "Sure.", [("a", {}), ("b", {"x": ["]"]})]),
    ("text_after_the_list", 'functools[{"name": "a", "arguments": {}}] done', "done", [("a", {})]),
]


@pytest.mark.parametrize("label, text, content, expected", CASES, ids=[c[0] for c in CASES])
def test_llama_cpp_cases_whole_and_streamed_at_every_split(label, text, content, expected):
    parsed = check_every_split(FMT, text, sizes=SIZES)
    assert (parsed.content, calls(parsed), parsed.errors) == (content, expected, [])


def test_a_list_that_is_no_call_is_content_with_a_note():
    parsed = check_every_split(FMT, "I like functools[ a lot", sizes=SIZES)
    assert parsed.content == "I like functools[ a lot" and parsed.errors


def test_a_call_cut_off_keeps_what_it_has_with_a_note():
    parsed = check_every_split(FMT, ' functools[{"name": "a", "arguments": {"x": 1', sizes=SIZES)
    assert calls(parsed) == [("a", {"x": 1})] and parsed.errors


def test_functions_and_datetime_come_from_the_request_unless_given():
    t = get_template("firefunction-v2")
    derived = t.messages2prompt([u("q")], tools=TOOLS, date=dt.date(2024, 7, 26))
    spec = json.dumps(TOOLS, ensure_ascii=False)
    assert "Available functions as JSON spec:\n" + spec + "\nToday is 2024-07-26." in derived
    given = t.messages2prompt([u("q")], tools=TOOLS, **KWARGS)
    assert KWARGS["functions"] + "\nToday is 2024-07-26." in given
    with pytest.raises(TemplateConfigError):
        t.messages2prompt([u("q")], functions=["not text"])


def test_a_session_holds_calls_as_written_and_only_appends():
    session = Session("firefunction-v2", template_kwargs=KWARGS)
    session.prompt("Weather in Paris?")
    session.commit('Checking. functools[{"name": "get_current_weather", "arguments": {"location": "Paris"}}]')
    assert session.messages[-1]["content"] == "Checking."
    delta = session.extend([{"role": "tool", "content": "22"}])
    assert not delta.reset
    session.commit("It is 22.")
    delta = session.prompt("Thanks")
    assert not delta.reset and delta.text.endswith("Thanks<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")


def test_an_answer_the_history_trims_resets_honestly():
    session = Session("firefunction-v2", template_kwargs=KWARGS)
    session.prompt("Hi")
    session.commit("Hello! ")
    delta = session.prompt("Again")
    assert delta.reset and delta.reason


def test_the_template_names_the_format_and_bundles_the_model_settings():
    t = get_template("llama-3-firefunction-v2")
    assert t.name == "firefunction-v2" and type(t).tool_format == "firefunction_v2" and t.session_len == 8192


@pytest.mark.parametrize("model", ["fireworks-ai/llama-3-firefunction-v2", "llama-3-firefunction-v2.Q4_K_M.gguf"])
def test_model_names_match(model):
    assert match_template(model) == "firefunction-v2"


def u(content):
    return {"role": "user", "content": content}


def call(name, arguments):
    return {"id": "call_0", "type": "function", "function": {"name": name, "arguments": arguments}}


# fixed conversations compared with the official template (golden vectors)
CONVERSATIONS = [
    [u("q")],
    [{"role": "system", "content": "  S  "}, u(" q "), {"role": "assistant", "content": "a"}, u("r")],
    [{"role": "System", "content": "S"}, {"role": "USER", "content": "q"}],
    [{"role": "system"}, u("q")],
    [u("q"), {"role": "assistant", "content": " c ", "tool_calls": [
        call("get_current_weather", '{"location": "北京"}'), call("add", '{"a": 1, "b": 2}')]},
     {"role": "tool", "content": " 22 "}, {"role": "assistant", "content": "Done."}],
    [u("q"), {"role": "assistant", "tool_calls": [call("add", {"a": 1})]}],  # fails: arguments are not a string
    [u("q"), {"role": "critic", "content": "c"}],  # fails: not one of the four roles
    [u(["parts"]), {"role": "assistant", "content": 0}],
]
GOLDEN = [("firefunction-v2", messages, {"add_generation_prompt": generation_prompt, **kwargs})
          for messages in CONVERSATIONS for generation_prompt in (True, False)
          for kwargs in (KWARGS, {"functions": "[]", "datetime": "today"})]
GOLDEN += [("firefunction-v2", [u("q")], kwargs) for kwargs in ({}, {"tools": TOOLS}, {"functions": "[]"},
                                                                {"datetime": "x"}, {"functions": 5, "datetime": "x"})]


@pytest.mark.parametrize("name, messages, options", GOLDEN)
def test_conversations_render_as_the_official_template_does(name, messages, options):
    assert_same(name, messages, **options)
