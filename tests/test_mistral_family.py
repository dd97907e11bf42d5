"""The Mistral family people run in 2026: Small 3 / 3.1 / 3.2, Nemo, Large 2411, Codestral, and the v11 tool calls.

The templates against the official ones (golden vectors, the fixed conversations of ``GOLDEN``:
content blocks, tools, calls and results), sessions, and the ``mistral_v11`` parser
(``[TOOL_CALLS]NAME[ARGS]{...}``) on the cases of vLLM's published
``tests/tool_parsers/test_mistral_tool_parser.py`` (formerly ``tests/tool_use/``), at every split point.
"""
from __future__ import annotations

import datetime as dt
import json

import pytest

from lmchat import Session, get_template, match_template, parse_response
from lmchat.errors import TemplateRuleError
from lmchat.interop.battery import TOOLS
from lmchat.registry import template_class
from lmchat.templates.sampling import DEFAULT_SAMPLING
from lmchat.tools import ResponseStream

from .parser_chunks import chunked, fed_in_sizes
from .test_conformance import assert_same

NEW = ["mistral-small-3", "mistral-small-3.1", "mistral-small-3.2", "mistral-nemo", "mistral-large-2411", "codestral"]
V11 = "mistral-small-3.2"
DEFAULT = DEFAULT_SAMPLING["temperature"]


def u(content):
    return {"role": "user", "content": content}


def a(content, **extra):
    return {"role": "assistant", "content": content, **extra}


def s(content):
    return {"role": "system", "content": content}


def text(value):
    return {"type": "text", "text": value}


IMAGE = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
CALLS = [{"id": "abcdEF123", "type": "function", "function": {"name": "get_current_weather",
                                                               "arguments": {"location": "Paris"}}},
         {"id": "XYZ987654", "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]
STRING_ARGS = [{"id": "abcdEF123", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}]
RESULT = {"role": "tool", "content": "22°C", "tool_call_id": "abcdEF123"}
MAPPING_RESULT = {"role": "tool", "content": {"content": "3"}, "tool_call_id": "XYZ987654"}
CONVERSATIONS = {
    "blocks-system-user": [s([text("Sys in blocks")]), u([text("Look: "), IMAGE, {"type": "image"}, text("?")])],
    "blocks-answer": [u([text("hi")]), a([text("one"), text(" two")]), u("more")],
    "blocks-answer-image": [u("hi"), a([text("t"), IMAGE])],
    "unknown-block": [u([{"type": "audio"}])],
    "unknown-answer-block": [u("hi"), a([{"type": "video"}])],
    "empty-blocks": [u([]), a("x")],
    "empty-system-blocks": [s([]), u("x")],
    "calls-and-results": [u("w?"), a("", tool_calls=CALLS), RESULT, MAPPING_RESULT, a("Paris: 22°C; 3."), u("thanks")],
    "string-arguments": [s("S"), u("w?"), a("", tool_calls=STRING_ARGS), {**RESULT, "content": "1"}],
    "calls-last": [u("w?"), a("", tool_calls=CALLS)],
    "short-id": [u("w?"), a("", tool_calls=[{"id": "short", "type": "function",
                                             "function": {"name": "add", "arguments": {}}}])],
    "tool-results-role": [u("w?"), a("", tool_calls=CALLS), {**RESULT, "role": "tool_results"}],
    "repeated-user": [u("q"), a("x"), u("q")],
    "late-system": [u("hi"), s("late"), u("again")],
}
#: the official renderings these tests compare with (tests/golden)
GOLDEN = (
    [(name, m, {"tools": t}) for name in NEW for m in CONVERSATIONS.values() for t in (TOOLS, None)]
    + [(name, CONVERSATIONS["calls-last"], {"tools": TOOLS, "add_generation_prompt": False}) for name in NEW]
    + [(name, [u("hi")], {"tools": []}) for name in NEW]
    + [(name, [u("hi")], {"date": dt.date(2026, 3, 1)}) for name in NEW]
)


@pytest.mark.parametrize("name, messages, options", GOLDEN)
def test_renders_what_the_official_template_renders(name, messages, options):
    assert_same(name, messages, **options)


def test_the_v7_system_prompt_and_its_dated_default():
    t = get_template("mistral-small-3.1")
    assert t.messages2prompt([s("Be brief."), u("Hi"), a("Hello."), u("2+2?")]) == \
        "<s>[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST]Hi[/INST]Hello.</s>[INST]2+2?[/INST]"
    text = t.messages2prompt([u("Hi")], date=dt.date(2026, 3, 1))
    assert text.startswith("<s>[SYSTEM_PROMPT]You are Mistral Small 3, ") and "The current date is 2026-03-01." in text
    assert text.endswith("[/SYSTEM_PROMPT][INST]Hi[/INST]")


def test_small_3_2_renders_v11_calls_and_results():
    text = get_template(V11).messages2prompt([s("S"), *CONVERSATIONS["calls-and-results"][:4]], tools=TOOLS)
    assert text == (
        f"<s>[SYSTEM_PROMPT]S[/SYSTEM_PROMPT][AVAILABLE_TOOLS]{json.dumps(TOOLS, ensure_ascii=False)}"
        "[/AVAILABLE_TOOLS][INST]w?[/INST]"
        '[TOOL_CALLS]get_current_weather[CALL_ID]abcdEF123[ARGS]{"location": "Paris"}'
        '[TOOL_CALLS]add[CALL_ID]XYZ987654[ARGS]{"a": 1, "b": 2}</s>'
        "[TOOL_RESULTS]abcdEF123[TOOL_CONTENT]22°C[/TOOL_RESULTS][TOOL_RESULTS]XYZ987654[TOOL_CONTENT]3[/TOOL_RESULTS]"
    )


def test_official_errors_name_the_rule():
    with pytest.raises(TemplateRuleError, match="alternate"):
        get_template(V11).messages2prompt([u("a"), u("b")])
    with pytest.raises(TemplateRuleError, match="Only system, user, assistant, and tool roles"):
        get_template(V11).messages2prompt([u("a"), {"role": "ipython", "content": "x"}])
    with pytest.raises(TemplateRuleError, match="Only user, system and assistant roles"):
        get_template("mistral-large-2411").messages2prompt([u("a"), RESULT])


def test_bundled_settings_and_names():
    """Small 3.x and Nemo from their model cards; Large 2411 and Codestral publish none: LMDeploy defaults."""
    for name, temperature, context in [("mistral-small-3", 0.15, 32768), ("mistral-small-3.1", 0.15, 131072),
                                       ("mistral-small-3.2", 0.15, 131072), ("mistral-nemo", 0.3, 131072),
                                       ("mistral-large-2411", DEFAULT, 131072), ("codestral", DEFAULT, 32768)]:
        t = get_template(name)
        assert (t.temperature, t.session_len, t.stop_words) == (temperature, context, ("</s>",)), name
        assert template_class(name).official
    for alias, name in [("Mistral-Small-3.1-24B-Instruct-2503", "mistral-small-3.1"),
                        ("Mistral-Small-24B-Instruct-2501", "mistral-small-3"),
                        ("Mistral-Small-3.2-24B-Instruct-2506", "mistral-small-3.2"),
                        ("Mistral-Nemo-Instruct-2407", "mistral-nemo"), ("Codestral-22B-v0.1", "codestral"),
                        ("Mistral-Large-Instruct-2411", "mistral-large-2411")]:
        assert get_template(alias).name == name
    assert template_class(V11).tool_format == "mistral_v11"


@pytest.mark.parametrize("model, name", [
    ("mistralai/Mistral-Small-24B-Instruct-2501", "mistral-small-3"),
    ("mistralai/Mistral-Small-3.1-24B-Instruct-2503", "mistral-small-3.1"),
    ("mistralai/Mistral-Small-3.2-24B-Instruct-2506", "mistral-small-3.2"),
    ("unsloth/Mistral-Small-3.2-24B-Instruct-2506-GGUF", "mistral-small-3.2"),
    ("mistralai/Mistral-Nemo-Instruct-2407", "mistral-nemo"),
    ("mistralai/Mistral-Large-Instruct-2411", "mistral-large-2411"),
    ("mistralai/Codestral-22B-v0.1", "codestral"),
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistral-v0.3"),
    ("mistralai/Mistral-7B-Instruct-v0.2", "mistral"),
])
def test_hub_ids_match(model, name):
    assert match_template(model) == name


@pytest.mark.parametrize("name, space", [("mistral-small-3", ""), ("mistral-small-3.1", ""), ("mistral-small-3.2", ""),
                                         ("mistral-large-2411", " ")])
def test_plain_sessions_never_reset(name, space):
    session = Session(name)
    first = session.prompt("Hi")
    session.commit(f"{space}Hello.")
    delta = session.prompt("Again")
    assert first.text.endswith(f"[INST]{space}Hi[/INST]")
    assert (delta.reset, delta.text) == (False, f"</s>[INST]{space}Again[/INST]")
    assert session.messages[1]["content"] == "Hello."


# -------------------------------------------------------------------------------------------- the v11 parser
def shape(parsed):
    """A parse without the random call ids (checked to be Mistral's 9 alphanumerics)."""
    assert all(len(c["id"]) == 9 and c["id"].isalnum() for c in parsed.tool_calls)
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in parsed.tool_calls]
    return parsed.content, calls, parsed.errors


def streamed(text, sizes):
    return fed_in_sizes(V11, text, sizes)


WEATHER = json.dumps({"city": "San Francisco", "state": "CA", "unit": "celsius"})
BASH = json.dumps({"command": "print(\"hello world!\")\nre.compile(r'{}')"})
#: vLLM's test_extract_tool_calls (v11 tokenizer: its decoder drops [ARGS], so the arguments follow the name)
#: and the streaming cases, as its published test file asserts them: (output, calls, content)
VLLM_V11 = {
    "single_tool_add": ('[TOOL_CALLS]add_this_and_that{"a": 3.5, "b": 4}',
                        [("add_this_and_that", '{"a": 3.5, "b": 4}')], ""),
    "single_tool_weather": (f"[TOOL_CALLS]get_current_weather{WEATHER}", [("get_current_weather", WEATHER)], ""),
    "multiple_tool_calls": ('[TOOL_CALLS]add{"a": 3.5, "b": 4}[TOOL_CALLS]multiply{"a": 3, "b": 6}',
                            [("add", '{"a": 3.5, "b": 4}'), ("multiply", '{"a": 3, "b": 6}')], ""),
    "content_before_tool": ('bla[TOOL_CALLS]add_this_and_that{"a": 3.5, "b": 4}',
                            [("add_this_and_that", '{"a": 3.5, "b": 4}')], "bla"),
    "wrong_json": (f"hi{{hi[TOOL_CALLS]bash{BASH}", [("bash", BASH)], "hi{hi"),
    "single_tool_add_strings": ('[TOOL_CALLS]add_two_strings{"a": "3", "b": "4"}',
                                [("add_two_strings", '{"a": "3", "b": "4"}')], ""),
    "no_tools": ("This is a test", [], "This is a test"),
    # the same with the [ARGS] (and v13's [CALL_ID]) markers kept, as an engine that keeps special tokens sends them
    "args-marker": ('[TOOL_CALLS]add[ARGS]{"a": 3.5, "b": 4}[TOOL_CALLS]multiply[ARGS]{"a": 3, "b": 6}',
                    [("add", '{"a": 3.5, "b": 4}'), ("multiply", '{"a": 3, "b": 6}')], ""),
    "call-id": ('[TOOL_CALLS]add[CALL_ID]abcdEF123[ARGS]{"a": 1}', [("add", '{"a": 1}')], ""),
}
#: vLLM's pre-v11 cases (test_extract_tool_calls_pre_v11_tokenizer and its streaming twin): Small 3/3.1 write the
#: v7 JSON list, which mistral_v11 reads too. vLLM drops the text after the list (non-streaming) or keeps it
#: (streaming); lmchat keeps it as content, as its mistral format does
VLLM_PRE_V11 = {
    "single_tool_add": ('[TOOL_CALLS][{"name": "add", "arguments":{"a": 3.5, "b": 4}}]',
                        [("add", '{"a": 3.5, "b": 4}')], ""),
    "single_tool_add_spaced": ('[TOOL_CALLS]  [ {"name":"add" , "arguments" : {"a": 3, "b": 4} } ]',
                               [("add", '{"a": 3, "b": 4}')], ""),
    "single_tool_weather": (f'[TOOL_CALLS] [{{"name": "get_current_weather", "arguments":{WEATHER}}}]',
                            [("get_current_weather", WEATHER)], ""),
    "argument_before_name": (f'[TOOL_CALLS] [{{"arguments":{WEATHER}, "name": "get_current_weather"}}]',
                             [("get_current_weather", WEATHER)], ""),
    "argument_before_name_and_name_in_argument": (
        '[TOOL_CALLS] [{"arguments":{"name": "John Doe"}, "name": "get_age"}]',
        [("get_age", '{"name": "John Doe"}')], ""),
    "multiple_tools": (f'[TOOL_CALLS] [{{"name": "add", "arguments": {{"a": 3.5, "b": 4}}}}, '
                       f'{{"name": "get_current_weather", "arguments":{WEATHER}}}]',
                       [("add", '{"a": 3.5, "b": 4}'), ("get_current_weather", WEATHER)], ""),
    "content_before_tool": ('Hello[TOOL_CALLS] [{"name": "add", "arguments":{"a": 1, "b": 2}}]',
                            [("add", '{"a": 1, "b": 2}')], "Hello"),
    "trailing_data_after_json": ('[TOOL_CALLS] [{"name": "f", "arguments":{"a": 1}}]\nextra trailing data',
                                 [("f", '{"a": 1}')], "extra trailing data"),
}
CASES = {**{f"v11-{k}": v for k, v in VLLM_V11.items()}, **{f"pre_v11-{k}": v for k, v in VLLM_PRE_V11.items()}}


@pytest.mark.parametrize("label", sorted(CASES))
def test_parses_vllms_cases(label):
    text, calls, content = CASES[label]
    assert shape(parse_response(V11, text)) == (content, calls, [])


def test_a_call_cut_off_is_closed_after_its_last_complete_value():
    """vLLM's v11 "complex" case: its call is cut inside a string. vLLM keeps the partial text as arguments;
    lmchat closes the string and the object, with a note."""
    parsed = parse_response(V11, 'hi{hi[TOOL_CALLS]bash{"command": "print(\\"hello world!\\")\\nre.compile(r\'{}\')')
    content, calls, errors = shape(parsed)
    assert (content, calls) == ("hi{hi", [("bash", BASH)]) and "ends inside the call" in errors[0]


def test_what_is_no_call_stays_content_with_a_note():
    """vLLM drops ``[TOOL_CALLS]toolname_no_args`` (tools_called, no call); lmchat gives the text back."""
    assert shape(parse_response(V11, "[TOOL_CALLS]toolname_no_args")) == \
        ("[TOOL_CALLS]toolname_no_args", [], ["a [TOOL_CALLS] without [ARGS]; kept as content"])
    content, calls, errors = shape(parse_response(V11, "[TOOL_CALLS]not a name[ARGS]{}"))
    assert (content, calls) == ("[TOOL_CALLS]not a name[ARGS]{}", []) and "not a name" in errors[0]


def test_calls_are_checked_against_the_tools():
    parsed = parse_response(V11, '[TOOL_CALLS]add[ARGS]{"a": 1}', tools=TOOLS)
    assert parsed.errors == ["tool call 0 (add): missing required argument 'b'"]


STREAMED = [text for text, _, _ in CASES.values()] + [
    "[TOOL_CALLS]toolname_no_args", "Sure. [TOOL_CALLS]add[ARGS]{\"a\": 1, \"b\": 2}\n[TOOL_CALLS]x[ARGS]{} done",
    '[TOOL_CALLS]bash[ARGS]{"c": "[TOOL_CALLS]x[ARGS]{}"}', "[TOOL_CALLS][ARGS]{}", "[TOOL", "[TOOL_CALLS][CALL",
]


@pytest.mark.parametrize("text", STREAMED)
def test_every_split_point_gives_the_whole_text_parse(text):
    whole = shape(parse_response(V11, text))
    for cut in range(len(text) + 1):
        assert shape(chunked(V11, text, [cut])) == whole, cut


@pytest.mark.parametrize("sizes", [(1,), (2,), (3,), (7,), (2, 9, 1)])
@pytest.mark.parametrize("text", STREAMED)
def test_odd_chunk_sizes_give_the_whole_text_parse(text, sizes):
    assert shape(streamed(text, sizes)) == shape(parse_response(V11, text))


def test_arguments_stream_before_the_call_ends():
    stream = ResponseStream(V11)
    events = stream.feed('[TOOL_CALLS]add[ARGS]{"a": 1, ')
    assert [type(e).__name__ for e in events] == ["ToolCallStart", "ToolCallArgumentsDelta"]
