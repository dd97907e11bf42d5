"""Functionary v3.1 and v3.2 (MeetKai): their templates against the official ones, and the parsers of their calls.

The parser cases take the outputs and expected calls of llama.cpp's ``tests/test-chat.cpp`` Functionary cases
(v3.1: plain content, ``<function=special_function>{"arg1": 1}</function>``, code after ``<|python_tag|>``;
v3.2: ``all\\n`` content, ``special_function\\n{"arg1": 1}``, content then a call, ``python\\n`` code), as far
as they are known here, from memory of their assertions: not copied, and not checked against the published
file (vLLM and SGLang ship no Functionary parser). Every case also runs cut at every split point and in odd
chunk sizes.
"""
from __future__ import annotations

import pytest

from lmchat import ResponseStream, Session, get_template, match_template
from lmchat.tools import ResponseFormat, ToolCallStart

from .parser_chunks import calls, check_every_split
from .test_conformance import assert_same

V31, V32 = ResponseFormat("functionary_v3_1"), ResponseFormat("functionary_v3_2")
SIZES = ([1], [2], [3, 5], [7, 1, 4])


SPECIAL = ("special_function", {"arg1": 1})
HEY = ("python", {"code": "# This is a program:\nprint('hey')"})
# (label, format, model output, content, calls)
CASES = [
    ("llama_cpp_v31_content", V31, "Hello, world!\nWhat's up?", "Hello, world!\nWhat's up?", []),
    ("llama_cpp_v31_call", V31, '<function=special_function>{"arg1": 1}</function>', "", [SPECIAL]),
    ("llama_cpp_v31_content_then_call", V31, 'Hello, world!\nWhat\'s up?<function=special_function>{"arg1": 1}'
     "</function>", "Hello, world!\nWhat's up?", [SPECIAL]),
    ("llama_cpp_v31_python", V31, "<|python_tag|># This is a program:\nprint('hey')", "", [HEY]),
    ("v31_two_calls_and_markup_in_strings", V31, '<function=f>{"a": "</func"}</function><function=g.h>{}</function>',
     "", [("f", {"a": "</func"}), ("g.h", {})]),
    ("v31_python_json_arguments", V31, '<|python_tag|>{"code": "x = 1"}', "", [("python", {"code": "x = 1"})]),
    ("llama_cpp_v32_content", V32, "all\nHello, world!\nWhat's up?", "Hello, world!\nWhat's up?", []),
    ("llama_cpp_v32_call", V32, 'special_function\n{"arg1": 1}', "", [SPECIAL]),
    ("llama_cpp_v32_content_then_call", V32, 'all\nHello, world!\nWhat\'s up?>>>special_function\n{"arg1": 1}',
     "Hello, world!\nWhat's up?", [SPECIAL]),
    ("llama_cpp_v32_python", V32, "python\n# This is a program:\nprint('hey')", "", [HEY]),
    ("v32_two_calls_marker_in_a_string", V32, 'f\n{"a": ">>>all"}>>>g\n{"b": [1, 2]}', "",
     [("f", {"a": ">>>all"}), ("g", {"b": [1, 2]})]),
    ("v32_no_recipient_line", V32, "Hello there, no recipient", "Hello there, no recipient", []),
]


@pytest.mark.parametrize("label, fmt, text, content, expected", CASES, ids=[c[0] for c in CASES])
def test_llama_cpp_cases_whole_and_streamed_at_every_split(label, fmt, text, content, expected):
    parsed = check_every_split(fmt, text, sizes=SIZES)
    assert (parsed.content, calls(parsed), parsed.errors) == (content, expected, [])


@pytest.mark.parametrize("fmt, text, note", [
    (V31, "<function=two words>{}</function>", "without a 'NAME>' head"),
    (V31, '<function=f>{"a": 1} trailing</function>', "text after the tool call's arguments"),
    (V31, "<|python_tag|>  ", "no code after"),
    (V32, 'f\n{"a": 1} trailing>>>all\nok', "text after the tool call's arguments"),
])
def test_markup_that_is_no_call_is_noted(fmt, text, note):
    parsed = check_every_split(fmt, text, sizes=SIZES)
    assert any(note in e for e in parsed.errors), parsed.errors


@pytest.mark.parametrize("fmt, text", [(V31, '<function=f>{"a": 1'), (V32, 'f\n{"a": 1')])
def test_a_call_cut_off_keeps_what_it_has_with_a_note(fmt, text):
    parsed = check_every_split(fmt, text, sizes=SIZES)
    assert calls(parsed) == [("f", {"a": 1})] and parsed.errors


@pytest.mark.parametrize("fmt, head, rest", [(V31, "<function=get_weather", '>{"city": "'),
                                             (V32, "get_weather", '\n{"city": "')])
def test_the_name_is_announced_once_complete_and_the_arguments_stream(fmt, head, rest):
    stream = ResponseStream(fmt)
    assert not any(isinstance(e, ToolCallStart) for e in stream.feed(head))
    assert [e.name for e in stream.feed(rest) if isinstance(e, ToolCallStart)] == ["get_weather"]


# ------------------------------------------------------------------ the templates
def tool_calls(*pairs):
    return [{"id": f"call_{k}", "type": "function", "function": {"name": n, "arguments": a}}
            for k, (n, a) in enumerate(pairs)]


def u(content):
    return {"role": "user", "content": content}


def answer_of(name, message, tools):
    """The text of an assistant message the template renders, cut out of the conversation after its prompt."""
    t = get_template(name)
    before = t.messages2prompt([u("q")], tools=tools)
    after = t.messages2prompt([u("q"), message], tools=tools, add_generation_prompt=False)
    assert after.startswith(before)
    return after[len(before):]


def test_calls_the_templates_render_parse_back():
    message = {"role": "assistant", "content": "Checking.",
               "tool_calls": tool_calls(("get_weather", '{"city": "北京"}'), ("add", '{"a": 1}'))}
    v31 = answer_of("functionary-v3.1", message, [TOOL]).removesuffix("<|eom_id|>")
    v32 = answer_of("functionary-v3.2", message, [TOOL]).removesuffix("<|eot_id|>")
    expected = ("Checking.", [("get_weather", {"city": "北京"}), ("add", {"a": 1})])
    assert (check_every_split(V31, v31, sizes=SIZES).content,
            calls(check_every_split(V31, v31, sizes=SIZES))) == expected
    assert (check_every_split(V32, v32, sizes=SIZES).content,
            calls(check_every_split(V32, v32, sizes=SIZES))) == expected


def test_v31_escapes_its_tool_list_as_the_official_markup_does():
    prompt = get_template("functionary-v3.1").messages2prompt([u("q")], tools=[TOOL])
    assert "Use the function 'get_weather' to 'Wetter für 北京 &amp; &lt;mehr&gt;'\n{&#34;name&#34;:" in prompt


@pytest.mark.parametrize("answer, stop", [('<function=get_weather>{"city": "Paris"}</function>', "<|eom_id|>"),
                                          ("<|python_tag|>print(1)", "<|eom_id|>"), ("Hello.", None)])
def test_a_v31_session_holds_calls_as_written_and_only_appends(answer, stop):
    session = Session("functionary-v3.1", tools=[TOOL])
    session.prompt("Weather in Paris?")
    session.commit(answer, stop=stop)
    delta = session.extend([{"role": "tool", "content": "22"}] if stop else [u("Thanks")])
    assert not delta.reset, delta.reason


def test_a_v31_call_that_ended_with_eot_resets_honestly():
    session = Session("functionary-v3.1")
    session.prompt("Weather in Paris?")
    session.commit('<function=get_weather>{"city": "Paris"}</function>')  # the template writes <|eom_id|> after it
    delta = session.extend([{"role": "tool", "content": "22"}])
    assert delta.reset and delta.reason


def test_a_v32_session_splits_answers_into_text_and_calls_and_only_appends():
    session = Session("functionary-v3.2", tools=[TOOL])
    assert session.prompt("Weather in Paris?").text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n>>>")
    session.commit('all\nLet me look.>>>get_weather\n{"city": "Paris"}')
    assert session.messages[-1]["content"] == "Let me look."
    function = session.messages[-1]["tool_calls"][0]["function"]
    assert function == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    delta = session.extend([{"role": "tool", "content": "22"}])
    assert not delta.reset
    session.commit("all\nIt is 22.")
    delta = session.prompt("Thanks")
    assert not delta.reset and session.messages[-2]["content"] == "It is 22."


def test_the_templates_name_their_formats_and_bundle_the_model_settings():
    v31, v32 = get_template("functionary-medium-v3.1"), get_template("functionary-small-v3.2")
    assert (v31.name, v32.name) == ("functionary-v3.1", "functionary-v3.2")
    assert (type(v31).tool_format, type(v32).tool_format) == ("functionary_v3_1", "functionary_v3_2")
    assert (v31.session_len, v32.session_len) == (131072, 8192)
    assert "<|eom_id|>" in v31.stop_words


@pytest.mark.parametrize("model, name", [
    ("meetkai/functionary-medium-v3.1", "functionary-v3.1"), ("meetkai/functionary-small-v3.1", "functionary-v3.1"),
    ("meetkai/functionary-small-v3.2", "functionary-v3.2"), ("functionary-medium-v3.2.Q4_0.gguf", "functionary-v3.2"),
])
def test_model_names_match(model, name):
    assert match_template(model) == name


# fixed conversations compared with the official templates (golden vectors)
TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Wetter für 北京 & <mehr>",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city", "default": "Paris", "examples": ["Rome", "it's"]},
        "days": {"type": "array", "items": {"type": "integer"}, "description": "days."},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", 3]}},
        "grid": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
        "spots": {"type": "array", "items": {"type": "object", "properties": {
            "x": {"type": "integer", "minimum": 0, "maximum": 5}}, "required": ["x"]}},
        "free": {"type": "array"},
        "opt": {"type": "object", "description": "nested", "properties": {
            "a": {"type": "boolean", "nullable": True}, "b": {"type": ["string", "null"]}}},
        "when": {"oneOf": [{"type": "string", "format": "date"}, {"type": "integer", "format": "unix"}]},
        "any": {}, "code": {"maxLength": 3, "minLength": 0, "format": "email"},
        "unit": {"type": "string", "enum": ["c", "f"], "default": "c"}}, "required": ["city", "any"]}}}
BARE = {"name": "ping", "description": "no arguments"}
INTERPRETER = {"type": "code_interpreter"}
CONVERSATIONS = [
    [u("q")],
    [{"role": "system", "content": "S"}, u("q"), {"role": "assistant", "content": "a"}, u("r")],
    [u("q"), {"role": "assistant", "content": "c", "tool_calls": tool_calls(
        ("get_weather", '{"city": "北京"}'), ("python", "print('hi')"))},
     {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "hi"},
     {"role": "assistant", "content": "Done."}],
    [u("q"), {"role": "assistant", "content": "", "tool_calls": []}, {"role": "critic", "content": "c"}],
    [u("q"), {"role": "assistant", "tool_calls": tool_calls(("get_weather", {"city": "x"}))}],  # fails: not a string
    [{"role": "assistant", "content": ["parts"]}, u("q")],
    [u(5)],  # fails: content that is not a string
]
GOLDEN = [(name, messages, {"tools": tools, "add_generation_prompt": generation_prompt})
          for name in ("functionary-v3.1", "functionary-v3.2") for messages in CONVERSATIONS
          for tools in (None, [], [TOOL, BARE], [TOOL, INTERPRETER]) for generation_prompt in (True, False)]
GOLDEN += [(name, [u("q")], {"tools": tools}) for name in ("functionary-v3.1", "functionary-v3.2")
           for tools in ([INTERPRETER], [{"name": "x", "description": None}], [{"type": "function"}])]


@pytest.mark.parametrize("name, messages, options", GOLDEN)
def test_conversations_render_as_the_official_templates_do(name, messages, options):
    assert_same(name, messages, **options)
