"""GLM-4.5 / GLM-4.5-Air: its template against the official one, sessions (reasoning dropped from earlier turns,
the thinking switch), and the parser of its calls.

The parser cases take the outputs and expected calls of vLLM's ``tests/tool_use/test_glm4_moe_tool_parser.py``
(no call, one call, two calls, content before a call, a call without arguments, a multi-line value, a malformed
pair) and of llama.cpp's ``tests/test-chat.cpp`` GLM-4.5 cases (reasoning then content, reasoning then a call, a
call after content), as far as they are known here, from memory of their assertions: not copied, and not checked
against the published files. Values are typed by the tools' schemas as both do; arguments are compared as JSON
values. Every case also runs cut at every split point and in odd chunk sizes.
"""
from __future__ import annotations

import pytest

from lmchat import Session, get_template, match_template
from lmchat.tools import ResponseFormat, response_format

from .parser_chunks import calls, check_every_split
from .test_conformance import assert_same

FMT = ResponseFormat("glm45", reasoning=True)
WEATHER = {"type": "function", "function": {"name": "get_current_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "state": {"type": "string"},
                                     "unit": {"type": "string"}, "days": {"type": "integer"}}}}}
SPECIAL = {"type": "function", "function": {"name": "special_function", "parameters": {
    "type": "object", "properties": {"arg1": {"type": "integer"}}}}}
TIME = {"type": "function", "function": {"name": "get_current_time", "parameters": {"type": "object",
                                                                                     "properties": {}}}}
TEXT = {"type": "function", "function": {"name": "write", "parameters": {
    "type": "object", "properties": {"text": {"type": "string"}}}}}
TOOLS = [WEATHER, SPECIAL, TIME, TEXT]  # their schemas type the values
SIZES = ([1], [2], [5, 3], [11])


def call(name, *pairs):
    """A call as the template writes it: the name line, then each key and value on lines of their own."""
    return f"<tool_call>{name}\n" + "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n"
                                            for k, v in pairs) + "</tool_call>"


DALLAS = ("get_current_weather", {"city": "Dallas", "state": "TX", "unit": "fahrenheit"})
ORLANDO = ("get_current_weather", {"city": "Orlando", "state": "FL", "unit": "fahrenheit"})
# (label, model output, content, reasoning, calls)
CASES = [
    ("vllm_no_tools", "This is a test", "This is a test", None, []),
    ("vllm_single_call", call("get_current_weather", ("city", "Dallas"), ("state", "TX"), ("unit", "fahrenheit")),
     "", None, [DALLAS]),
    ("vllm_two_calls", call("get_current_weather", ("city", "Dallas"), ("state", "TX"), ("unit", "fahrenheit"))
     + "\n" + call("get_current_weather", ("city", "Orlando"), ("state", "FL"), ("unit", "fahrenheit")),
     "", None, [DALLAS, ORLANDO]),
    ("vllm_content_before_call", "I'll help you check the weather. " + call("get_current_weather", ("city", "Seattle")),
     "I'll help you check the weather.", None, [("get_current_weather", {"city": "Seattle"})]),  # space dropped
    ("vllm_call_without_arguments", "<tool_call>get_current_time\n</tool_call>", "", None,
     [("get_current_time", {})]),
    ("vllm_multiline_value", call("write", ("text", "line one\nline two\n  indented")), "", None,
     [("write", {"text": "line one\nline two\n  indented"})]),
    ("vllm_typed_by_schema", call("get_current_weather", ("city", "5"), ("days", "5")), "", None,
     [("get_current_weather", {"city": "5", "days": 5})]),
    ("name_then_pairs_without_newlines",
     "<tool_call>get_current_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>", "", None,
     [("get_current_weather", {"city": "Paris"})]),
    ("llama_cpp_reasoning_and_content", "\n<think>I'm\nthinking</think>\nHello, world!\nWhat's up?",
     "Hello, world!\nWhat's up?", "I'm\nthinking", []),
    ("llama_cpp_reasoning_then_call", "\n<think>I'm\nthinking</think>\n" + call("special_function", ("arg1", "1")),
     "", "I'm\nthinking", [("special_function", {"arg1": 1})]),
    ("llama_cpp_content_then_call", "Hello, world!\nWhat's up?\n" + call("special_function", ("arg1", "1")),
     "Hello, world!\nWhat's up?", None, [("special_function", {"arg1": 1})]),
    ("empty_reasoning_block", "\n<think></think>\nHi.", "Hi.", None, []),  # no reasoning: None
    ("markup_inside_a_value", call("write", ("text", "<tool_call>x</arg_key>")), "", None,
     [("write", {"text": "<tool_call>x</arg_key>"})]),
]


@pytest.mark.parametrize("label, text, content, reasoning, expected", CASES, ids=[c[0] for c in CASES])
def test_vllm_and_llama_cpp_cases_whole_and_streamed_at_every_split(label, text, content, reasoning, expected):
    parsed = check_every_split(FMT, text, sizes=SIZES, tools=TOOLS)
    assert (parsed.content, parsed.reasoning_content, calls(parsed), parsed.errors) == (content, reasoning,
                                                                                         expected, [])


@pytest.mark.parametrize("text, note", [
    (call("get_current_weather", ("city", "Seattle")).replace("</tool_call>", "")
     + "<arg_key>incomplete\n<arg_value>v</arg_value>\n</tool_call>", "malformed arguments"),  # vLLM's malformed pair
    ("<tool_call>no name line here</tool_call>", "without a name line"),
    (call("get_current_weather", ("city", "Seattle")).removesuffix("</tool_call>"), "ends inside the call"),
    ("<tool_call>get_current_weather\n<arg_key>city</arg_key>\n<arg_value>Sea", "ends inside an argument"),
])
def test_markup_that_is_no_call_or_a_call_cut_off_is_noted(text, note):
    parsed = check_every_split(FMT, text, sizes=SIZES, tools=TOOLS)
    assert any(note in e for e in parsed.errors), parsed.errors


def test_a_call_cut_off_keeps_its_complete_pairs():
    parsed = check_every_split(FMT, call("get_current_weather", ("city", "Seattle")).removesuffix("</tool_call>"),
                               sizes=SIZES, tools=TOOLS)
    assert calls(parsed) == [("get_current_weather", {"city": "Seattle"})]


def test_calls_the_template_renders_parse_back():
    t = get_template("glm-4.5")
    # a value the schema does not type is read as JSON (null, a list); the schema's strings stay text
    args = {"city": "北京", "days": 3, "extra": None, "more": [1, "x"], "state": "TX"}
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "Checking.", "reasoning_content": "need the tool",
                 "tool_calls": [{"type": "function", "function": {"name": "get_current_weather", "arguments": args}},
                                {"type": "function", "function": {"name": "get_current_time", "arguments": {}}}]}]
    before = t.messages2prompt(messages[:-1], tools=TOOLS)
    after = t.messages2prompt(messages, tools=TOOLS, add_generation_prompt=False)
    assert after.startswith(before)
    parsed = check_every_split(FMT, after[len(before):], sizes=SIZES, tools=TOOLS)
    assert (parsed.content, parsed.reasoning_content, calls(parsed)) == (
        "Checking.", "need the tool", [("get_current_weather", args), ("get_current_time", {})])


# ------------------------------------------------------------------ the template and sessions
def test_the_template_names_its_format_and_bundles_the_model_settings():
    t = get_template("GLM-4.5-Air")
    assert t.name == "glm-4.5" and type(t).reasoning and response_format(t).tools == "glm45"
    assert (t.temperature, t.top_p, t.session_len) == (0.6, 0.95, 131072)
    assert set(t.stop_words) == {"<|user|>", "<|observation|>", "<|endoftext|>"}


def test_earlier_reasoning_is_dropped_and_the_session_resets_with_the_reason():
    session = Session("glm-4.5")
    assert session.prompt("Hi").text == "[gMASK]<sop><|user|>\nHi<|assistant|>"
    session.commit("\n<think>a greeting</think>\nHello.")
    delta = session.prompt("Again")
    assert delta.reset and delta.sequence_start and "a greeting" in delta.reason
    assert delta.text == ("[gMASK]<sop><|user|>\nHi<|assistant|>\n<think></think>\nHello.<|user|>\nAgain"
                          "<|assistant|>")


def test_an_answer_without_reasoning_only_appends():
    session = Session("glm-4.5")
    session.prompt("Hi")
    session.commit("\n<think></think>\nHello.")
    delta = session.prompt("Again")
    assert not delta.reset and delta.text == "<|user|>\nAgain<|assistant|>"


def test_with_thinking_off_every_user_turn_says_nothink_and_the_prompt_closes_the_block():
    session = Session("glm-4.5", template_kwargs={"enable_thinking": False})
    assert session.prompt("Hi").text == "[gMASK]<sop><|user|>\nHi/nothink<|assistant|>\n<think></think>"
    session.commit("\nHello.")
    delta = session.prompt("Again /nothink")
    assert not delta.reset and delta.text == "<|user|>\nAgain /nothink<|assistant|>\n<think></think>"


def test_a_call_its_results_and_the_answer_after_them_keep_the_reasoning_of_the_turn():
    session = Session("glm-4.5", tools=TOOLS)
    session.prompt("Weather in Beijing?")
    session.commit("\n<think>need the tool</think>\n" + call("get_current_weather", ("city", "Beijing")))
    delta = session.extend([{"role": "tool", "content": "sunny"}, {"role": "tool", "content": "25C"}])
    assert not delta.reset
    assert delta.text == ("<|observation|>\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n25C\n"
                          "</tool_response><|assistant|>")
    session.commit("\n<think>got it</think>\nSunny, 25C.")
    delta = session.prompt("Thanks")
    assert delta.reset and "need the tool" in delta.reason  # both answers of the turn lose their reasoning now


@pytest.mark.parametrize("model", ["zai-org/GLM-4.5-Air", "zai-org/GLM-4.5", "unsloth/GLM-4.5-Air-GGUF",
                                   "THUDM/GLM-4.5", "bartowski/zai-org_GLM-4.5-Air-GGUF"])
def test_model_names_match(model):
    assert match_template(model) == "glm-4.5"


def test_glm4_and_glm45v_are_not_taken():
    assert match_template("THUDM/glm-4-9b-chat") == "glm4"
    with pytest.raises(LookupError):  # the vision model has a template of its own
        match_template("zai-org/GLM-4.5V")


# ------------------------------------------------------------------ fixed conversations vs the official template
def u(content, **extra):
    return {"role": "user", "content": content, **extra}


def a(content, **extra):
    return {"role": "assistant", "content": content, **extra}


def tool(content):
    return {"role": "tool", "content": content}


def fn(name, arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


GOLDEN_CONVERSATIONS = [
    [u("q")],
    [{"role": "system", "content": "S"}, u("q"), a("<think>r</think>\n\nans"), u("q2")],
    [u("q"), a("<think>\nr\n</think>\n\n ans ")],
    [u("q"), a("  ans  ", reasoning_content="  rr ")],
    [u("q"), a("a</think>b", reasoning_content="")],  # a string reasoning_content: the content is not split
    [u("q"), a("x", thinking="t")],  # thinking is read as reasoning_content
    [u("q/nothink"), a("ok")],
    [u([{"type": "text", "text": "a"}, "b", {"type": "image"}, {"type": "text"}, {"type": "text", "text": None}])],
    [u(5)], [u({"a": 1})],
    [u("q"), a("c", tool_calls=[fn("f", {"a": 1, "b": "s", "c": [1, "x"], "d": None, "e": {"k": "北"}}),
                                {"name": "g", "arguments": {}}]),
     tool("r1"), tool("r2"), tool([{"output": "o"}, "z", {"x": 1}]), tool({"k": 1}), a("done")],
    [u("q"), a(None, tool_calls=[fn("f", '{"a": 1}')])],  # fails: arguments must be an object
    [u("q"), a("x", tool_calls=[{"function": {"arguments": {}}}])],  # fails: no name
    [u("q"), a("x", tool_calls="abc")],  # fails
    [u("q"), a("x", tool_calls=[])],
    [u("q"), tool(None)], [tool("first")], [u("q"), tool(5)],  # the last fails: not iterable
    [u("q"), {"role": "critic", "content": "c"}, {"role": "system", "content": [{"type": "text", "text": "s"}]}],
    [u("q"), a("<think>a</think>b"), tool("r"), a("<think>c</think>d")],
    [u("q"), a("x", tool_calls=[{"function": {}, "name": "n", "arguments": {"a": True, "b": 1.5}}])],
]
GOLDEN = [("glm-4.5", messages, {"add_generation_prompt": generation_prompt, "tools": tools, **thinking})
          for messages in GOLDEN_CONVERSATIONS for tools in (None, [WEATHER])
          for thinking in ({}, {"enable_thinking": False}, {"enable_thinking": True})
          for generation_prompt in (True, False)]


@pytest.mark.parametrize("name, messages, options", GOLDEN)
def test_reasoning_tools_and_calls_render_as_the_official_template_does(name, messages, options):
    assert_same(name, messages, **options)
