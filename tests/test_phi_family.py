"""The Phi family of 2026: Phi-3-medium, Phi-3-small, Phi-3.5, Phi-4-mini and Phi-4-reasoning against their official
templates, their sessions, and the parser of Phi-4-mini's tool calls and Phi-4-reasoning's ``<think>`` block.

The parser cases take the outputs and expected calls of vLLM's ``tests/tool_use/test_phi4mini_tool_parser.py``
(``functools[...]``: one call, parallel calls over several lines, empty arguments, ``parameters`` for
``arguments``, text around the call, no marker, a call without a name) and of SGLang's Phi-4-mini detector, as
far as they are known here, from memory of their assertions: not copied, and not checked against the published
files. Where lmchat differs the case says so: it keeps the text around calls as content (vLLM returns None), and
a JSON list without its marker is content in both. llama.cpp has no Phi-4-mini format; the
``<|tool_call|>[...]<|/tool_call|>`` cases are the syntax of the model's own tokens, as its model card and
Ollama's template write it. Every case also runs cut at every split point and in odd chunk sizes.
"""
from __future__ import annotations

import json

import pytest

from lmchat import ResponseStream, Session, get_template, match_template, parse_response
from lmchat.errors import InvalidMessages
from lmchat.reasoning import split_reasoning
from lmchat.tools import ResponseFormat, ToolCallStart
from lmchat.tools.registry import prompt_opens_think

from .parser_chunks import calls, check_every_split
from .test_conformance import assert_same

FMT = ResponseFormat("phi4_mini")
OPEN, CLOSE = "<|tool_call|>", "<|/tool_call|>"
SIZES = ([1], [2, 3], [7], [5, 1, 11])


TOKYO = ("get_weather", {"city": "Tokyo"})
# (label, model output, content, calls)
CASES = [
    ("vllm_no_tool", "This is a regular response without any tool calls.",
     "This is a regular response without any tool calls.", []),
    ("vllm_single_tool", 'functools[{"name": "get_weather", "arguments": {"city": "Tokyo"}}]', "", [TOKYO]),
    ("vllm_parallel_tools",
     'functools[\n  {"name": "get_weather", "arguments": {"city": "Tokyo"}},\n'
     '  {"name": "get_time", "arguments": {"timezone": "Asia/Tokyo"}}\n]',
     "", [TOKYO, ("get_time", {"timezone": "Asia/Tokyo"})]),
    ("vllm_empty_arguments", 'functools[{"name": "refresh", "arguments": {}}]', "", [("refresh", {})]),
    ("vllm_parameters_for_arguments", 'functools[{"name": "compute", "parameters": {"x": 1}}]', "",
     [("compute", {"x": 1})]),
    # vLLM returns content None here; lmchat keeps the text around the call
    ("vllm_surrounding_text",
     'Let me check the weather for you.\nfunctools[{"name": "get_weather", "arguments": {"city": "Tokyo"}}]'
     "\nWould you like to know more?",
     "Let me check the weather for you.\nWould you like to know more?", [TOKYO]),
    ("vllm_bare_json_is_content", '[{"name": "x", "arguments": {}}]', '[{"name": "x", "arguments": {}}]', []),
    ("vllm_nested_arguments",
     'functools[{"name": "f", "arguments": {"a": {"b": [1, "]"]}, "c": "functools["}}]', "",
     [("f", {"a": {"b": [1, "]"]}, "c": "functools["})]),
    # the model's own tokens
    ("own_tokens_one_call", OPEN + '[{"name": "get_weather", "arguments": {"city": "Tokyo"}}]' + CLOSE, "",
     [TOKYO]),
    ("own_tokens_two_calls_and_content",
     "Checking both." + OPEN + '[{"name": "get_weather", "arguments": {"city": "Tokyo"}}, '
     '{"name": "get_time", "parameters": {}}]' + CLOSE, "Checking both.", [TOKYO, ("get_time", {})]),
    ("own_tokens_one_object", OPEN + '{"name": "get_weather", "arguments": {"city": "Tokyo"}}' + CLOSE, "",
     [TOKYO]),
    ("own_tokens_unclosed", OPEN + '[{"name": "get_weather", "arguments": {"city": "Tokyo"}}]', "", [TOKYO]),
    ("own_tokens_each_call_in_its_tags",
     OPEN + '[{"name": "a", "arguments": {}}]' + CLOSE + "\n" + OPEN + '[{"name": "b", "arguments": {}}]' + CLOSE,
     "", [("a", {}), ("b", {})]),
    ("functools_in_prose_is_content", "Use functools.lru_cache here.", "Use functools.lru_cache here.", []),
]


@pytest.mark.parametrize("label, text, content, expected", CASES, ids=[c[0] for c in CASES])
def test_vllm_cases_and_the_model_tokens_whole_and_streamed_at_every_split(label, text, content, expected):
    parsed = check_every_split(FMT, text, sizes=SIZES)
    assert (parsed.content, calls(parsed), parsed.errors) == (content, expected, [])


@pytest.mark.parametrize("text, note", [
    ('functools[{"arguments": {"x": 1}}]', "not a tool call"),  # vLLM: the whole output as content, too
    (OPEN + "not json" + CLOSE, "expected a tool call"),
    (OPEN + '[{"name": "f", "arguments": {}}] trailing' + CLOSE, "text after the tool call"),
])
def test_markup_that_is_no_call_is_noted_and_kept(text, note):
    parsed = check_every_split(FMT, text, sizes=SIZES)
    assert any(note in e for e in parsed.errors), parsed.errors
    assert not calls(parsed) or "trailing" in text


def test_a_call_cut_off_keeps_what_it_has_with_a_note():
    # vLLM's regex needs the closing bracket, and returns the text as content; lmchat announces the call
    parsed = check_every_split(FMT, 'functools[{"name": "func", "arguments": {"a": 1', sizes=SIZES)
    assert calls(parsed) == [("func", {"a": 1})] and parsed.errors


def test_the_call_is_announced_once_its_name_is_complete():
    stream = ResponseStream(FMT)
    assert not any(isinstance(e, ToolCallStart) for e in stream.feed(OPEN + '[{"name": "get_wea'))
    started = stream.feed('ther", "arguments": {"city": ')
    assert [e.name for e in started if isinstance(e, ToolCallStart)] == ["get_weather"]


def test_a_forced_call_is_written_between_phi4_minis_own_tokens():
    from lmchat.tools.forcing import forced_calls
    grammar = forced_calls(TOOLS, "phi4-mini", parallel=True).grammar
    assert grammar.startswith('start: "<|tool_call|>" "[" call (", " call)* "]" "<|/tool_call|>"')


def test_phi4_mini_names_its_format():
    t = get_template("Phi-4-mini-instruct")
    assert t.name == "phi4-mini" and type(t).tool_format == "phi4_mini" and not type(t).reasoning
    assert parse_response(t, OPEN + '[{"name": "f", "arguments": {}}]' + CLOSE).tool_calls


# ------------------------------------------------------------------ Phi-4-reasoning
REASONING_CASES = [
    ("<think>Let me add.\n2+2=4.</think>\n\n**4**", "Let me add.\n2+2=4.", "**4**"),
    ("<think>\nstep\n</think>\nThe answer is 4.", "step", "The answer is 4."),
    ("No block, just an answer.", None, "No block, just an answer."),
    ("<think>cut off before the answer", "cut off before the answer", ""),
]


@pytest.mark.parametrize("text, reasoning, content", REASONING_CASES)
def test_phi4_reasoning_splits_its_think_block_at_every_split(text, reasoning, content):
    t = get_template("phi4-reasoning")
    parsed = check_every_split(t, text, sizes=SIZES)
    assert (parsed.reasoning_content, parsed.content) == (reasoning, content)
    assert split_reasoning(t, text) == (reasoning, content)


def test_phi4_reasoning_bundles_its_settings_and_declares_its_markers():
    t = get_template("Phi-4-reasoning-plus")
    assert t.name == "phi4-reasoning" and type(t).reasoning and not prompt_opens_think(t)
    assert (t.temperature, t.top_k, t.top_p, t.session_len) == (0.8, 50, 0.95, 32768)
    from lmchat.tools.registry import output_markers
    assert output_markers(t) == ("<think>", "</think>")


def test_phi4_reasoning_keeps_the_answer_as_written_and_only_appends():
    session = Session("phi4-reasoning")
    first = session.prompt("2+2?")
    assert first.text.startswith("<|im_start|>system<|im_sep|>You are Phi, a language model trained by Microsoft")
    assert first.text.endswith("<|im_end|><|im_start|>user<|im_sep|>2+2?<|im_end|><|im_start|>assistant<|im_sep|>")
    session.commit("<think>add</think>\n\n4")
    delta = session.prompt("And 3+3?")
    assert not delta.reset and delta.text == "<|im_start|>user<|im_sep|>And 3+3?<|im_end|>" \
                                             "<|im_start|>assistant<|im_sep|>"


def test_phi4_reasoning_history_without_its_reasoning_resets_with_a_reason():
    t = get_template("phi4-reasoning")
    session = Session(t)
    session.prompt("2+2?")
    # the answer stored with its reasoning split off, as a client sends it back: the engine holds another text
    session.commit("<think>add</think>\n\n4", content="4", reasoning_content="add")
    delta = session.prompt("And 3+3?")
    assert delta.reset and delta.sequence_start and "renders earlier turns differently" in delta.reason
    assert delta.text == t.messages2prompt([u("2+2?"), a("4", reasoning_content="add"), u("And 3+3?")])


# ------------------------------------------------------------------ the templates
def test_phi3_medium_carries_the_generation_prompt_in_every_user_turn():
    t = get_template("Phi-3-medium-128k-instruct")
    assert t.name == "phi3-medium" and t.session_len == 4096
    text = t.messages2prompt([{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}],
                             add_generation_prompt=False)
    assert text == "<|user|>\nHi<|end|>\n<|assistant|>\n"
    session = Session(t)
    assert session.prompt("Hi").text == text
    session.commit("Hello.")
    delta = session.prompt("Again")
    assert not delta.reset and delta.text == "\n<|user|>\nAgain<|end|>\n<|assistant|>\n"


def test_phi3_small_opens_with_endoftext_and_renders_every_role():
    t = get_template("phi3-small")
    text = t.messages2prompt([{"role": "user", "content": "q"}, {"role": "tool", "content": "r"}])
    assert text == "<|endoftext|><|user|>\nq<|end|>\n<|tool|>\nr<|end|>\n<|assistant|>\n"
    assert t.session_len == 8192


def test_phi35_leaves_out_an_empty_system_message():
    t = get_template("Phi-3.5-MoE-instruct")
    assert t.name == "phi3.5" and t.session_len == 131072
    assert t.messages2prompt([{"role": "system", "content": ""}, {"role": "user", "content": "q"}]) == \
        "<|user|>\nq<|end|>\n<|assistant|>\n"


def test_phi4_mini_sessions_hold_the_call_as_the_model_wrote_it():
    session = Session("phi4-mini")
    assert session.prompt("Weather in Tokyo?").text == "<|user|>Weather in Tokyo?<|end|><|assistant|>"
    answer = OPEN + '[{"name": "get_weather", "arguments": {"city": "Tokyo"}}]' + CLOSE
    session.commit(answer)
    delta = session.extend([{"role": "tool", "content": "sunny"}])
    assert not delta.reset and delta.text == "<|tool|>sunny<|end|><|assistant|>"


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Wetter für 北京",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]
DECLARED = json.dumps([TOOLS[0]["function"]])


def test_phi4_mini_puts_a_tools_argument_where_the_model_card_puts_it():
    t = get_template("phi4-mini")
    with_system = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "q"}]
    assert t.messages2prompt(with_system, tools=TOOLS) == (
        f"<|system|>You are helpful.<|tool|>{DECLARED}<|/tool|><|end|><|user|>q<|end|><|assistant|>")
    # the same as the official template renders for the tools in the system message, as the model card sends them
    assert t.messages2prompt(with_system, tools=TOOLS) == t.messages2prompt(
        [{**with_system[0], "tools": DECLARED}, with_system[1]])
    assert t.messages2prompt([{"role": "user", "content": "q"}], tools=TOOLS) == (
        f"<|system|><|tool|>{DECLARED}<|/tool|><|end|><|user|>q<|end|><|assistant|>")
    # the first system message's own tools win; an empty list declares nothing
    own = [{"role": "system", "content": "S", "tools": "[]"}, {"role": "user", "content": "q"}]
    assert "Wetter" not in t.messages2prompt(own, tools=TOOLS)
    # a later system message's tools do not take back what a session already holds
    session = Session(t, tools=TOOLS)
    session.prompt("q")
    session.commit("a")
    delta = session.extend([{"role": "system", "content": "S2", "tools": "[]"}, {"role": "user", "content": "q2"}])
    assert not delta.reset and delta.text == "<|system|>S2<|tool|>[]<|/tool|><|end|><|user|>q2<|end|><|assistant|>"
    assert session.context == t.messages2prompt(session.messages, tools=TOOLS)
    assert t.messages2prompt(with_system, tools=[]) == t.messages2prompt(with_system)


def test_phi4_mini_refuses_tools_that_are_not_a_string():
    t = get_template("phi4-mini")
    with pytest.raises(InvalidMessages) as info:
        t.messages2prompt([{"role": "system", "content": "S", "tools": [{"name": "f"}]}])
    assert (info.value.index, info.value.field) == (0, "tools")


@pytest.mark.parametrize("model, name", [
    ("microsoft/Phi-3-mini-4k-instruct", "phi3"), ("microsoft/Phi-3-mini-128k-instruct", "phi3"),
    ("microsoft/Phi-3-medium-4k-instruct", "phi3-medium"), ("microsoft/Phi-3-medium-128k-instruct", "phi3-medium"),
    ("microsoft/Phi-3-small-8k-instruct", "phi3-small"), ("microsoft/Phi-3-small-128k-instruct", "phi3-small"),
    ("microsoft/Phi-3.5-mini-instruct", "phi3.5"), ("microsoft/Phi-3.5-MoE-instruct", "phi3.5"),
    ("bartowski/Phi-3.5-mini-instruct-GGUF", "phi3.5"), ("microsoft/phi-4", "phi4"),
    ("microsoft/Phi-4-mini-instruct", "phi4-mini"), ("unsloth/Phi-4-mini-instruct-GGUF", "phi4-mini"),
    ("microsoft/Phi-4-reasoning", "phi4-reasoning"), ("microsoft/Phi-4-reasoning-plus", "phi4-reasoning"),
    ("unsloth/phi-4-GGUF", "phi4"),
])
def test_model_names_match(model, name):
    assert match_template(model) == name


@pytest.mark.parametrize("metadata, name", [
    ({"general.architecture": "phi3", "general.name": "Phi 3.5 Mini Instruct"}, "phi3.5"),
    ({"general.architecture": "phimoe", "general.name": "Phi 3.5 MoE Instruct"}, "phi3.5"),
    ({"general.architecture": "phi3", "general.name": "Phi 3 Medium 128k Instruct"}, "phi3-medium"),
    ({"general.architecture": "phi3", "general.name": "Phi 4 Mini Instruct"}, "phi4-mini"),
    ({"general.architecture": "phi3", "general.basename": "Phi-4-reasoning-plus"}, "phi4-reasoning"),
])
def test_gguf_names_and_architectures_match(metadata, name):
    from lmchat.interop.matching import explain_gguf
    assert explain_gguf("/models/model.gguf", metadata).name == name


# fixed conversations compared with the official templates (golden vectors)
def u(content):
    return {"role": "user", "content": content}


def a(content, **extra):
    return {"role": "assistant", "content": content, **extra}


def system(content, **extra):
    return {"role": "system", "content": content, **extra}


CALL = [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "x"}'}}]
GOLDEN_CONVERSATIONS = [
    [u("q")],
    [system("S"), u("q"), a("c"), u("q2")],
    [system(""), u("q"), a(" spaced \n"), u("")],
    [u("q"), system("late"), a("c")],
    [system("S", tools=DECLARED), u("Weather?"), a("", tool_calls=CALL), {"role": "tool", "content": "sunny"},
     a("Sunny.")],
    [system("S", tools=[{"name": "f"}]), u("q")],  # tools not a string: the official fails
    [u("q"), {"role": "assistant", "tool_calls": CALL}],  # no content: the official fails
    [u("q"), a("<think>why</think>\n\nbecause"), u("q2"), a("<think>x</think>y", reasoning_content="x")],
    [u("q"), {"role": "critic", "content": "y"}, u("q2")],
    [a("first"), u("q")],
    [system(None), u("q")],  # a system message with no content
    [u(["a part"])],  # content that is not a string: the official fails
]
NAMES = ["phi3.5", "phi3-medium", "phi3-small", "phi4-mini", "phi4-reasoning"]
GOLDEN = [(name, messages, {"add_generation_prompt": generation_prompt})
          for name in NAMES for messages in GOLDEN_CONVERSATIONS for generation_prompt in (True, False)]


@pytest.mark.parametrize("name, messages, options", GOLDEN)
def test_conversations_render_as_the_official_templates_do(name, messages, options):
    assert_same(name, messages, **options)
