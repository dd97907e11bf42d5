"""Qwen3-Coder: its template's XML tool list against the official one, and the parser of its XML tool calls.

The parser cases take the inputs and expected calls of vLLM's ``tests/tool_use/test_qwen3coder_tool_parser.py``
(its sample tools; one call, content before it, a multi-line JSON parameter, parallel calls, typed parameters,
the function without ``<tool_call>``, a missing ``</parameter>``, incremental streaming), checked against the
published file, and the Qwen3-Coder XML cases of llama.cpp's ``tests/test-chat.cpp`` (several typed parameters,
Unicode, multi-line code, JSON objects and arrays, an empty value, null, negative and scientific numbers,
XML-like text, quotes) as far as they are known here, from memory of its assertions: not copied. Where lmchat's
conventions differ (content is "" rather than None; llama.cpp trims a value's whitespace where vLLM, followed
here, removes only the template's newline on each side; every case also runs cut at every split point) the
case says so.
"""
from __future__ import annotations

import json

import pytest

from lmchat import ResponseStream, Session, get_template, parse_response
from lmchat.tools import ResponseFormat, ToolCallArgumentsDelta, ToolCallStart
from lmchat.tools.qwen3_coder import typed

from .parser_chunks import calls, check_every_split
from .test_conformance import assert_same

FMT = ResponseFormat("qwen3_coder")


def function(name, properties, required=(), **extra):
    return {"type": "function", "function": {
        "name": name, "description": f"The {name} tool.",
        "parameters": {"type": "object", "properties": properties, "required": list(required)}, **extra}}


# vLLM's sample tools
VLLM_TOOLS = [
    function("get_current_weather", {
        "city": {"type": "string", "description": "The city name"},
        "state": {"type": "string", "description": "The state code"},
        "unit": {"type": "string", "enum": ["fahrenheit", "celsius"]}}, ["city", "state"]),
    function("calculate_area", {
        "shape": {"type": "string"}, "dimensions": {"type": "object"}, "precision": {"type": "integer"}}, ["shape"]),
]
TYPED_TOOL = function("test_types", {
    "int_param": {"type": "integer"}, "float_param": {"type": "float"}, "bool_param": {"type": "boolean"},
    "str_param": {"type": "string"}, "obj_param": {"type": "object"}})


def call(tool_name, /, **params):
    """The model's text of one call, as the template writes it."""
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={tool_name}>\n{body}</function>\n</tool_call>"


DALLAS = call("get_current_weather", city="Dallas", state="TX", unit="fahrenheit")
ORLANDO = call("get_current_weather", city="Orlando", state="FL", unit="celsius")
DALLAS_ARGS = {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}

# (label, model output, tools, content, calls)
VLLM_CASES = [
    ("no_tools", "This is a test response without any tool calls", VLLM_TOOLS,
     "This is a test response without any tool calls", []),
    ("single_tool", DALLAS, VLLM_TOOLS, "", [("get_current_weather", DALLAS_ARGS)]),
    ("single_tool_with_content", "Sure! Let me check the weather for you." + DALLAS, VLLM_TOOLS,
     "Sure! Let me check the weather for you.", [("get_current_weather", DALLAS_ARGS)]),
    ("single_tool_multiline_param",
     call("calculate_area", shape="rectangle", dimensions='{"width": 10, \n "height": 20}', precision="2"),
     VLLM_TOOLS, "", [("calculate_area", {"shape": "rectangle", "dimensions": {"width": 10, "height": 20},
                                          "precision": 2})]),
    ("parallel_tools", DALLAS + "\n" + ORLANDO, VLLM_TOOLS, "",
     [("get_current_weather", DALLAS_ARGS),
      ("get_current_weather", {"city": "Orlando", "state": "FL", "unit": "celsius"})]),
    ("tool_with_typed_params",
     "Let me calculate that area for you." + call("calculate_area", shape="circle", dimensions='{"radius": 15.5}',
                                                   precision="3"),
     VLLM_TOOLS, "Let me calculate that area for you.",
     [("calculate_area", {"shape": "circle", "dimensions": {"radius": 15.5}, "precision": 3})]),
    ("type_conversion",
     call("test_types", int_param="42", float_param="3.14", bool_param="true", str_param="hello world",
          obj_param='{"key": "value"}'),
     [TYPED_TOOL], "",
     [("test_types", {"int_param": 42, "float_param": 3.14, "bool_param": True, "str_param": "hello world",
                      "obj_param": {"key": "value"}})]),
    ("fallback_no_tags",  # vLLM reads a <function=...> the model wrote without <tool_call> around it
     "<function=get_current_weather>\n<parameter=city>\nDallas\n</parameter>\n<parameter=state>\nTX\n</parameter>\n"
     "</function>", VLLM_TOOLS, "", [("get_current_weather", {"city": "Dallas", "state": "TX"})]),
    ("missing_closing_parameter_tag",  # city's value ends where the next parameter starts
     "Let me check the weather for you:\n<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDallas\n"
     "<parameter=state>\nTX\n</parameter>\n<parameter=unit>\nfahrenheit\n</parameter>\n</function>\n</tool_call>",
     VLLM_TOOLS, "Let me check the weather for you:", [("get_current_weather", DALLAS_ARGS)]),
    ("python_literal_object",  # not JSON: vLLM falls back to ast.literal_eval
     call("test_types", obj_param="{'key': 'value', 'n': [1, 2]}"), [TYPED_TOOL], "",
     [("test_types", {"obj_param": {"key": "value", "n": [1, 2]}})]),
]

LLAMA_TOOL = function("llama_cpp", {
    "name": {"type": "string"}, "age": {"type": "integer"}, "active": {"type": "boolean"}, "score": {"type": "number"},
    "text": {"type": "string"}, "code": {"type": "string"}, "config": {"type": "object"},
    "items": {"type": "array"}, "empty_param": {"type": "string"}, "flag": {"type": "boolean"},
    "nothing": {"type": ["string", "null"]}, "negative": {"type": "integer"}, "small": {"type": "number"},
    "xml": {"type": "string"}, "quote": {"type": "string"}, "nested": {"type": "object"},
    "param_1": {"type": "string"}, "param_2_name": {"type": "integer"}})
UNICODE = "Hello 世界! 🌍 Special chars: @#$%^&*()"
CODE = "def hello():\n    print(\"Hello, World!\")\n\n    return True"
# (label, parameters as the model writes them, the arguments read)
LLAMA_CASES = [
    ("multiple_parameters", {"name": "John Doe", "age": "30", "active": "true", "score": "95.5"},
     {"name": "John Doe", "age": 30, "active": True, "score": 95.5}),
    ("unicode", {"text": UNICODE}, {"text": UNICODE}),
    ("multiline_code", {"code": CODE}, {"code": CODE}),
    ("json_object", {"config": '{"key1": "value1", "key2": 42}'}, {"config": {"key1": "value1", "key2": 42}}),
    ("array", {"items": '["item1", "item2", "item3"]'}, {"items": ["item1", "item2", "item3"]}),
    ("booleans", {"active": "true", "flag": "false"}, {"active": True, "flag": False}),
    ("null", {"nothing": "null"}, {"nothing": None}),
    ("negative_and_scientific", {"negative": "-42", "small": "-3.14e-2"}, {"negative": -42, "small": -0.0314}),
    ("xml_like_text", {"xml": "<root><item>test</item></root>"}, {"xml": "<root><item>test</item></root>"}),
    ("quotes", {"quote": 'She said "Hello!" and left.'}, {"quote": 'She said "Hello!" and left.'}),
    ("nested", {"nested": '{"outer": {"inner": [1, {"deep": true}]}}'},
     {"nested": {"outer": {"inner": [1, {"deep": True}]}}}),
    ("names_with_digits", {"param_1": "a", "param_2_name": "7"}, {"param_1": "a", "param_2_name": 7}),
]


@pytest.mark.parametrize("label, text, tools, content, expected", VLLM_CASES, ids=[c[0] for c in VLLM_CASES])
def test_vllm_cases_whole_and_streamed_at_every_split(label, text, tools, content, expected):
    parsed = check_every_split(FMT, text, tools=tools)
    assert (parsed.content, calls(parsed), parsed.errors) == (content, expected, [])


@pytest.mark.parametrize("label, params, expected", LLAMA_CASES, ids=[c[0] for c in LLAMA_CASES])
def test_llama_cpp_cases_whole_and_streamed_at_every_split(label, params, expected):
    parsed = check_every_split(FMT, call("llama_cpp", **params), tools=[LLAMA_TOOL])
    assert (parsed.content, calls(parsed), parsed.errors) == ("", [("llama_cpp", expected)], [])


def test_llama_cpp_empty_parameter():
    parsed = check_every_split(FMT, "<tool_call>\n<function=f>\n<parameter=empty_param>\n</parameter>\n</function>\n"
                               "</tool_call>", tools=[LLAMA_TOOL])
    assert calls(parsed) == [("f", {"empty_param": ""})]


def test_values_keep_their_whitespace_but_the_templates_newlines():
    # llama.cpp trims "      pwd && ls\n    " to "pwd && ls"; vLLM, followed here, drops one newline on each side
    text = "<tool_call>\n<function=execute_command>\n<parameter=command>\n  pwd && ls \n\n</parameter>\n</function>"
    assert calls(parse_response(FMT, text)) == [("execute_command", {"command": "  pwd && ls \n"})]


def test_the_name_comes_whole_and_arguments_stream_a_parameter_at_a_time():
    """vLLM's incremental streaming test: the call's header first, then each parameter once its value ended."""
    text = "I'll check the weather." + DALLAS
    stream = ResponseStream(FMT, tools=VLLM_TOOLS)
    seen = []
    for k, ch in enumerate(text):
        seen += [(k + 1, e) for e in stream.feed(ch)]
    seen += [(len(text), e) for e in stream.finish()]
    starts = [(k, e.name) for k, e in seen if isinstance(e, ToolCallStart)]
    assert starts == [(text.index("<function=get_current_weather>") + len("<function=get_current_weather>"),
                       "get_current_weather")]
    deltas = [(k, e.text) for k, e in seen if isinstance(e, ToolCallArgumentsDelta)]
    assert [t for _, t in deltas] == ['{"city": "Dallas"', ', "state": "TX"', ', "unit": "fahrenheit"', "}"]
    assert deltas[0][0] == text.index("</parameter>") + len("</parameter>")  # the value is typed once it ended
    assert json.loads("".join(t for _, t in deltas)) == DALLAS_ARGS


def test_without_tools_values_are_strings():
    """vLLM types a value by the request's tools only: without them it is the text (but ``null``)."""
    parsed = parse_response(FMT, call("f", a="1", b="true", c="null", d='{"x": 1}'))
    assert calls(parsed) == [("f", {"a": "1", "b": "true", "c": None, "d": '{"x": 1}'})]


@pytest.mark.parametrize("raw, declared, value", [
    ("42", "integer", 42), ("4.2", "integer", "4.2"), ("-7", "int64", -7),
    ("3.0", "number", 3), ("3.5", "float", 3.5), ("nan", "number", "nan"), ("1e999", "number", "1e999"),
    ("True", "boolean", True), ("yes", "boolean", "yes"), (" true", "bool", True), ("FALSE \t", "binary", False),
    ("", "boolean", ""), ("NULL", "string", None),
    ("[1, 2]", "array", [1, 2]), ("{'a': (1, 2)}", "object", {"a": [1, 2]}), ("{1, 2}", "object", "{1, 2}"),
    ("not json", "object", "not json"), ("[1", "list", "[1"), ("7", ["integer", "null"], 7),
    ("7", ["string", "integer"], "7"), ("7", None, "7"), ("x", "enum", "x"), ("[1]", "whatever", [1]),
])
def test_values_are_typed_as_vllm_types_them(raw, declared, value):
    assert typed(raw, declared) == value


FLAGS = [function("f", {"flag": {"type": "boolean"}, "count": {"type": "integer"}})]


@pytest.mark.parametrize("raw, value, noted", [
    ("true", True, False), (" true", True, False), ("False\n", False, False), ("TRUE", True, False),
    ("yes", "yes", True), ("1", "1", True), ("truth", "truth", True),
])
def test_a_boolean_reads_as_the_official_parser_reads_it_and_anything_else_is_noted(raw, value, noted):
    """Qwen3-Coder's own parser strips the value and compares true/false case-insensitively; where it turns
    anything else into false (with only a log line), the value is kept as written with a note, as a mistyped
    integer is (issue 40, item 10: ``yes`` and `` true`` became false without one)."""
    parsed = check_every_split(FMT, call("f", flag=raw, count="abc"), tools=FLAGS)
    assert calls(parsed) == [("f", {"flag": value, "count": "abc"})]
    assert any("'count' should be integer" in e for e in parsed.errors)
    assert any("'flag' should be boolean" in e for e in parsed.errors) == noted, parsed.errors


def test_a_call_cut_off_keeps_its_complete_parameters():
    for cut, note in (("<parameter=state>\nT", "inside parameter 'state'"), ("<parameter=sta", "a parameter name")):
        text = DALLAS[:DALLAS.index("<parameter=state>")] + cut
        parsed = check_every_split(FMT, text, tools=VLLM_TOOLS)
        assert calls(parsed) == [("get_current_weather", {"city": "Dallas"})]
        assert note in parsed.errors[0] and parsed.errors[1:] == [  # and the tools' check
            "tool call 0 (get_current_weather): missing required argument 'state'"], parsed.errors
    parsed = check_every_split(FMT, DALLAS[:DALLAS.index("</function>")], tools=VLLM_TOOLS)  # every parameter complete
    assert calls(parsed) == [("get_current_weather", DALLAS_ARGS)] and not parsed.errors


@pytest.mark.parametrize("text, note", [
    ('<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>', "no <function=NAME>"),
    ("<tool_call>\n</tool_call>", "no <function=NAME>"),
    ("<tool_call>\n<function=>\n</function>\n</tool_call>", "names no function"),
    ("Use <function=get_weather", "ends inside a <function=NAME>"),
])
def test_markup_that_is_no_call_is_content_as_written(text, note):
    parsed = check_every_split(FMT, text)
    assert parsed.tool_calls == [] and parsed.content.startswith(text[:text.index("<")].rstrip())
    assert "".join(parsed.content.split()) in "".join(text.split())
    assert len(parsed.errors) == 1 and note in parsed.errors[0]


def test_text_around_a_call_is_content():
    parsed = check_every_split(FMT, f"First part. {call('f', k='v')} second part.")
    assert (parsed.content, calls(parsed)) == ("First part.  second part.", [("f", {"k": "v"})])
    stray = "<tool_call>\n<function=f>\nhmm\n<parameter=k>\nv\n</parameter>\n</function>\noops\n</tool_call>"
    parsed = check_every_split(FMT, stray)
    assert calls(parsed) == [("f", {"k": "v"})] and parsed.content == "hmm\n\noops" and len(parsed.errors) == 2


def test_two_functions_in_one_tool_call_and_an_unclosed_function():
    text = "<tool_call>\n<function=a>\n<parameter=x>\n1\n</parameter>\n<function=b>\n</function>\n" \
           "<function=c>\n</function>\n</tool_call>"
    assert calls(check_every_split(FMT, text)) == [("a", {"x": "1"}), ("b", {}), ("c", {})]


def test_reasoning_is_split_off_first_when_the_format_is_used_by_a_thinking_model():
    fmt = ResponseFormat("qwen3_coder", reasoning=True)
    parsed = check_every_split(fmt, "<think>\nweather, so the tool\n</think>\n\n" + DALLAS, tools=VLLM_TOOLS)
    assert (parsed.reasoning_content, parsed.content, calls(parsed)) == \
        ("weather, so the tool", "", [("get_current_weather", DALLAS_ARGS)])


def answer_of(messages, tools):
    """The text of the last (assistant) message as the template renders it: what the model wrote."""
    t = get_template("qwen3-coder")
    before = t.messages2prompt(messages[:-1], tools=tools)
    after = t.messages2prompt(messages, tools=tools, add_generation_prompt=False)
    assert after.startswith(before)
    return after[len(before):].removesuffix("<|im_end|>\n")


def test_calls_the_template_renders_parse_back():
    arguments = [{"city": "Dallas", "state": "TX"}, {"shape": "box", "dimensions": {"w": [1, 2.5]}, "precision": 2}]
    message = {"role": "assistant", "content": "Let me check.", "tool_calls": [
        {"type": "function", "function": {"name": n, "arguments": a}}
        for n, a in zip(("get_current_weather", "calculate_area"), arguments, strict=True)]}
    text = answer_of([{"role": "user", "content": "Hi"}, message], VLLM_TOOLS)
    assert text.startswith("Let me check.\n\n<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDallas\n")
    parsed = check_every_split(FMT, text, tools=VLLM_TOOLS)
    assert (parsed.content, calls(parsed), parsed.errors) == \
        ("Let me check.", list(zip(("get_current_weather", "calculate_area"), arguments, strict=True)), [])


def test_the_template_names_the_format_and_bundles_the_model_settings():
    t = get_template("qwen3-coder-480b-a35b-instruct")
    assert type(t).tool_format == "qwen3_coder" and not type(t).reasoning
    assert (t.temperature, t.top_p, t.top_k, t.repetition_penalty) == (0.7, 0.8, 20, 1.05)
    assert parse_response(t, DALLAS, tools=VLLM_TOOLS).tool_calls[0]["function"]["name"] == "get_current_weather"


def test_a_session_holds_the_answer_with_its_call_as_the_template_renders_it():
    session = Session("qwen3-coder", tools=VLLM_TOOLS)
    first = session.prompt("Weather in Dallas?")
    assert "<name>get_current_weather</name>" in first.text and first.text.endswith("<|im_start|>assistant\n")
    session.commit(DALLAS)
    delta = session.prompt("Thanks")
    assert not delta.reset and delta.text == "\n<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n"


# the tool list rendered in XML: fixed conversations compared with the official template (golden vectors)
ODD_TOOL = {"type": "function", "function": {
    "name": "odd", "description": "  padded\n", "strict": True, "cache": {"ttl": 5}, "note": None,
    "parameters": {"type": "object", "required": ["x"], "additionalProperties": False, "$defs": {"a": 1},
                   "properties": {"x": {"type": ["string", "null"], "description": None, "enum": [1, "b"],
                                        "default": 3.5, "items": {"type": "integer"}},
                                  "y": "not a schema", "z": {}, "w": {"title": "T", "format": None}}}}}
BARE_TOOLS = [{"name": "bare", "parameters": {"type": "object"}}, {"name": "no_parameters"}]


def u(text):
    return {"role": "user", "content": text}


def tool(text):
    return {"role": "tool", "content": text}


def assistant(content, *calls):
    return {"role": "assistant", "content": content,
            "tool_calls": [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]}


GOLDEN_CONVERSATIONS = [
    [u("q")],
    [{"role": "system", "content": "Be brief."}, u("q")],
    [{"role": "system", "content": "s"}, tool("first"), tool("second"), u("q")],
    [u("q"), assistant("  Let me check.  \n", ("odd", {"x": "a\nb", "n": 1, "f": 1.5, "b": True, "l": [1, "a"],
                                                      "d": {"k": "v"}, "e": "", "s": "  sp "})),
     tool("r"), tool("3"), u("thanks"), {"role": "assistant", "content": "Done."}],
    [u("q"), assistant("   ", ("bare", {})), {"role": "tool"}],
    [u("q"), assistant("c", ("odd", '{"x": 1}'))],  # the official template iterates the arguments: a string fails
    [u("q"), {"role": "critic", "content": "x"}, {"role": "system", "content": "late"}],
]
GOLDEN = [("qwen3-coder", messages, {"tools": tools, "add_generation_prompt": generation_prompt})
          for messages in GOLDEN_CONVERSATIONS for tools in (None, [ODD_TOOL], [ODD_TOOL, *BARE_TOOLS])
          for generation_prompt in (True, False)]


@pytest.mark.parametrize("name, messages, options", GOLDEN)
def test_the_tool_list_and_calls_render_as_the_official_template_does(name, messages, options):
    assert_same(name, messages, **options)
