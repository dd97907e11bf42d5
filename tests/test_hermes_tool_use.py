"""Hermes 2 Pro and Hermes 3: the default template without tools, the ``tool_use`` template with them.

transformers renders a model's ``tool_use`` template whenever ``tools`` is not None (``[]`` too): the golden
conversations run with ``tools`` None, ``[]`` and a list, so both texts are compared. The parser cases take the
outputs and expected calls of vLLM's ``tests/tool_use/test_hermes_tool_parser.py`` and llama.cpp's
``tests/test-chat.cpp`` Hermes 2 Pro cases (one call, content before a call, two calls, a call without
arguments), as far as they are known here, from memory of their assertions: not copied, and not checked
against the published files. Every case also runs cut at every split point and in odd chunk sizes.
"""
from __future__ import annotations

import pytest

from lmchat import Session, get_template, match_template
from lmchat.tools import ResponseFormat

from .parser_chunks import calls, check_every_split
from .test_conformance import assert_same

FMT = ResponseFormat("hermes")
SIZES = ([1], [2], [3, 5], [7, 1, 4])


def tag(name, args):
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


CASES = [
    ("vllm_no_tool_call", "This is a test", "This is a test", []),
    ("vllm_one_call", tag("get_current_weather", '{"city": "Dallas", "state": "TX", "unit": "fahrenheit"}'), "",
     [("get_current_weather", {"city": "Dallas", "state": "TX", "unit": "fahrenheit"})]),
    ("vllm_two_calls", tag("get_current_weather", '{"city": "Dallas"}') + "\n"
     + tag("get_current_weather", '{"city": "Orlando"}'), "",
     [("get_current_weather", {"city": "Dallas"}), ("get_current_weather", {"city": "Orlando"})]),
    ("vllm_content_before_call", "I'll check the weather.\n" + tag("get_current_weather", '{"city": "Dallas"}'),
     "I'll check the weather.", [("get_current_weather", {"city": "Dallas"})]),
    ("llama_cpp_special_function", tag("special_function", '{"arg1": 1}'), "", [("special_function", {"arg1": 1})]),
    ("llama_cpp_content_then_call", "Hello, world!\nWhat's up?" + tag("special_function", '{"arg1": 1}'),
     "Hello, world!\nWhat's up?", [("special_function", {"arg1": 1})]),
    ("llama_cpp_no_arguments", '<tool_call>\n{"name": "special_function_with_opt"}\n</tool_call>', "",
     [("special_function_with_opt", {})]),
]


@pytest.mark.parametrize("label, text, content, expected", CASES, ids=[c[0] for c in CASES])
def test_vllm_and_llama_cpp_cases_whole_and_streamed_at_every_split(label, text, content, expected):
    parsed = check_every_split(FMT, text, sizes=SIZES)
    assert (parsed.content, calls(parsed), parsed.errors) == (content, expected, [])


# ------------------------------------------------------------------ the templates
TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Wetter für 北京",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "  the city  "},
        "days": {"type": "array", "items": {"type": "integer"}},
        "unit": {"type": ["string", "integer"]},
        "extra": {"type": "object", "additionalProperties": {"type": "number"}},
        "flag": {"type": "boolean"}, "free": {}}, "required": ["city"]}}}
BARE = {"name": "ping", "description": "no arguments", "parameters": {"type": "object", "properties": {}},
        "return": {"type": "string", "description": "pong"}}


def tool_calls(*pairs):
    return [{"id": f"call_{k}", "type": "function", "function": {"name": n, "arguments": a}}
            for k, (n, a) in enumerate(pairs)]


def u(content):
    return {"role": "user", "content": content}


def test_with_tools_the_tool_use_template_renders_calls_that_parse_back():
    t = get_template("hermes3")
    messages = [u("Weather?"), {"role": "assistant", "content": "ignored",
                                "tool_calls": tool_calls(("get_weather", {"city": "北京"}), ("ping", "{}"))}]
    before = t.messages2prompt(messages[:-1], tools=[TOOL])
    after = t.messages2prompt(messages, tools=[TOOL], add_generation_prompt=False)
    assert before.startswith("<|begin_of_text|><|im_start|>system\nYou are a function calling AI model.")
    assert '"description": "get_weather(city: str, days: list[Union[]],' in before  # the macro, as Jinja runs it
    prefix = before.removesuffix("<|im_start|>assistant\n") + "<|im_start|>assistant\n"
    assert after.startswith(prefix.removesuffix("\n"))
    answer = after[len(prefix):].removesuffix("<|im_end|>\n")
    assert calls(check_every_split(FMT, answer, sizes=SIZES)) == [("get_weather", {"city": "北京"}), ("ping", {})]


def test_without_tools_hermes3_keeps_its_default_system_prompt_and_with_tools_it_has_none():
    t = get_template("hermes3")
    assert t.messages2prompt([u("q")]).startswith("<|begin_of_text|><|im_start|>system\nYou are a helpful")
    assert "You are a helpful" not in t.messages2prompt([u("q")], tools=[])
    assert get_template("hermes-2-pro").messages2prompt([u("q")]) == (
        "<|begin_of_text|><|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n")


def test_a_session_resets_honestly_after_a_tool_result():
    session = Session("hermes-2-pro", tools=[TOOL])
    session.prompt("Weather in Beijing?")
    session.commit(tag("get_weather", '{"city": "Beijing"}'))
    delta = session.extend([{"role": "tool", "content": "sunny"}])
    assert not delta.reset
    assert delta.text == "\n<|im_start|>tool\n<tool_response>\nsunny\n</tool_response><|im_end|><|im_start|>assistant\n"
    session.commit("Sunny.")
    delta = session.prompt("Thanks")
    # the official template puts "\n" before a result's <|im_end|> once a message follows it
    assert delta.reset and delta.reason and "</tool_response>\n<|im_end|>" in delta.text


def test_plain_turns_with_tools_only_append():
    session = Session("hermes3", tools=[TOOL])
    session.prompt("Hi")
    session.commit("Hello.")
    delta = session.prompt("Again")
    assert not delta.reset and delta.text == "\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n"


def test_the_templates_name_the_format_and_bundle_the_model_settings():
    pro, three = get_template("Hermes-2-Pro-Llama-3-8B"), get_template("hermes-3")
    assert (pro.name, three.name) == ("hermes-2-pro", "hermes3")
    assert get_template("hermes2-pro").name == "hermes-2-pro"
    assert type(pro).tool_format == type(three).tool_format == "hermes"
    assert (pro.session_len, three.session_len) == (8192, 131072)


@pytest.mark.parametrize("model, name", [
    ("NousResearch/Hermes-2-Pro-Llama-3-8B", "hermes-2-pro"), ("NousResearch/Hermes-2-Pro-Llama-3-70B", "hermes-2-pro"),
    ("Hermes-2-Pro-Llama-3-8B-Q4_K_M.gguf", "hermes-2-pro"), ("NousResearch/Hermes-3-Llama-3.1-8B", "hermes3"),
    ("Hermes-3-Llama-3.1-70B.Q4_K_M.gguf", "hermes3"),
])
def test_model_names_match(model, name):
    assert match_template(model) == name


# fixed conversations compared with the official templates (golden vectors): each with tools None, [] and a list
GOLDEN_CONVERSATIONS = [
    [u("q")],
    [{"role": "system", "content": "S"}, u("q"), {"role": "assistant", "content": "a"}, u("r")],
    [u("q"), {"role": "assistant", "content": "c", "tool_calls": tool_calls(
        ("get_weather", {"city": "北京"}), ("ping", '{"raw": "text as written"}'))},
     {"role": "tool", "tool_call_id": "call_0", "content": "sunny"},
     {"role": "tool", "tool_call_id": "call_1", "content": "pong"}, {"role": "assistant", "content": "Done."}],
    [u("q"), {"role": "assistant", "tool_calls": tool_calls(("ping", {}))}, {"role": "tool", "content": "pong"}],
    # no function wrapper, no arguments; an empty list of calls (the content is not rendered)
    [u("q"), {"role": "assistant", "tool_calls": [{"name": "ping"}]},
     {"role": "assistant", "content": "x", "tool_calls": []}],
    # results first (no tool header), a result without content or of another type, a role the template skips
    [{"role": "tool", "content": "r"}, {"role": "tool", "content": [1, "a"]}, u("x"),
     {"role": "critic", "content": "c"}, {"role": "tool"}],
    [u(5)],  # fails: content that is not a string
]
GOLDEN = [(name, messages, {"tools": tools, "add_generation_prompt": generation_prompt})
          for name in ("hermes-2-pro", "hermes3") for messages in GOLDEN_CONVERSATIONS
          for tools in (None, [], [TOOL, BARE]) for generation_prompt in (True, False)]
# tools the tool_use template prints as Jinja reads them, or rejects
ODD_TOOLS = [
    [{"name": "f", "description": "params without properties", "parameters": {"type": "object"}}],
    [{"name": "f", "description": "null params", "parameters": None, "return": {"type": "object"}}],
    [{"name": "f", "description": "no params"}],  # fails: properties of an undefined value
    [{"name": "f", "parameters": {}}],  # fails: no description
    [{"name": "f", "description": "d", "parameters": {"properties": {"a": {"type": "null"}}}}],  # fails: recursion
    [{"name": "f", "description": "d", "parameters": {"properties": {"a": {"type": ""}, "b": {"description": 7},
                                                                       "c": {"type": None}}}}],
]
GOLDEN += [("hermes3", [u("q")], {"tools": tools}) for tools in ODD_TOOLS]


@pytest.mark.parametrize("name, messages, options", GOLDEN)
def test_conversations_render_as_the_official_templates_do(name, messages, options):
    assert_same(name, messages, **options)
