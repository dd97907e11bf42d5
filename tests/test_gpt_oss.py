"""gpt-oss: the harmony template (byte-exact with openai__gpt-oss-120b) and its parser.

The parser cases are written from the published assertions of llama.cpp's ``tests/test-chat.cpp`` (its
gpt-oss block, ``COMMON_CHAT_FORMAT_GPT_OSS``) and vLLM's harmony tool-parser tests
(``tests/tool_use/test_openai_tool_parser.py``), as far as they are known here: each case says where it
comes from, and where lmchat's answer differs on purpose (llama.cpp keeps a partial argument string, lmchat
closes a cut-off call after its last complete value).
"""
from __future__ import annotations

import datetime as dt
import json

import pytest

from lmchat import Session, get_template, parse_response
from lmchat.errors import InvalidMessages, TemplateRuleError
from lmchat.interop.battery import TOOLS, call
from lmchat.reasoning import split_reasoning
from lmchat.tools import FORMATS, ResponseStream
from lmchat.tools.harmony import Harmony

from .parser_chunks import chunked, fed_in_sizes
from .test_conformance import assert_same

T = get_template("gpt-oss")
DATE = dt.date(2024, 7, 26)


def u(text):
    return {"role": "user", "content": text}


def a(text, **extra):
    return {"role": "assistant", "content": text, **extra}


def shape(parsed):
    """A parse without the random call ids."""
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in parsed.tool_calls]
    return parsed.content, parsed.reasoning_content, calls, parsed.errors


def streamed(text, sizes):
    return fed_in_sizes(T, text, sizes)


# ---------------------------------------------------------------------------------------------- the template
WEATHER_CALL = a("", tool_calls=[call("get_current_weather", {"location": "Paris"})], thinking="Look it up.")
RESULT = {"role": "tool", "content": "sunny, 21°C", "tool_call_id": "call_1"}
NESTED_TOOLS = [{"type": "function", "function": {
    "name": "plan", "description": "Plan a trip",
    "parameters": {"type": "object", "required": ["stops"], "properties": {
        "stops": {"type": "array", "items": {"type": "object", "properties": {"city": {"type": "string"},
                                                                             "days": {"type": "integer"}}}},
        "mode": {"type": "string", "enum": ["car", "train"], "default": "train", "description": "How"},
        "budget": {"type": ["number", "null"], "default": None},
        "when": {"oneOf": [{"type": "string", "description": "a date"}, {"type": "object"}], "default": "now"},
        "tags": {"type": "array", "items": {"type": "string"}, "nullable": True},
        "note": {"type": "string", "nullable": True},
        "flags": {"type": "object"},
    }}}},
    {"type": "function", "function": {"name": "ping", "description": "No parameters"}}]
CONVERSATIONS = {
    "plain": [{"role": "system", "content": "Be brief."}, u("Hi"), a("Hello.", thinking="greet"), u("2+2?")],
    "developer": [{"role": "developer", "content": "Answer in French."}, u("Hi")],
    # the analysis of a call is kept until a final answer follows, then dropped
    "call-pending": [u("Weather in Paris?"), WEATHER_CALL, RESULT],
    "call-answered": [u("Weather in Paris?"), WEATHER_CALL, RESULT, a("Sunny, 21°C."), u("Thanks")],
    "call-content-as-analysis": [u("Weather?"), a("Checking.", tool_calls=[call("add", '{"a": 1}')]), RESULT],
    "last-answer-training": [u("2+2?"), a("4", reasoning_content="add them")],
}
REJECTED = {
    "channel-tags": [u("hi"), a("<|channel|>final<|message|>x"), u("again")],
    "content-and-thinking": [u("hi"), a("x", thinking="y", tool_calls=[call("add", {})]), RESULT],
    "tool-without-call": [u("hi"), RESULT],
    "tool-after-final": [u("hi"), WEATHER_CALL, RESULT, a("done"), RESULT],
    "empty-tool-calls": [u("hi"), a("x", tool_calls=[])],
}
KWARGS = [{}, {"reasoning_effort": "high"}, {"model_identity": "You are a test."},
          {"builtin_tools": ["browser", "python"]}, {"builtin_tools": ["python"]}]

#: the official renderings these tests compare with (tests/golden)
GOLDEN = (
    [("gpt-oss", m, {"tools": t, "add_generation_prompt": g})
     for m in CONVERSATIONS.values() for t in (TOOLS, NESTED_TOOLS, None) for g in (True, False)]
    + [("gpt-oss", CONVERSATIONS["plain"], k) for k in KWARGS[1:]]
    + [("gpt-oss", CONVERSATIONS["plain"], {"date": dt.date(2025, 8, 5)})]
    + [("gpt-oss", m, {"tools": TOOLS}) for m in REJECTED.values()]
)


@pytest.mark.parametrize("name, messages, options", GOLDEN)
def test_renders_what_the_official_template_renders(name, messages, options):
    assert_same(name, messages, **options)


def test_the_system_message_carries_the_date_and_the_reasoning_effort():
    text = T.messages2prompt([u("hi")], date=dt.date(2025, 8, 5), reasoning_effort="low")
    assert text == ("<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
                    "Knowledge cutoff: 2024-06\nCurrent date: 2025-08-05\n\nReasoning: low\n\n"
                    "# Valid channels: analysis, commentary, final. Channel must be included for every message."
                    "<|end|><|start|>user<|message|>hi<|end|><|start|>assistant")


def test_tools_render_as_a_typescript_namespace():
    text = T.messages2prompt([u("hi")], tools=TOOLS, date=DATE)
    assert "<|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n\n" in text
    assert ('// Get the current weather in a given location\ntype get_current_weather = (_: {\n'
            '// City name, e.g. 上海\nlocation: string,\nunit?: "celsius" | "fahrenheit",\n}) => any;\n\n') in text
    assert "\nCalls to these tools must go to the commentary channel: 'functions'.<|end|>" in text


@pytest.mark.parametrize("label", sorted(REJECTED))
def test_what_the_official_template_refuses_is_refused(label):
    with pytest.raises(InvalidMessages):
        T.messages2prompt(REJECTED[label], tools=TOOLS, date=DATE)


def test_the_analysis_of_a_call_goes_once_a_final_answer_follows():
    pending = T.messages2prompt(CONVERSATIONS["call-pending"], date=DATE)
    answered = T.messages2prompt(CONVERSATIONS["call-answered"], date=DATE)
    analysis = "<|start|>assistant<|channel|>analysis<|message|>Look it up.<|end|>"
    assert analysis in pending and analysis not in answered
    assert ("<|start|>assistant to=functions.get_current_weather<|channel|>commentary json<|message|>"
            '{"location": "Paris"}<|call|><|start|>functions.get_current_weather to=assistant<|channel|>'
            'commentary<|message|>"sunny, 21°C"<|end|>') in pending


def test_a_session_resets_honestly_when_the_history_drops_what_the_engine_holds():
    session = Session(T, tools=TOOLS, date=DATE)
    session.prompt("Weather in Paris?")
    raw = ("<|channel|>analysis<|message|>Look it up.<|end|><|start|>assistant<|channel|>commentary "
           'to=functions.get_current_weather <|constrain|>json<|message|>{"location": "Paris"}')
    parsed = parse_response(T, raw, tools=TOOLS)
    session.commit(raw, stop="<|call|>", content=parsed.content, reasoning_content=parsed.reasoning_content,
                   tool_calls=[{**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
                               for c in parsed.tool_calls])
    # the model wrote the recipient after the channel, the template renders it before: a reset, with the reason
    delta = session.extend([{"role": "tool", "content": "sunny", "tool_call_id": parsed.tool_calls[0]["id"]}])
    assert delta.reset and "renders earlier turns differently" in delta.reason
    full = T.messages2prompt(session.messages, tools=TOOLS, date=DATE)
    assert delta.text == full and "<|channel|>analysis<|message|>Look it up.<|end|>" in full
    session.commit("<|channel|>final<|message|>Sunny.", stop="<|return|>")
    assert session.messages[-1]["content"] == "Sunny."  # the lead is not content
    before = session.context
    delta = session.prompt("Thanks")
    # <|return|> is held where the history has <|end|>, and the call's analysis is dropped now: a reset
    assert before.endswith("Sunny.<|return|>") and delta.reset
    assert delta.text == T.messages2prompt(session.messages, tools=TOOLS, date=DATE)
    assert "Look it up." not in delta.text


def test_a_plain_answer_with_its_own_end_marker_extends_the_context():
    session = Session(T, date=DATE)
    session.prompt("hi")
    session.commit("<|channel|>final<|message|>Hello.")  # stop: the template's eoa, <|end|>
    before = session.context
    delta = session.prompt("again")
    assert not delta.reset and before + delta.text == T.messages2prompt(session.messages, date=DATE)


def test_bundled_settings_and_names():
    assert T.stop_words == ("<|return|>", "<|call|>", "<|endoftext|>")
    assert (T.temperature, T.top_p, T.top_k, T.session_len) == (1.0, 1.0, None, 131072)
    for alias in ("gpt-oss-120b", "gpt-oss-20b", "gpt_oss"):
        assert get_template(alias).name == "gpt-oss"
    assert FORMATS[type(T).tool_format] is Harmony


# ---------------------------------------------------------------------------------------------- the parser
#: (output, content, reasoning, calls); from llama.cpp's tests/test-chat.cpp (its gpt-oss block) unless said otherwise
PARSES = [
    # llama.cpp test-chat.cpp: '...I\'m\nthinking<|end|>' (partial) -> reasoning only
    ("<|channel|>analysis<|message|>I'm\nthinking<|end|>", "", "I'm\nthinking", []),
    # llama.cpp test-chat.cpp: analysis, then final on a new <|start|>assistant
    ("<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>"
     "Hello, world!\nWhat's up?", "Hello, world!\nWhat's up?", "I'm\nthinking", []),
    # llama.cpp test-chat.cpp: a call on commentary, recipient after the channel, <|constrain|>json
    ("<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>commentary "
     'to=functions.special_function <|constrain|>json<|message|>{"arg1": 1}', "", "I'm\nthinking",
     [("special_function", '{"arg1": 1}')]),
    # llama.cpp test-chat.cpp: a call addressed on the analysis channel is a call too
    ("<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>analysis "
     'to=functions.special_function <|constrain|>json<|message|>{"arg1": 1}', "", "I'm\nthinking",
     [("special_function", '{"arg1": 1}')]),
    # llama.cpp test-chat.cpp: commentary without a recipient (a preamble) is content
    ("<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>commentary<|message|>"
     "Hello, world!\nWhat's up?", "Hello, world!\nWhat's up?", "I'm\nthinking", []),
    # llama.cpp test-chat.cpp: a preamble, then a call
    ("<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>commentary<|message|>"
     "Hello, world!\nWhat's up?<|end|><|start|>assistant<|channel|>commentary to=functions.special_function "
     '<|constrain|>json<|message|>{"arg1": 1}', "Hello, world!\nWhat's up?", "I'm\nthinking",
     [("special_function", '{"arg1": 1}')]),
    # llama.cpp test-chat.cpp ("Test tool calling in role header"): the recipient right after the generation prompt
    (' to=functions.special_function<|channel|>commentary <|constrain|>json<|message|>{"arg1": 1}', "", None,
     [("special_function", '{"arg1": 1}')]),
    (' to=functions.special_function<|channel|>analysis <|constrain|>json<|message|>{"arg1": 1}', "", None,
     [("special_function", '{"arg1": 1}')]),
    ("<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant to=functions.special_function"
     '<|channel|>analysis <|constrain|>json<|message|>{"arg1": 1}', "", "I'm\nthinking",
     [("special_function", '{"arg1": 1}')]),
    # lmchat: the recipient after the channel without <|constrain|> (llama.cpp has it only as a partial case)
    ("<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>commentary "
     'to=functions.special_function<|message|>{"arg1": 1}', "", "I'm\nthinking",
     [("special_function", '{"arg1": 1}')]),
    # vLLM tests/tool_use/test_openai_tool_parser.py: each conversation's assistant messages as openai_harmony
    # renders them (vLLM parses the token ids of the whole conversation; here the model's part of it).
    # test_extract_tool_calls_no_tools: a final message only -> its content, no calls
    ("<|channel|>final<|message|>This is a test<|end|>", "This is a test", None, []),
    # test_extract_tool_calls_single_tool (both argument texts; vLLM re-serializes them with json.dumps)
    ('<|channel|>analysis<|message|>User asks: "What is the weather in Tokyo?" We need to use '
     "get_current_weather tool.<|end|><|start|>assistant<|channel|>commentary to=functions.get_current_weather "
     '<|constrain|>json<|message|>{"location": "Tokyo"}<|call|>', "",
     'User asks: "What is the weather in Tokyo?" We need to use get_current_weather tool.',
     [("get_current_weather", '{"location": "Tokyo"}')]),
    ('<|channel|>analysis<|message|>Weather.<|end|><|start|>assistant<|channel|>commentary '
     'to=functions.get_current_weather <|constrain|>json<|message|>{\n"location": "Tokyo"\n}<|call|>', "",
     "Weather.", [("get_current_weather", '{\n"location": "Tokyo"\n}')]),
    # test_extract_tool_calls_multiple_tools: several calls, one without a content type, empty arguments, no
    # arguments (vLLM gives "" for that one; lmchat's calls always carry an object: {})
    ("<|channel|>analysis<|message|>Two tools.<|end|><|start|>assistant<|channel|>commentary "
     'to=functions.get_current_weather <|constrain|>json<|message|>{"location": "Tokyo"}<|call|>'
     "<|start|>assistant<|channel|>commentary to=functions.get_user_location <|constrain|>json<|message|>"
     '{"location": "Tokyo"}<|call|><|start|>assistant<|channel|>commentary to=functions.no_content_type'
     '<|message|>{"location": "Tokyo"}<|call|><|start|>assistant<|channel|>commentary to=functions.empty_args '
     "<|constrain|>json<|message|>{}<|call|><|start|>assistant<|channel|>commentary to=functions.no_args "
     "<|constrain|>json<|message|><|call|>", "", "Two tools.",
     [("get_current_weather", '{"location": "Tokyo"}'), ("get_user_location", '{"location": "Tokyo"}'),
      ("no_content_type", '{"location": "Tokyo"}'), ("empty_args", "{}"), ("no_args", "{}")]),
    # test_extract_tool_calls_with_content: a call, then a final answer
    ("<|channel|>analysis<|message|>Weather.<|end|><|start|>assistant<|channel|>commentary "
     'to=functions.get_current_weather <|constrain|>json<|message|>{"location": "Tokyo"}<|call|>'
     "<|start|>assistant<|channel|>final<|message|>This tool call will get the weather.<|end|>",
     "This tool call will get the weather.", "Weather.", [("get_current_weather", '{"location": "Tokyo"}')]),
    # lmchat: an answer without harmony markup is content as written; a final answer's <|return|>
    ("Paris is the capital of France.", "Paris is the capital of France.", None, []),
    ("<|channel|>final<|message|>  spaced \n<|return|>", "  spaced \n", None, []),
    # lmchat: what the template renders for a call (recipient before the channel) reads back as that call
    ("<|channel|>analysis<|message|>Look it up.<|end|><|start|>assistant to=functions.get_current_weather"
     '<|channel|>commentary json<|message|>{"location": "Paris"}<|call|>', "", "Look it up.",
     [("get_current_weather", '{"location": "Paris"}')]),
]


@pytest.mark.parametrize("text, content, reasoning, calls", PARSES)
def test_parses_harmony_output(text, content, reasoning, calls):
    parsed = parse_response(T, text)
    assert shape(parsed)[:3] == (content, reasoning, calls), parsed
    assert not parsed.errors


def test_a_call_cut_off_inside_its_arguments_is_closed_with_a_note():
    # llama.cpp test-chat.cpp (is_partial=true): '...to=functions.special_function <|constrain|>json<|message|>{"arg1'
    # gives the partial arguments '{"arg1' while streaming; lmchat's whole-text parse closes the call after its last
    # complete value, with a note
    parsed = parse_response(T, "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>"
                               'commentary to=functions.special_function <|constrain|>json<|message|>{"arg1')
    assert shape(parsed)[:3] == ("", "I'm\nthinking", [("special_function", "{}")])
    assert parsed.errors and "ends inside the call" in parsed.errors[0]


def test_notes_on_what_does_not_follow_the_format():
    # llama.cpp test-chat.cpp (is_partial=true): "<|channel|>analysis<|message|>I'm\nthink" is reasoning "I'm\nthink";
    # so it is here, with a note that the output ended there
    parsed = parse_response(T, "<|channel|>analysis<|message|>I'm\nthink")
    assert (parsed.content, parsed.reasoning_content) == ("", "I'm\nthink") and parsed.errors
    parsed = parse_response(T, '<|channel|>commentary to=functions.f<|message|>{"a": 1} and more<|call|>')
    assert shape(parsed)[:3] == ("and more", None, [("f", '{"a": 1}')])
    assert "text after the tool call" in parsed.errors[0]
    parsed = parse_response(T, "<|channel|>final<|message|>ok<|end|><|start|>assistant<|channel|>fin")
    assert parsed.content == "ok" and "ends inside a message header" in parsed.errors[0]


def test_arguments_that_are_not_json_stay_content_with_a_note():
    # vLLM test_extract_tool_calls_multiple_tools: a body "foo" to functions.not_json_no_content_type is a call
    # with arguments "foo"; lmchat's calls carry a JSON object, so the call gets {} and the text stays content
    parsed = parse_response(T, "<|channel|>commentary to=functions.not_json_no_content_type<|message|>foo<|call|>")
    assert shape(parsed)[:3] == ("foo", None, [("not_json_no_content_type", "{}")]) and parsed.errors


def test_calls_are_checked_against_the_tools():
    parsed = parse_response(T, '<|channel|>commentary to=functions.nope <|constrain|>json<|message|>{}<|call|>',
                            tools=TOOLS)
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["nope"]
    assert "not one of the request's tools" in parsed.errors[0]


STREAMED = [text for text, *_ in PARSES] + [
    "<|channel|>analysis<|message|>I'm\nthink",
    '<|channel|>commentary to=functions.f<|message|>{"a": 1} and more<|call|>',
    "<|channel|>final<|message|>ok<|end|><|start|>assistant<|channel|>fin",
    "hmm</think>\n\nParis",
    "t",
    "",
]


@pytest.mark.parametrize("text", STREAMED)
def test_every_split_point_gives_the_whole_text_parse(text):
    whole = shape(parse_response(T, text))
    for cut in range(len(text) + 1):
        assert shape(chunked(T, text, [cut])) == whole, cut


@pytest.mark.parametrize("sizes", [(1,), (2,), (3,), (5,), (7,), (1, 4), (2, 9, 1), (11, 3)])
@pytest.mark.parametrize("text", STREAMED)
def test_odd_chunk_sizes_give_the_whole_text_parse(text, sizes):
    assert shape(streamed(text, sizes)) == shape(parse_response(T, text))


def test_streamed_arguments_arrive_before_the_call_ends():
    stream = ResponseStream(T)
    events = stream.feed('<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"city": "Par')
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "ToolCallStart" and "ToolCallArgumentsDelta" in kinds


def test_reasoning_is_split_by_the_format_not_by_think_tags():
    assert split_reasoning(T, "<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final"
                              "<|message|>yes") == ("hm", "yes")
    assert split_reasoning(T, "<think>x</think>y") == (None, "<think>x</think>y")


def test_template_rule_errors_name_the_rule():
    with pytest.raises(TemplateRuleError, match="tool-without-call"):
        T.messages2prompt(REJECTED["tool-without-call"])


@pytest.mark.parametrize("text, content, reasoning, calls", PARSES)
def test_a_raw_answer_is_stored_as_the_parser_reads_it(text, content, reasoning, calls):
    stored = T.answer_fields(text)
    assert (stored["content"], stored.get("reasoning_content")) == (content, reasoning)


def test_a_session_stores_a_raw_answer_split_by_channel_and_resets():
    session = Session(T, date=DATE)
    session.prompt("2+2?")
    session.commit("<|channel|>analysis<|message|>add them<|end|><|start|>assistant<|channel|>final<|message|>4",
                   stop="<|return|>")
    assert session.messages[-1] == {"role": "assistant", "content": "4", "thinking": "add them",
                                    "reasoning_content": "add them"}
    delta = session.prompt("3+3?")  # the official template would refuse channel tags in the content
    assert delta.reset and delta.text == T.messages2prompt(session.messages, date=DATE)
    assert "add them" not in delta.text
