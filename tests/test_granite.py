"""IBM Granite 3.0, 3.1, 3.3 and 4.0: the templates against the official ones, sessions, and the parsers of their
answers.

The parser cases take the outputs and expected messages of llama.cpp's ``tests/test-chat.cpp`` Granite cases
(plain content; reasoning in ``<think>``, the answer in ``<response>`` tags or not; one call after
``<|tool_call|>``; a call after the reasoning; calls cut off) and of vLLM's Granite tool-parser tests
(``<|tool_call|>`` then a JSON list of one or two calls, nested arguments), and for Granite 4.0, which writes
Hermes' ``<tool_call>`` tags, of llama.cpp's Hermes 2 Pro cases (one call, content then a call), as far as
they are known here, from memory of their assertions: not copied, and not checked against the published
files. Where lmchat's conventions differ (content is "" rather than None; arguments are compared as JSON values;
a cut-off answer is closed with a note rather than returned as a partial message) the case says so. Every case
also runs cut at every split point, a character at a time and in odd chunk sizes.
"""
from __future__ import annotations

import datetime as dt
import json

import pytest

from lmchat import Session, get_template, match_template, parse_response
from lmchat.registry import canonical_name
from lmchat.tools import ResponseFormat

from .conversations import TOOLS, a, call, s, tool, u
from .parser_chunks import calls, check_every_split
from .test_conformance import assert_same

GRANITE = ResponseFormat("granite")
GRANITE33 = ResponseFormat("granite33", reasoning=True)
HERMES = ResponseFormat("hermes")
SIZES = ([1], [2], [3], [5], [7, 1], [11, 2, 1])  # a character at a time, then odd chunk sizes
EOT = "<|end_of_text|>"


HELLO = "Hello, world!\nWhat's up?"
SPECIAL = ("special_function", {"arg1": 1})
# (label, format, model output, content, reasoning, calls)
CASES = [
    ("llama_cpp_content", GRANITE33, HELLO, HELLO, None, []),
    ("llama_cpp_thinking", GRANITE33, "<think>I'm\nthinking</think>" + HELLO, HELLO, "I'm\nthinking", []),
    ("llama_cpp_thinking_response_tags", GRANITE33, f"<think>I'm\nthinking</think><response>{HELLO}</response>",
     HELLO, "I'm\nthinking", []),
    ("llama_cpp_call", GRANITE33, '<|tool_call|>[{"name": "special_function", "arguments": {"arg1": 1}}]', "", None,
     [SPECIAL]),
    ("llama_cpp_call_after_thinking", GRANITE33,
     "<think>I'm\nthinking</think>" + '<|tool_call|>[{"name": "special_function", "arguments": {"arg1": 1}}]', "",
     "I'm\nthinking", [SPECIAL]),
    ("llama_cpp_call_granite_3_1", GRANITE, '<|tool_call|>[{"name": "special_function", "arguments": {"arg1": 1}}]',
     "", None, [SPECIAL]),
    ("vllm_one_call", GRANITE, '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Tokyo"}}]', "", None,
     [("get_weather", {"city": "Tokyo"})]),
    ("vllm_two_calls", GRANITE,
     '<|tool_call|> [{"name": "get_weather", "arguments": {"city": "Tokyo"}}, '
     '{"name": "get_time", "arguments": {"timezone": "Asia/Tokyo"}}]', "", None,
     [("get_weather", {"city": "Tokyo"}), ("get_time", {"timezone": "Asia/Tokyo"})]),
    ("vllm_nested_arguments", GRANITE,
     '<|tool_call|>[{"name": "f", "arguments": {"a": {"b": [1, "]}<|tool_call|>"]}, "c": null}}]', "", None,
     [("f", {"a": {"b": [1, "]}<|tool_call|>"]}, "c": None})]),
    ("vllm_no_call", GRANITE, "I cannot call a tool for that.", "I cannot call a tool for that.", None, []),
    # Granite 4.0: Hermes' tags, as its template renders them
    ("llama_cpp_hermes_call", HERMES,
     '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>', "", None, [SPECIAL]),
    ("llama_cpp_hermes_content_then_call", HERMES,
     HELLO + '\n<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>', HELLO, None,
     [SPECIAL]),
    ("granite_4_two_calls", HERMES,
     '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n'
     '<tool_call>\n{"name": "get_current_weather", "arguments": {"location": "上海"}}\n</tool_call>', "", None,
     [("add", {"a": 1, "b": 2}), ("get_current_weather", {"location": "上海"})]),
]


@pytest.mark.parametrize("label, fmt, text, content, reasoning, expected", CASES, ids=[c[0] for c in CASES])
def test_llama_cpp_and_vllm_cases_whole_and_streamed_at_every_split(label, fmt, text, content, reasoning, expected):
    parsed = check_every_split(fmt, text)
    assert (parsed.content, parsed.reasoning_content, calls(parsed), parsed.errors) == \
        (content, reasoning, expected, [])


def test_llama_cpp_cut_off_answers_keep_what_they_have():
    # llama.cpp's partial parses: a call cut inside its arguments keeps its name (with the arguments so far);
    # lmchat closes it with a note, and an answer cut while thinking is all reasoning
    parsed = check_every_split(GRANITE33, '<|tool_call|>[{"name": "special_function", "arguments": {"arg')
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["special_function"] and parsed.errors
    parsed = check_every_split(GRANITE33, "<think>I'm\nthinking")
    assert (parsed.content, parsed.reasoning_content) == ("", "I'm\nthinking") and parsed.errors
    parsed = check_every_split(GRANITE33, f"<think>I'm\nthinking</think><response>{HELLO}")
    assert (parsed.content, parsed.reasoning_content, parsed.errors) == (HELLO, "I'm\nthinking", [])


@pytest.mark.parametrize("text, content", [
    ("<think>x</think>\n<response>\nHi\n</response>", "Hi"),  # the template's whitespace inside the tags
    ("<response>Hi</response>", "Hi"),  # a response without reasoning
    ("Hi <response>x</response>", "Hi <response>x</response>"),  # tags that do not open the answer are text
    ("<think>x</think><response>a</response> b</response>", "a b</response>"),  # only the first closes
])
def test_response_tags_are_taken_off_only_around_the_answer(text, content):
    assert check_every_split(GRANITE33, text).content == content


def test_vllm_difference_a_call_without_its_marker_is_content():
    # vLLM's Granite parser also reads "<tool_call>[...]" and a bare JSON list at the start of the answer as
    # calls; lmchat reads calls after <|tool_call|> only, the marker Granite's template and prompt name
    text = '[{"name": "get_weather", "arguments": {"city": "Tokyo"}}]'
    parsed = check_every_split(GRANITE, text)
    assert (parsed.content, calls(parsed)) == (text, [])


# ------------------------------------------------------------------ templates: names, settings
@pytest.mark.parametrize("alias, name", [
    ("granite-3.0-8b-instruct", "granite-3.0"), ("granite3.0", "granite-3.0"), ("granite-3.1", "granite3"),
    ("granite-3.3-8b-instruct", "granite-3.3"), ("granite3.3", "granite-3.3"), ("granite-4.0-h-small", "granite-4.0"),
    ("granite-4.0-h-tiny", "granite-4.0"), ("granite-4.0-micro", "granite-4.0"), ("granite4", "granite-4.0"),
])
def test_aliases(alias, name):
    assert canonical_name(alias) == name


@pytest.mark.parametrize("model, name", [
    ("ibm-granite/granite-3.0-8b-instruct", "granite-3.0"), ("ibm-granite/granite-3.0-2b-instruct", "granite-3.0"),
    ("ibm-granite/granite-3.1-8b-instruct", "granite3"), ("ibm-granite/granite-3.3-2b-instruct", "granite-3.3"),
    ("ibm-granite/granite-3.3-8b-instruct", "granite-3.3"), ("ibm-granite/granite-4.0-h-small", "granite-4.0"),
    ("ibm-granite/granite-4.0-h-tiny", "granite-4.0"), ("ibm-granite/granite-4.0-micro", "granite-4.0"),
    ("unsloth/granite-4.0-h-small-GGUF", "granite-4.0"), ("ibm-granite/granite-4.0-h-1b", "granite-4.0"),
])
def test_model_names_match(model, name):
    assert match_template(model) == name


def test_formats_and_bundled_settings():
    expected = {"granite-3.0": ("granite", False, 4096), "granite3": ("granite", False, 131072),
                "granite-3.3": ("granite33", True, 131072), "granite-4.0": ("hermes", False, 131072)}
    for name, (fmt, reasoning, session_len) in expected.items():
        t = get_template(name)
        assert (type(t).tool_format, type(t).reasoning, t.session_len) == (fmt, reasoning, session_len)
        assert t.stop_words == (EOT,) and t.eoa == EOT


# ------------------------------------------------------------------ templates: golden conversations
DATE = dt.date(2025, 3, 4)
DOCUMENTS_33 = [{"doc_id": 1, "text": "Paris is in France."}, {"doc_id": "b", "title": "no text"}, {"text": 42},
                {"doc_id": None, "text": None}]
CONTROLS = {"citations": True, "hallucinations": True, "length": "short"}
CALL = call("get_current_weather", {"location": "Paris"})

GRANITE_30 = [
    [u("hi")],
    [s("sys"), u("hi"), a("hello"), u("again")],
    [s("sys"), u("Weather in Paris?"),
     {"role": "assistant_tool_call",
      "content": '[{"name": "get_current_weather", "arguments": {"location": "Paris"}}]'},
     {"role": "tool_response", "content": '{"temperature": 22}'}, a("22 degrees.")],
    # a tool message and tool_calls are not rendered; the prompt follows the last message whatever its role
    [u("Weather?"), a("", tool_calls=[CALL]), tool('{"temperature": 22}')],
    [u("hi"), {"role": "critic", "content": "x"}],
    [u("hi"), {"role": "tool"}],  # a skipped role needs no content
    [u("hi"), {"role": "assistant"}],  # the official template fails on a missing content
    [u(["parts"])],  # and on content that is not a string
]
GRANITE_30_OPTIONS = [{}, {"tools": TOOLS}, {"tools": TOOLS[:1]}, {"tools": []}, {"add_generation_prompt": False}]

GRANITE_33 = [
    [u("Where is Paris?")],
    [s("Custom."), u("Where is Paris?")],
    [s("only system")],
    [u("2+2?"), a("<think>add</think><response>4</response>"), u("3+3?")],
    [u("hi"), tool("r"), {"role": "document", "content": "d"}],
    [{"role": "system"}, u("hi")],
]
GRANITE_33_OPTIONS = (
    [{"thinking": t} for t in (True, False)]
    + [{"tools": TOOLS}, {"tools": TOOLS, "thinking": True}, {"available_tools": TOOLS[1:]},
       {"tools": TOOLS, "available_tools": TOOLS[1:]}, {"tools": TOOLS, "available_tools": []}]
    + [{"documents": DOCUMENTS_33}, {"documents": DOCUMENTS_33, "controls": CONTROLS},
       {"documents": DOCUMENTS_33, "tools": TOOLS, "controls": CONTROLS, "thinking": True},
       {"controls": CONTROLS}, {"controls": ["citations"], "documents": DOCUMENTS_33[:1]}, {"controls": {}}]
    + [{"date": DATE}, {"add_generation_prompt": False, "thinking": True}]
)

DOCUMENTS_4 = [{"doc_id": 1, "title": "France", "text": "Paris is in France."}, {"text": "日本"}]
PARTS = [{"type": "text", "text": "first"}, {"type": "image"}, {"type": "text", "text": ""},
         {"type": "text", "text": "second"}]
GRANITE_4 = [
    [u("hi")],
    [s("sys"), u("hi"), a("hello"), u("again")],
    [s(""), u("hi")],  # an empty system prompt: the default one
    [s(PARTS), u(PARTS), a(PARTS)],
    [{"role": "system", "content": [{"type": "text", "text": ""}, {"type": "text", "text": "x"}]}, u("hi")],
    [u("hi"), s("late system"), {"role": "critic", "content": "skipped"}, u("again")],
    [u("Weather in Paris and 1+2?"),
     a("Let me check.", tool_calls=[CALL, call("add", '{"a": 1, "b": 2}', "call_2")]),
     tool('{"temperature": 22}'), tool("3", "call_2", "add"), a("22 degrees; 3."), u("Thanks")],
    [u("Weather?"), a("", tool_calls=[CALL]), tool("r1"), u("and?"), tool("r2")],
    [tool("first"), u("hi")],
    [u("q"), a("", tool_calls=[{"name": "add", "arguments": {"a": 1}}])],  # a call without function: itself
    [u("q"), a("c", tool_calls=[{"function": {"arguments": None}}]), u("q2")],  # no name: '', None arguments
    [u("q"), a("c", tool_calls=[])],
    [u("q"), {"role": "assistant", "tool_calls": [CALL]}],  # no content
    [u(7), {"role": "user", "content": {"type": "text", "text": "an object"}}],  # neither string nor list: ''
    [u("q"), a("c", tool_calls=[{"function": {"name": "f"}}])],  # no arguments: the official template fails
    [u("q"), a("c", tool_calls="not a list")],
    [u([{"type": "text"}])],  # a text part without text
]
GRANITE_4_OPTIONS = [
    {}, {"tools": TOOLS}, {"tools": []}, {"documents": DOCUMENTS_4}, {"tools": TOOLS, "documents": DOCUMENTS_4},
    {"available_tools": TOOLS[1:]}, {"tools": TOOLS, "available_tools": TOOLS[1:]}, {"add_generation_prompt": False},
]

GOLDEN = (
    [("granite-3.0", m, o) for m in GRANITE_30 for o in GRANITE_30_OPTIONS]
    + [("granite-3.3", m, o) for m in GRANITE_33 for o in GRANITE_33_OPTIONS]
    + [("granite-4.0", m, o) for m in GRANITE_4 for o in GRANITE_4_OPTIONS]
    + [("granite-3.3", [u("hi")], {"thinking": True, "date": DATE}),
       ("granite-3.3", [u("hi")], {"thinking": True, "tools": TOOLS}),
       ("granite-4.0", [s("sys"), u("hi")], {"tools": TOOLS})]
    # variables the official templates loop over or test with `in`: a number or a boolean fails there
    + [(name, m, o) for name in ("granite3", "granite-3.3") for m in ([u("hi")], [s("sys"), u("hi")])
       for o in ({"controls": True}, {"controls": 1, "documents": DOCUMENTS_33}, {"documents": 5},
                 {"controls": "citations", "documents": DOCUMENTS_33})]
    + [("granite-4.0", [u("hi")], o) for o in ({"documents": 5}, {"available_tools": 3}, {"documents": "ab"})]
)


@pytest.mark.parametrize("name, messages, options", GOLDEN)
def test_render_as_the_official_template_does(name, messages, options):
    assert_same(name, messages, **options)


def test_granite_3_3_dates_thinks_and_lists_documents_one_block_each():
    text = assert_same("granite-3.3", [u("hi")], thinking=True, date=DATE)
    assert "Today's Date: March 04, 2025. You are Granite" in text and "<think></think>" in text
    text = assert_same("granite-3.3", GRANITE_33[0], documents=DOCUMENTS_33)
    assert '<|start_of_role|>document {"document_id": "1"}<|end_of_role|>\nParis is in France.<|end_of_text|>' in text
    assert "<think>" not in assert_same("granite-3.3", [u("hi")], thinking=True, tools=TOOLS)  # tools win


def test_granite_4_lists_tools_as_json_lines_in_the_system_block():
    text = assert_same("granite-4.0", [s("sys"), u("hi")], tools=TOOLS)
    assert text.startswith("<|start_of_role|>system<|end_of_role|>sys\n\nYou are a helpful assistant with access")
    assert "\n" + json.dumps(TOOLS[1], ensure_ascii=False) + "\n</tools>" in text


# ------------------------------------------------------------------ sessions
def answer_of(name, messages, **options):
    """The last (assistant) message as the template renders it after the prompt: what the model wrote."""
    t = get_template(name)
    before = t.messages2prompt(messages[:-1], **options)
    after = t.messages2prompt(messages, add_generation_prompt=False, **options)
    assert after.startswith(before)
    return after[len(before):].removesuffix(EOT + "\n")


def test_granite_4_calls_the_template_renders_parse_back():
    message = a("Let me check.", tool_calls=[CALL, call("add", '{"a": 1, "b": 2}', "call_2")])
    text = answer_of("granite-4.0", [u("q"), message])
    parsed = check_every_split("granite-4.0", text)
    assert (parsed.content, calls(parsed), parsed.errors) == \
        ("Let me check.", [("get_current_weather", {"location": "Paris"}), ("add", {"a": 1, "b": 2})], [])


def test_granite_4_session_with_a_parsed_call_and_results_only_appends():
    session = Session("granite-4.0", tools=TOOLS, date=DATE)
    session.prompt("Weather in Paris?")
    raw = '<tool_call>\n{"name": "get_current_weather", "arguments": {"location": "Paris"}}\n</tool_call>'
    parsed = parse_response("granite-4.0", raw)
    session.commit(raw, content=parsed.content, tool_calls=parsed.tool_calls)
    delta = session.extend([tool('{"temperature": 22}', parsed.tool_calls[0]["id"])])
    assert not delta.reset
    assert delta.text == ("\n<|start_of_role|>user<|end_of_role|>\n<tool_response>\n{\"temperature\": 22}\n"
                          "</tool_response><|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>")


def test_granite_3_3_thinking_session_keeps_the_answer_as_written_and_only_appends():
    session = Session("granite-3.3", template_kwargs={"thinking": True}, date=DATE)
    assert "<think></think>" in session.prompt("2+2?").text
    answer = "<think>add them</think><response>4</response>"
    session.commit(answer)
    delta = session.prompt("3+3?")
    assert not delta.reset and delta.text.startswith("\n<|start_of_role|>user<|end_of_role|>3+3?")
    parsed = parse_response("granite-3.3", answer)
    assert (parsed.reasoning_content, parsed.content) == ("add them", "4")


def test_granite_3_3_controls_reset_every_turn_with_the_reason():
    # the generation prompt carries the controls (<|start_of_role|>assistant {"length": "short"}<|end_of_role|>),
    # the answer renders without them: the history is rewritten, and the session says so
    session = Session("granite-3.3", template_kwargs={"controls": {"length": "short"}}, date=DATE)
    assert session.prompt("hi").text.endswith('<|start_of_role|>assistant {"length": "short"}<|end_of_role|>')
    session.commit("Hello.")
    delta = session.prompt("again")
    assert delta.reset and delta.sequence_start and "renders earlier turns differently" in delta.reason


def test_granite_3_0_session_with_its_own_roles_only_appends():
    session = Session("granite-3.0", tools=TOOLS)
    assert session.prompt("Weather in Paris?").text.startswith("<|start_of_role|>available_tools<|end_of_role|>\n{")
    session.commit("<|tool_call|>[{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"Paris\"}}]")
    delta = session.prompt('{"temperature": 22}', role="tool_response")
    assert not delta.reset and delta.text == (
        "\n<|start_of_role|>tool_response<|end_of_role|>{\"temperature\": 22}<|end_of_text|>\n"
        "<|start_of_role|>assistant<|end_of_role|>")


@pytest.mark.parametrize("name", ["granite3", "granite-3.3"])
def test_granite_3_call_kept_as_tool_calls_is_not_rendered_and_the_session_resets_honestly(name):
    # the official templates print an answer's content only: the <|tool_call|>[...] the model wrote is gone from
    # the history once the turn keeps it as tool_calls, and the next delta says so
    session = Session(name, tools=TOOLS, date=DATE)
    session.prompt("Weather in Paris?")
    raw = '<|tool_call|>[{"name": "get_current_weather", "arguments": {"location": "Paris"}}]'
    parsed = parse_response(name, raw)
    session.commit(raw, content=parsed.content, tool_calls=parsed.tool_calls)
    delta = session.extend([tool('{"temperature": 22}', parsed.tool_calls[0]["id"])])
    assert delta.reset and "renders earlier turns differently" in delta.reason
    assert "assistant<|end_of_role|><|end_of_text|>\n<|start_of_role|>tool<|end_of_role|>" in delta.text
