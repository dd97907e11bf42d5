"""Cohere's Command-R family: command-r-plus, command-r (v01) and command-r7b against the official templates,
their sessions, and the parsers of their answers (``command_r``, ``command_r7b``).

The R7B parser cases take the outputs and expected messages of llama.cpp's ``tests/test-chat.cpp`` Command R7B
cases (a response, thinking then a response, thinking then an action with one call, an action alone), as far as
they are known here, from memory of their assertions: not copied, and not checked against the published file.
llama.cpp keeps the ``tool_call_id`` the model wrote ("0") as the call's id; lmchat gives calls ids of their own,
since the template renders a call's position there, not its id. vLLM and SGLang have no Command-R parser; the
Command-R cases take the ``Action:`` list of the Command R+ model card's tool-use example and the template's own
instruction (a ``directly-answer`` tool), as remembered. Every case also runs cut at every split point, a
character at a time and in odd chunk sizes.
"""
from __future__ import annotations

import pytest

from lmchat import ResponseStream, Session, get_template, match_template, parse_response
from lmchat.errors import TemplateRuleError
from lmchat.messages import calls_as
from lmchat.registry import template_class
from lmchat.tools import ResponseFormat, ToolCallStart

from .parser_chunks import calls, check_every_split
from .test_conformance import assert_same

R, R7B = ResponseFormat("command_r"), ResponseFormat("command_r7b", reasoning=True)
TURN, CHATBOT = "<|END_OF_TURN_TOKEN|>", "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
SIZES = ([1], [2], [3, 5], [7, 1, 11])  # a character at a time, then odd chunk sizes


# ------------------------------------------------------------------ Command R7B's answers
def action(*items):
    return "<|START_ACTION|>[\n    " + ",\n    ".join(items) + "\n]<|END_ACTION|>"


SPECIAL = '{"tool_call_id": "0", "tool_name": "special_function", "parameters": {"arg1": 1}}'
HELLO = "Hello, world!\nWhat's up?"
# (label, model output, content, reasoning, calls)
R7B_CASES = [
    ("llama_cpp_response", f"<|START_RESPONSE|>{HELLO}<|END_RESPONSE|>", HELLO, None, []),
    ("llama_cpp_thoughts_then_response",
     f"<|START_THINKING|>I'm\nthinking<|END_THINKING|><|START_RESPONSE|>{HELLO}<|END_RESPONSE|>",
     HELLO, "I'm\nthinking", []),
    ("llama_cpp_thoughts_then_call", "<|START_THINKING|>I'm\nthinking<|END_THINKING|>" + action(SPECIAL),
     "", "I'm\nthinking", [("special_function", {"arg1": 1})]),
    ("llama_cpp_call_alone", action(SPECIAL), "", None, [("special_function", {"arg1": 1})]),
    # an opening marker inside a string is text (a closing one ends the block wherever it is, as special tokens do)
    ("two_calls_as_the_template_writes_them",
     "<|START_THINKING|>plan<|END_THINKING|>" + action(SPECIAL, '{"tool_call_id": "1", "tool_name": "g", '
                                                               '"parameters": {"q": "<|START_RESPONSE|>"}}'),
     "", "plan", [("special_function", {"arg1": 1}), ("g", {"q": "<|START_RESPONSE|>"})]),
    ("plain_text_without_markers", HELLO, HELLO, None, []),
    ("stray_end_marker_dropped", f"{HELLO}<|END_RESPONSE|>", HELLO, None, []),
]


@pytest.mark.parametrize("label, text, content, reasoning, expected", R7B_CASES, ids=[c[0] for c in R7B_CASES])
def test_r7b_cases_whole_and_streamed_at_every_split(label, text, content, reasoning, expected):
    parsed = check_every_split(R7B, text, sizes=SIZES)
    assert (parsed.content, parsed.reasoning_content, calls(parsed), parsed.errors) == \
        (content, reasoning, expected, [])


def test_r7b_calls_get_ids_of_their_own_not_the_position_written():
    parsed = parse_response(R7B, action(SPECIAL, SPECIAL))
    ids = [c["id"] for c in parsed.tool_calls]
    assert len(set(ids)) == 2 and "0" not in ids


def test_r7b_thinking_cut_off_is_reasoning_with_a_note():
    parsed = check_every_split(R7B, "<|START_THINKING|>I'm\nthink", sizes=SIZES)
    assert parsed.reasoning_content == "I'm\nthink" and parsed.content == "" and parsed.errors


def test_r7b_an_action_that_is_no_list_is_content_with_a_note():
    parsed = check_every_split(R7B, "<|START_ACTION|>not json<|END_ACTION|>", sizes=SIZES)
    assert not parsed.tool_calls and "not json" in parsed.content and parsed.errors


def test_r7b_a_call_is_announced_once_its_name_is_complete():
    stream = ResponseStream(R7B)
    assert not any(isinstance(e, ToolCallStart) for e in stream.feed('<|START_ACTION|>[{"tool_name": "spec'))
    started = stream.feed('ial", "parameters": {"a": ')
    assert [e.name for e in started if isinstance(e, ToolCallStart)] == ["special"]


# ------------------------------------------------------------------ Command-R's answers
SEARCH = ('Action: ```json\n[\n    {\n        "tool_name": "internet_search",\n        "parameters": {\n'
          '            "query": "biggest penguin in the world"\n        }\n    }\n]\n```')
R_CASES = [
    ("model_card_search", SEARCH, "", [("internet_search", {"query": "biggest penguin in the world"})]),
    ("plan_then_action", "I will search for it.\n" + SEARCH, "I will search for it.",
     [("internet_search", {"query": "biggest penguin in the world"})]),
    ("directly_answer_is_no_call", 'Action: ```json\n[\n    {\n        "tool_name": "directly_answer",\n'
                                   '        "parameters": {}\n    }\n]\n```', "", []),
    ("directly_answer_beside_a_call", 'Action: ```json\n[{"tool_name": "directly-answer", "parameters": {}}, '
                                      '{"tool_name": "f", "parameters": {"a": [1]}}]```', "", [("f", {"a": [1]})]),
    ("unfenced_list", 'Action: [{"tool_name": "f", "parameters": {}}]', "", [("f", {})]),
    ("text_after_the_list", 'Action: ```json\n[{"tool_name": "f", "parameters": {}}]\n```\nDone.', "Done.",
     [("f", {})]),
    ("action_in_prose_is_text", "The Action: button is red.", "The Action: button is red.", []),
    ("other_fence_is_text", "Action: ```python\nprint(1)\n```", "Action: ```python\nprint(1)\n```", []),
]


@pytest.mark.parametrize("label, text, content, expected", R_CASES, ids=[c[0] for c in R_CASES])
def test_command_r_cases_whole_and_streamed_at_every_split(label, text, content, expected):
    parsed = check_every_split(R, text, sizes=SIZES)
    assert (parsed.content, calls(parsed), parsed.errors) == (content, expected, [])


def test_command_r_a_broken_list_is_content_with_a_note():
    parsed = check_every_split(R, "Action: ```json\n[{\"tool\": 1}]\n```", sizes=SIZES)
    assert not parsed.tool_calls and parsed.content.startswith("Action:") and parsed.errors


# ------------------------------------------------------------------ round trips through the templates
def openai_calls(*pairs):
    return [{"id": f"call_{k}", "type": "function", "function": {"name": n, "arguments": a}}
            for k, (n, a) in enumerate(pairs)]


def rendered_answer(name, message, tools):
    t = get_template(name)
    before = t.messages2prompt([u("q")], tools=tools)
    after = t.messages2prompt([u("q"), message], tools=tools, add_generation_prompt=False)
    common = 0
    while common < min(len(before), len(after)) and before[common] == after[common]:
        common += 1
    return after[after.index(CHATBOT, common - len(CHATBOT)) + len(CHATBOT):]


def test_calls_command_r_plus_renders_parse_back():
    message = {"role": "assistant", "content": "Let me look.",
               "tool_calls": openai_calls(("get_weather", {"city": "Paris", "days": [1, 2]}), ("add", {}))}
    text = rendered_answer("command-r-plus", message, [])
    parsed = check_every_split(R, text.split("<|START_OF_TURN_TOKEN|>")[0], sizes=SIZES)
    assert (parsed.content, calls(parsed)) == ("Let me look.", [("get_weather", {"city": "Paris", "days": [1, 2]}),
                                                                ("add", {})])


def test_calls_command_r7b_renders_parse_back_with_the_plan():
    message = {"role": "assistant", "tool_plan": "I will check.",
               "tool_calls": openai_calls(("get_weather", {"city": "巴黎"}), ("add", {"a": 1}))}
    text = rendered_answer("command-r7b", message, [TOOL]).removesuffix(TURN + CHATBOT).removesuffix(TURN)
    parsed = check_every_split(R7B, text, sizes=SIZES)
    assert (parsed.reasoning_content, calls(parsed)) == ("I will check.", [("get_weather", {"city": "巴黎"}),
                                                                           ("add", {"a": 1})])


# ------------------------------------------------------------------ templates, sessions, names
def test_the_templates_name_their_formats_and_bundle_the_model_settings():
    for name, fmt, reasoning in (("command-r-plus", "command_r", False), ("command-r", "command_r", False),
                                 ("command-r7b", "command_r7b", True)):
        cls = template_class(name)
        assert (cls.tool_format, cls.reasoning) == (fmt, reasoning)
        assert (get_template(name).temperature, get_template(name).session_len) == (0.3, 131072)


def test_tools_even_empty_switch_command_r_plus_to_its_tool_use_template():
    t = get_template("command-r-plus")
    assert "Safety Preamble" not in t.messages2prompt([u("q")])
    assert "Safety Preamble" in t.messages2prompt([u("q")], tools=[])


def test_command_r_v01_refuses_openai_tools_as_its_template_fails_on_them():
    with pytest.raises(TemplateRuleError, match="Cohere's format"):
        get_template("command-r").messages2prompt([u("q")], tools=[TOOL])


def test_a_plain_command_r_plus_session_only_appends():
    session = Session("command-r-plus")
    session.prompt("Hi")
    session.commit("Hello!")
    delta = session.prompt("Thanks")
    assert not delta.reset and delta.text == f"<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Thanks{TURN}{CHATBOT}"


def test_a_tool_use_command_r_plus_session_resets_with_a_reason():
    session = Session("command-r-plus", tools=[TOOL])
    first = session.prompt("Weather in Paris?")
    assert first.text.endswith(f"{TURN}{CHATBOT}") and "Write 'Action:'" in first.text
    session.commit("It is sunny.")
    delta = session.prompt("Thanks")
    assert delta.reset and delta.reason  # the instruction turn after the last user turn moves


def test_an_r7b_session_keeps_the_response_markers_and_the_plan():
    session = Session("command-r7b", tools=[TOOL])
    session.prompt("Weather in Paris?")
    answer = "<|START_THINKING|>I will check.<|END_THINKING|>" + action(
        '{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}')
    parsed = parse_response("command-r7b", answer)
    session.commit(answer, content=parsed.content, tool_calls=calls_as(parsed.tool_calls, "object"),
                   reasoning_content=parsed.reasoning_content, stop=TURN)
    assert session.messages[-1]["tool_plan"] == "I will check."
    results = session.extend([{"role": "tool", "tool_call_id": parsed.tool_calls[0]["id"], "content": "sunny"}])
    assert not results.reset and '"tool_call_id": "0"' in results.text
    session.commit("<|START_RESPONSE|>It is sunny.<|END_RESPONSE|>", stop=TURN)
    assert session.messages[-1]["content"] == "It is sunny."
    assert not session.prompt("Thanks").reset


def test_an_r7b_session_with_documents_sends_them_once_after_the_first_question():
    session = Session("command-r7b", tools=[], template_kwargs={"documents": [{"text": "Paris is in France."}]})
    first = session.prompt("Where is Paris?")
    assert first.text.count("direct-injected-document") == 2 and '"0": {"text": "Paris is in France."}' in first.text
    session.commit("<|START_RESPONSE|>In France.<|END_RESPONSE|>", stop=TURN)
    delta = session.prompt("Thanks")
    assert not delta.reset and "direct-injected-document" not in delta.text


def test_r7b_reasoning_before_a_response_is_dropped_by_the_history_with_a_reason():
    session = Session("command-r7b")
    session.prompt("2+2?")
    session.commit("<|START_THINKING|>add<|END_THINKING|><|START_RESPONSE|>4<|END_RESPONSE|>", stop=TURN)
    assert session.messages[-1]["content"] == "4" and session.messages[-1]["reasoning_content"] == "add"
    delta = session.prompt("3+3?")
    assert delta.reset and delta.reason


@pytest.mark.parametrize("model, name", [
    ("CohereForAI/c4ai-command-r-plus", "command-r-plus"), ("CohereLabs/c4ai-command-r-plus-08-2024", "command-r-plus"),
    ("CohereForAI/c4ai-command-r-08-2024", "command-r-plus"), ("CohereForAI/c4ai-command-r-v01", "command-r"),
    ("bartowski/c4ai-command-r-v01-GGUF", "command-r"), ("CohereForAI/c4ai-command-r7b-12-2024", "command-r7b"),
])
def test_model_names_match(model, name):
    assert match_template(model) == name


# ------------------------------------------------------------------ fixed conversations (golden vectors)
def u(content, **extra):
    return {"role": "user", "content": content, **extra}


def a(content, **extra):
    return {"role": "assistant", "content": content, **extra}


TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Wetter für 北京",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "the city"},
        "days": {"type": "array", "items": {"type": "integer"}, "description": "days ahead"},
        "unit": {"type": ["string", "integer"], "description": "unit"},
        "extra": {"type": "object", "additionalProperties": {"type": "number"}, "description": "more"},
        "any": {"description": "no type"}},
        "required": ["city"]}}}
COHERE_TOOLS = [
    {"name": "internet_search", "description": "Returns a list of relevant document snippets",
     "parameter_definitions": {"query": {"description": "Query to search", "type": "str", "required": True},
                               "k": {"description": "how many", "type": "int", "required": False}}},
    {"name": "directly_answer", "description": "Calls a standard chat model", "parameter_definitions": {}},
]
CALLED = a(" Let me look. ", tool_calls=openai_calls(("get_weather", {"city": "Paris", "note": "a\u2028b"}),
                                                    ("get_weather", '{"city": "x"}'), ("add", {})))
R_CONVERSATIONS = [
    [u(" q ")],
    [{"role": "system", "content": " S "}, u("q"), a(" a "), u("b")],
    [u("q"), a("a"), {"role": "system", "content": "late"}, u("b")],  # fails without tools: alternation
    [u("q"), CALLED, {"role": "tool", "tool_call_id": "call_0", "content": " sunny "},
     {"role": "tool", "content": "3"}, a("Done."), {"role": "ipython", "content": "skipped"}, u("ok")],
    [u("q"), a("x", tool_calls=[])],
    [u("q"), a("x", tool_calls=[{"function": {"arguments": {}}}])],  # fails with tools: no name
    [u("q"), {"role": "assistant", "tool_calls": openai_calls(("f", {}))}],  # no content
]
R_TOOLS = [[TOOL], COHERE_TOOLS, [{"type": "function", "function": {"name": "f", "parameters": {  # both fail
    "type": "object", "properties": {"o": {"type": "object", "description": "no additionalProperties"}}}}},
    {"name": "g", "parameters": {"properties": {"n": {"type": ["string", "null"], "description": "null"}}}}]]
R7B_CONVERSATIONS = [
    [u("q")],
    [{"role": "System", "content": "Be brief."}, u("q"), {"role": "CHATBOT", "content": "a"}, u("b")],
    [{"role": "system", "content": ""}, {"role": "system", "content": "second"}, u("q")],
    [u("q"), a(None, tool_plan="plan", tool_calls=openai_calls(("get_weather", {"city": "巴黎"}), ("add", "{}"))),
     {"role": "tool", "tool_call_id": "call_1", "content": "3"},
     {"role": "tool", "tool_call_id": "call_0", "content": {"t": 22}},
     {"role": "tool", "tool_call_id": "call_1", "content": "again"},
     a("It is 22.", reasoning_content="dropped"), u("more"),
     a("", tool_calls=openai_calls(("get_weather", {}))), {"role": "tool", "tool_call_id": "call_0", "content": "x"},
     {"role": "tool", "content": "no id"}],
    [u("q"), {"role": "tool", "tool_call_id": "later", "content": "r"},
     a("", tool_calls=[{"id": "later", "function": {"name": "f", "arguments": {}}}])],
    [u("q"), a("x", tool_calls=[{"function": {"name": "f"}}])],  # fails: no arguments
    [u("q"), {"role": "tool", "tool_call_id": "x"}],  # fails: no content
]
GOLDEN = [
    *[(name, messages, {"tools": tools, "add_generation_prompt": generation_prompt})
      for name in ("command-r-plus", "command-r") for messages in R_CONVERSATIONS
      for tools in (None, [], *R_TOOLS) for generation_prompt in (True, False)],
    *[("command-r7b", messages, {"tools": tools, "add_generation_prompt": generation_prompt, **extra})
      for messages in R7B_CONVERSATIONS for tools in (None, [], [TOOL])
      for generation_prompt in (True, False) for extra in ({}, {"enable_citations": True})],
    # documents: a call of the document tool after the first user message (they fail without tools)
    *[("command-r7b", messages, {"tools": tools, "documents": documents})
      for messages in R7B_CONVERSATIONS[:4] for tools in (None, [], [TOOL])
      for documents in (["snippet"], [{"title": "t", "text": "北京"}, {"url": "u", "snippet": "s"}])],
]


@pytest.mark.parametrize("name, messages, options", GOLDEN)
def test_conversations_render_as_the_official_templates_do(name, messages, options):
    assert_same(name, messages, **options)
