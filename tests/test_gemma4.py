"""Gemma 4 (gemma4, gemma4-e4b) and Zephyr-7B-Gemma: the templates against the official ones, sessions, and the
parser of Gemma 4's thought channel and tool calls.

The parser cases take the model outputs and expected calls of vLLM's
``tests/tool_parsers/test_gemma4_tool_parser.py`` (its extraction cases, whole and streamed: one call, several
arguments, content before a call, two calls, nested objects and arrays, numbers and booleans, hyphenated and
dotted names, no arguments, string-quoted keys, strings holding commas, brackets and HTML, a quote token split
across chunks, a bare boolean last, text after a call), rewritten here, not copied. Where lmchat's conventions
differ the case says so: a call cut off by the end of the output is closed after its last complete value (vLLM
keeps the text as content), content is "" rather than None, whitespace next to a call is dropped. No published
llama.cpp ``test-chat.cpp`` Gemma 4 case is known here. Every case also runs cut at every split point, a
character at a time and in odd chunk sizes.
"""
from __future__ import annotations

import pytest

from lmchat import Session, get_template, match_template
from lmchat.backends.base import SamplingParams
from lmchat.backends.echo import EchoBackend
from lmchat.interop.battery import TOOLS
from lmchat.tools import ResponseFormat, ResponseStream, ToolCallArgumentsDelta, ToolCallStart, collect
from lmchat.turns.turn import Turn

from .parser_chunks import calls, check_every_split
from .test_conformance import assert_same

FMT = ResponseFormat("gemma4", reasoning=True)
Q = '<|"|>'
SIZES = ([1], [2], [3], [5, 1], [7, 2, 3])  # a character at a time, then odd chunk sizes


def call(name, body):
    """The model's text of one call: ``body`` in Gemma's notation, without its braces."""
    return f"<|tool_call>call:{name}{{{body}}}<tool_call|>"


LONDON = call("get_weather", f"location:{Q}London{Q}")
HTML = ('<!DOCTYPE html>\n<html lang="zh-CN">\n<head>\n    <meta charset="UTF-8">\n'
        '    <meta name="viewport" content="width=device-width">\n')
# (label, model output, content, calls)
CASES = [
    ("vllm_no_tool_calls", "Hello, how can I help you today?", "Hello, how can I help you today?", []),
    ("vllm_single_tool_call", LONDON, "", [("get_weather", {"location": "London"})]),
    ("vllm_multiple_arguments", call("get_weather", f"location:{Q}San Francisco{Q},unit:{Q}celsius{Q}"), "",
     [("get_weather", {"location": "San Francisco", "unit": "celsius"})]),
    ("vllm_text_before_tool_call", "Let me check the weather for you. " + call("get_weather", f"location:{Q}Paris{Q}"),
     "Let me check the weather for you.", [("get_weather", {"location": "Paris"})]),
    ("vllm_multiple_tool_calls", LONDON + call("get_time", f"location:{Q}London{Q}"), "",
     [("get_weather", {"location": "London"}), ("get_time", {"location": "London"})]),
    ("vllm_nested_arguments", call("complex_function", f"nested:{{inner:{Q}value{Q}}},list:[{Q}a{Q},{Q}b{Q}]"), "",
     [("complex_function", {"nested": {"inner": "value"}, "list": ["a", "b"]})]),
    ("vllm_number_and_boolean", call("set_status", "is_active:true,count:42,score:3.14"), "",
     [("set_status", {"is_active": True, "count": 42, "score": 3.14})]),
    ("vllm_hyphenated_name", call("get-weather", f"location:{Q}London{Q}"), "",
     [("get-weather", {"location": "London"})]),
    ("vllm_dotted_name", call("weather.get", f"location:{Q}London{Q}"), "", [("weather.get", {"location": "London"})]),
    ("vllm_no_arguments", call("get_status", ""), "", [("get_status", {})]),
    ("vllm_string_with_comma", call("get_weather", f"location:{Q}Paris, France{Q}"), "",
     [("get_weather", {"location": "Paris, France"})]),
    ("vllm_null_value", call("f", "param:null"), "", [("f", {"param": None})]),
    ("vllm_string_quoted_key", call("f", f"record_map:{{{Q}3{Q}:{Q}new text{Q}}}"), "",
     [("f", {"record_map": {"3": "new text"}})]),
    ("vllm_nested_string_quoted_key", call("f", f"outer:{{inner:{{{Q}3{Q}:{Q}new text{Q}}}}}"), "",
     [("f", {"outer": {"inner": {"3": "new text"}}})]),
    ("vllm_trailing_dot_float", call("f", "left:108.,right:22.8"), "", [("f", {"left": 108.0, "right": 22.8})]),
    ("vllm_string_element_with_closing_bracket", call("f", f"x:[[{Q}a]b{Q},{Q}c{Q}],{Q}tail{Q}]"), "",
     [("f", {"x": [["a]b", "c"], "tail"]})]),
    ("vllm_split_delimiter", call("todowrite", f"content:{Q}Buy milk{Q}"), "",
     [("todowrite", {"content": "Buy milk"})]),
    ("vllm_html_argument", call("write_file", f"path:{Q}index.html{Q},content:{Q}{HTML}{Q}"), "",
     [("write_file", {"path": "index.html", "content": HTML})]),
    ("vllm_trailing_bare_bool",
     call("Edit", f"file_path:{Q}src/env.py{Q},old_string:{Q}old_val{Q},new_string:{Q}new_val{Q},replace_all:false"),
     "", [("Edit", {"file_path": "src/env.py", "old_string": "old_val", "new_string": "new_val",
                    "replace_all": False})]),
    ("vllm_text_after_call", call("get_weather", f"location:{Q}Paris{Q}") + "<div>", "<div>",
     [("get_weather", {"location": "Paris"})]),
    # JSON's own quotes, backslashes and control characters inside a string are text, escaped in the JSON
    ("json_special_characters", call("f", f'code:{Q}print("a\\b")\n\t{Q}'), "", [("f", {"code": 'print("a\\b")\n\t'})]),
    ("empty_array_and_object", call("f", "a:[],b:{},c:-1.5e3"), "", [("f", {"a": [], "b": {}, "c": -1500.0})]),
]


@pytest.mark.parametrize("label, text, content, expected", CASES, ids=[c[0] for c in CASES])
def test_vllm_cases_whole_and_streamed_at_every_split(label, text, content, expected):
    parsed = check_every_split(FMT, text, sizes=SIZES)
    assert (parsed.content, parsed.reasoning_content, calls(parsed), parsed.errors) == (content, None, expected, [])


def test_lmchat_difference_a_call_cut_off_keeps_its_complete_values():
    # vLLM keeps '<|tool_call>call:get_weather{location:<|"|>London' as content (no end marker, no match)
    parsed = check_every_split(FMT, f'<|tool_call>call:get_weather{{location:{Q}London', sizes=SIZES)
    assert calls(parsed) == [("get_weather", {"location": "London"})] and parsed.errors
    parsed = check_every_split(FMT, "<|tool_call>call:f{a:1,b:tr", sizes=SIZES)
    assert calls(parsed) == [("f", {"a": 1})] and parsed.errors  # the bare value cut off is left out


@pytest.mark.parametrize("text, note", [
    ("<|tool_call>no head here<tool_call|>", "without a 'call:NAME{' head"),
    (call("f", "a:1") + "", None),
    ("<|tool_call>call:f{a:1} trailing<tool_call|>", "text after the tool call's arguments"),
    ("<|tool_call>call:f{a}<tool_call|>", "a key without a value"),
    ("stray <tool_call|> marker", "outside a channel or call"),
])
def test_markup_that_is_no_call_is_noted(text, note):
    parsed = check_every_split(FMT, text, sizes=SIZES)
    assert (note is None) == (not parsed.errors)
    assert note is None or any(note in e for e in parsed.errors), parsed.errors


REASONING_CASES = [
    # (label, output, prompt opened the channel, content, reasoning, calls)
    ("thought_then_answer", "<|channel>thought\nThe user greets.\n<channel|>Hello!", False, "Hello!",
     "The user greets.", []),
    ("thought_then_call", "<|channel>thought\nweather needed<channel|>" + LONDON, False, "", "weather needed",
     [("get_weather", {"location": "London"})]),
    ("content_thought_call", "<|channel>thought\nplan<channel|>Checking. " + LONDON, False, "Checking.", "plan",
     [("get_weather", {"location": "London"})]),
    # a call written inside the reasoning is reasoning text (as llama.cpp reads DeepSeek's)
    ("call_inside_thought", "<|channel>thought\nmaybe " + LONDON + "<channel|>No.", False, "No.", "maybe " + LONDON,
     []),
    # after tool results with thinking on, the generation prompt ends with '<|channel>thought\n'
    ("opened_by_the_prompt", "the tool said 22<channel|>It is 22 degrees.", True, "It is 22 degrees.",
     "the tool said 22", []),
    ("empty_thought", "<|channel>thought\n<channel|>Hi", False, "Hi", None, []),
]


@pytest.mark.parametrize("label, text, opened, content, reasoning, expected", REASONING_CASES,
                         ids=[c[0] for c in REASONING_CASES])
def test_the_thought_channel_is_reasoning(label, text, opened, content, reasoning, expected):
    # where the prompt opened the channel: a character at a time, no odd chunk sizes
    parsed = check_every_split(FMT, text, sizes=[[1]] if opened else SIZES, prompt_opened=opened)
    assert (parsed.content, parsed.reasoning_content, calls(parsed), parsed.errors) == \
        (content, reasoning, expected, [])


def test_an_unclosed_thought_is_all_reasoning_and_a_stray_end_is_content():
    parsed = check_every_split(FMT, "<|channel>thought\nstill thinking", sizes=SIZES)
    assert (parsed.content, parsed.reasoning_content) == ("", "still thinking") and parsed.errors
    parsed = check_every_split(FMT, "the tool said 22<channel|>It is 22.", sizes=SIZES)
    assert parsed.content == "the tool said 22<channel|>It is 22." and parsed.errors


def test_the_name_comes_whole_and_arguments_stream_as_json():
    stream = ResponseStream(FMT)
    events = stream.feed("<|tool_call>call:get_wea")
    assert not any(isinstance(e, ToolCallStart) for e in events)
    started = stream.feed(f"ther{{location:{Q}Par")
    assert [e.name for e in started if isinstance(e, ToolCallStart)] == ["get_weather"]
    sent = "".join(e.text for e in started if isinstance(e, ToolCallArgumentsDelta))
    assert sent == '{"location": "Par'  # the string streams; what is sent is never taken back
    rest = stream.feed('is<|"|>,days:3}<tool_call|>') + stream.finish()
    assert calls(collect(events + started + rest)) == [("get_weather", {"location": "Paris", "days": 3})]


# ------------------------------------------------------------------ the template
def u(text):
    return {"role": "user", "content": text}


def a(text, **extra):
    return {"role": "assistant", "content": text, **extra}


def s(text):
    return {"role": "system", "content": text}


def fn_call(name, arguments, call_id="c1"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def result(text, call_id="c1", **extra):
    return {"role": "tool", "content": text, "tool_call_id": call_id, **extra}


def answer_of(name, messages, **options):
    """The text of the last (assistant) message as the template renders it after the prompt."""
    t = get_template(name)
    before = t.messages2prompt(messages[:-1], **options)
    after = t.messages2prompt(messages, add_generation_prompt=False, **options)
    assert after.startswith(before), (before, after)
    return after[len(before):]


def test_calls_the_template_renders_parse_back():
    args = {"location": "上海", "days": [1, 2.5], "detail": {"Units": "metric", "alerts": None}, "hourly": True}
    text = answer_of("gemma4-e4b", [u("Weather?"), a("", tool_calls=[fn_call("get_current_weather", args)])])
    assert text == ("<|tool_call>call:get_current_weather{days:[1,2.5],detail:{alerts:null,Units:<|\"|>metric<|\"|>},"
                    "hourly:true,location:<|\"|>上海<|\"|>}<tool_call|><|tool_response>")
    parsed = check_every_split(FMT, text.removesuffix("<|tool_response>"), sizes=SIZES)
    assert calls(parsed) == [("get_current_weather", args)] and not parsed.errors


def test_the_templates_name_the_format_and_bundle_the_model_settings():
    for name, canonical, context in (("gemma-4-31B-it", "gemma4", 262144), ("gemma-4-E4B-it", "gemma4-e4b", 131072),
                                     ("gemma-4-e2b-it", "gemma4-e4b", 131072)):
        t = get_template(name)
        assert t.name == canonical and t.session_len == context
        assert (type(t).tool_format, type(t).reasoning, type(t).supports_tools) == ("gemma4", True, True)
        assert (t.temperature, t.top_p, t.top_k) == (1.0, 0.95, 64)
        assert set(t.stop_words) == {"<turn|>", "<|tool_response>", "<eos>"}
    z = get_template("zephyr-7b-gemma-v0.1")
    assert z.name == "zephyr-gemma" and (z.temperature, z.top_p, z.top_k, z.session_len) == (0.7, 0.95, 50, 8192)


def test_the_31b_prompt_closes_an_empty_thought_and_the_e4b_prompt_does_not():
    assert get_template("gemma4").messages2prompt([u("Hi")]) == \
        "<bos><|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"
    assert get_template("gemma4-e4b").messages2prompt([u("Hi")]) == "<bos><|turn>user\nHi<turn|>\n<|turn>model\n"
    for name in ("gemma4", "gemma4-e4b"):
        assert get_template(name).messages2prompt([u("Hi")], enable_thinking=True) == \
            "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n"


def test_answer_fields_split_a_leading_thought():
    t = get_template("gemma4")
    assert t.answer_fields("<|channel>thought\nplan\n<channel|>Hello.") == \
        {"content": "Hello.", "reasoning_content": "plan"}
    assert t.answer_fields("Hello.") == {"content": "Hello."}
    # after tool results with thinking on, the prompt opened the channel: the answer starts inside it
    assert t.answer_fields("the tool says 22\n<channel|>It is 22.") == \
        {"content": "It is 22.", "reasoning_content": "the tool says 22"}


def test_with_thinking_the_answer_after_results_extends_the_context():
    session = Session("gemma4-e4b", tools=TOOLS, template_kwargs={"enable_thinking": True})
    session.prompt("Weather in Paris?")
    answer = "<|channel>thought\nneed the tool\n<channel|>" + call("get_current_weather", f"location:{Q}Paris{Q}")
    session.commit(answer, stop="<|tool_response>", content="", reasoning_content="need the tool",
                   tool_calls=[fn_call("get_current_weather", {"location": "Paris"})])
    delta = session.extend([result("sunny")])
    assert not delta.reset and delta.text.endswith("<tool_response|><|channel>thought\n")
    session.commit("it is sunny\n<channel|>Sunny.")
    assert session.messages[-1]["reasoning_content"] == "it is sunny"
    history = get_template("gemma4-e4b").messages2prompt(session.messages, tools=TOOLS, enable_thinking=True,
                                                         add_generation_prompt=False)
    assert history == session.context + "\n"  # what the engine holds is the history: no rewrite yet
    delta = session.prompt("Thanks")  # the new query drops both answers' reasoning: an honest reset
    assert delta.reset and delta.reason


# ------------------------------------------------------------------ constraints (no model: llguidance alone)
def test_forced_calls_and_structured_answers_come_after_an_optional_thought():
    from lmchat import constraints
    from lmchat.tools.answer_constraint import for_answer
    from lmchat.tools.forcing import forced_calls

    from .test_forcing import CALLS, Special, rendered  # skips without llguidance, llama_cpp
    from .test_forcing import TOOLS as FORCED_TOOLS

    vocab = Special("gemma4-e4b")
    single = rendered("gemma4-e4b", CALLS[:1])
    assert single == '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|>'
    forced = forced_calls(FORCED_TOOLS, "gemma4-e4b", tokens=vocab.tokens)
    thought = "<|channel>thought\nthe user wants the weather<channel|>"
    assert vocab.accepts(forced, single) and vocab.accepts(forced, thought + single)
    assert vocab.accepts(forced, single + "<|tool_response>")  # the stop word the template renders after calls
    assert not vocab.accepts(forced, thought + "It is sunny.")
    schema = constraints.json_schema({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})
    answer = for_answer(schema, get_template("gemma4"), tokens=vocab.tokens)
    assert vocab.accepts(answer, '{"a": 1}') and vocab.accepts(answer, thought + '{"a": 1}')
    assert not vocab.accepts(answer, thought + "one")


@pytest.mark.parametrize("schema, why", [
    ({"type": "object", "properties": {"q": {"type": "array"}}}, "a value of type 'array'"),
    ({"type": "object", "properties": {"a b": {"type": "string"}}}, "as a bare key"),
])
def test_what_gemma4_calls_cannot_write_is_refused(schema, why):
    from lmchat.errors import ConstraintUnsupported
    from lmchat.tools.forcing import forced_calls

    tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    with pytest.raises(ConstraintUnsupported, match=why):
        forced_calls(tools, "gemma4")


# ------------------------------------------------------------------ sessions
def test_e4b_without_thinking_a_session_only_appends():
    session = Session("gemma4-e4b", system="Be brief.")
    assert session.prompt("Hi").text == "<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n"
    session.commit("Hello.")
    delta = session.prompt("Again")
    assert not delta.reset and delta.text == "\n<|turn>user\nAgain<turn|>\n<|turn>model\n"


def test_31b_history_drops_the_empty_thought_of_its_prompt_an_honest_reset():
    session = Session("gemma4")
    session.prompt("Hi")
    session.commit("Hello.")
    delta = session.prompt("Again")
    assert delta.reset and delta.reason and "<|channel>" in delta.reason
    assert delta.text == ("<bos><|turn>user\nHi<turn|>\n<|turn>model\nHello.<turn|>\n<|turn>user\nAgain<turn|>\n"
                          "<|turn>model\n<|channel>thought\n<channel|>")


@pytest.mark.parametrize("name", ["gemma4", "gemma4-e4b"])
def test_with_thinking_a_new_query_drops_the_reasoning_an_honest_reset(name):
    session = Session(name, template_kwargs={"enable_thinking": True})
    assert session.prompt("Hi").text.endswith("<|turn>model\n")
    session.commit("<|channel>thought\nthe user greets\n<channel|>Hello.")
    assert session.messages[-1]["reasoning_content"] == "the user greets"
    delta = session.prompt("Again")
    assert delta.reset and delta.reason
    assert delta.text == ("<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\nHello."
                          "<turn|>\n<|turn>user\nAgain<turn|>\n<|turn>model\n")


def test_e4b_tool_call_results_and_answer_extend_the_context():
    session = Session("gemma4-e4b", tools=TOOLS)
    session.prompt("Weather in Paris?")
    # as a turn commits a parsed call: the raw text, with the call as tool_calls and the content it parsed
    session.commit(call("get_current_weather", f"location:{Q}Paris{Q}"), stop="<|tool_response>", content="",
                   tool_calls=[fn_call("get_current_weather", {"location": "Paris"})])
    delta = session.extend([result('{"temperature": 22}')])
    # the result renders inside the model's turn, and no generation prompt follows: the model answers there
    assert not delta.reset and delta.text == 'response:get_current_weather{value:<|"|>{"temperature": 22}<|"|>}' \
        "<tool_response|>"
    session.commit("It is 22 degrees.")
    delta = session.prompt("Thanks")
    assert not delta.reset and delta.text == "\n<|turn>user\nThanks<turn|>\n<|turn>model\n"


def test_with_thinking_after_results_the_prompt_opens_the_thought_channel():
    t = get_template("gemma4")
    messages = [u("Weather?"), a("", tool_calls=[fn_call("get_current_weather", {"location": "Paris"})]),
                result("sunny")]
    assert t.messages2prompt(messages, enable_thinking=True).endswith("<tool_response|><|channel>thought\n")
    assert t.messages2prompt(messages).endswith("<tool_response|>")


class Scripted(EchoBackend):
    """An engine that answers the given texts in turn (stop words cut as a real engine cuts them)."""

    def __init__(self, answers):
        super().__init__(prefix="")
        self.answers = list(answers)

    def reply(self, request):
        return self.answers.pop(0)


class Holder:
    """The least a turn needs of whoever holds its session."""

    def __init__(self, session, backend):
        self.session, self.backend = session, backend

    def discard(self, *, sent):
        raise AssertionError("the turn did not commit")

    def cancel_requested(self):
        return False

    def failed(self, error):
        raise error

    def save(self, record):
        pass


def run_turn(holder, start):
    stop = tuple(holder.session.template.stop_words)
    steps = Turn(holder, start, SamplingParams(stop=stop), parse=True).run()
    try:
        while True:
            next(steps)
    except StopIteration as done:
        return done.value


def test_a_turn_after_results_reads_the_thought_its_prompt_opened():
    session = Session("gemma4-e4b", tools=TOOLS, template_kwargs={"enable_thinking": True})
    called = "<|channel>thought\nneed the tool\n<channel|>" + call("get_current_weather", f"location:{Q}Paris{Q}")
    holder = Holder(session, Scripted([called + "<|tool_response>", "it is sunny\n<channel|>Sunny.<turn|>"]))
    first = run_turn(holder, lambda: session.prompt("Weather in Paris?"))
    assert first.parsed.reasoning_content == "need the tool" and first.stop == "<|tool_response>"
    call_id = session.messages[-1]["tool_calls"][0]["id"]
    answer = run_turn(holder, lambda: session.extend([result("sunny", call_id)]))
    # the delta ended with '<|channel>thought\n': the answer started inside the channel
    assert (answer.parsed.content, answer.parsed.reasoning_content, answer.parsed.errors) == \
        ("Sunny.", "it is sunny", [])
    history = get_template("gemma4-e4b").messages2prompt(session.messages, tools=TOOLS, enable_thinking=True,
                                                         add_generation_prompt=False)
    assert history == session.context + "\n"


def test_zephyr_gemma_session_only_appends():
    session = Session("zephyr-gemma")
    assert session.prompt("Hi").text == "<bos><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    session.commit("Hello.")
    delta = session.prompt("Again")
    assert not delta.reset and delta.text == "\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n"


# fixed conversations compared with the official templates (golden vectors)
RICH_TOOLS = TOOLS + [
    {"type": "function", "function": {
        "name": "search", "description": "Search records",
        "parameters": {"type": "object", "required": ["filters"], "properties": {
            "filters": {"type": "array", "description": "clauses", "items": {
                "type": "object", "properties": {"field": {"type": "string"}, "value": {"type": "string"}},
                "required": ["field"]}},
            "tags": {"type": "array", "items": {"type": ["string", "null"]}, "nullable": True},
            "options": {"type": "object", "properties": {"limit": {"type": "integer", "description": "max"}},
                        "required": ["limit"]},
            "extra": {"type": "object", "description": "free-form", "mode": {"type": "string"}},
            "Order": {"type": "string", "enum": ["asc", "desc"], "nullable": True}}},
        "response": {"type": "object", "description": "the hits"}}},
    {"type": "function", "function": {"name": "ping", "description": "no parameters"}},
]
CALL = fn_call("get_current_weather", {"location": "Paris", "unit": "celsius"})
MEDIA = [{"type": "text", "text": " Look: "}, {"type": "image_url", "image_url": {"url": "x"}},
         {"type": "input_audio"}, {"type": "video"}, {"type": "text", "text": "what is it? "}]
GEMMA4_CONVERSATIONS = [
    [u("q")],
    [s("  Be brief.  "), u(" q "), a(" a "), u("q2")],
    [{"role": "developer", "content": "dev"}, u("q")],
    [{"role": "system", "content": [{"type": "text", "text": " one "}, {"type": "text", "text": "two"}]}, u("q")],
    [s("only a system prompt")],
    [u(MEDIA), a([{"type": "text", "text": "A picture <|channel>thought\nhidden<channel|>of a cat."}])],
    [u("q"), a("plain <|channel>thought\nold<channel|>answer"), u("q2")],
    [u("q"), a("kept last", reasoning_content="why")],
    [u("q"), a("dropped", reasoning_content="why"), u("q2")],
    [u("q"), a("", tool_calls=[CALL])],
    [u("q"), a("Checking.", reasoning_content="need weather", tool_calls=[CALL]), result("sunny")],
    [u("q"), a("", reasoning_content="need weather", tool_calls=[CALL]), result("sunny"), a("It is sunny."),
     u("thanks")],
    [s("sys"), u("Add and weather"),
     a("", tool_calls=[fn_call("add", {"a": 1, "b": 2}, "c1"),
                       fn_call("get_current_weather", {"location": "上海"}, "c2")]),
     result("3", "c1"), result('{"temperature": 22}', "c2"),
     result([{"type": "text", "text": "see"}, {"type": "image"}], "c3", name="camera")],
    [u("q"), a("", tool_calls=[fn_call("f", None)]), result(None), a("", tool_calls=[CALL]), result("r"), a("done")],
    [u("q"), {"role": "assistant", "content": "", "tool_responses": [{"name": "f", "response": {"b": [1], "a": "s"}},
                                                                     {"response": 3}]}],
    [u("q"), a("", tool_calls=[fn_call("f", '{"x": 1}')])],  # arguments as a JSON string: the official raises
    [u("q"), a("a1"), a("a2"), u("q2")],
    [result("orphan"), u("q"), {"role": "critic", "content": "x"}],
]
GOLDEN = [(name, messages, {"add_generation_prompt": generation_prompt, **options})
          for name in ("gemma4", "gemma4-e4b") for messages in GEMMA4_CONVERSATIONS
          for options in ({}, {"enable_thinking": True}, {"enable_thinking": False, "preserve_thinking": True},
                          {"tools": RICH_TOOLS}, {"tools": TOOLS, "enable_thinking": True})
          for generation_prompt in (True, False)]
GOLDEN += [("zephyr-gemma", messages, {"add_generation_prompt": generation_prompt})
           for messages in ([u("q")], [s("sys"), u("q"), a("a")], [a("first"), u("q")], [u("q"), {"role": "tool",
                            "content": "r"}, a("x")]) for generation_prompt in (True, False)]


@pytest.mark.parametrize("name, messages, options", GOLDEN)
def test_conversations_render_as_the_official_templates_do(name, messages, options):
    assert_same(name, messages, **options)


@pytest.mark.parametrize("model, name", [
    ("google/gemma-4-31B-it", "gemma4"), ("google/gemma-4-E4B-it", "gemma4-e4b"),
    ("unsloth/gemma-4-E2B-it-GGUF", "gemma4-e4b"), ("HuggingFaceH4/zephyr-7b-gemma-v0.1", "zephyr-gemma"),
    ("HuggingFaceH4/zephyr-7b-beta", "zephyr"), ("google/gemma-3-1b-it", "gemma3"),
])
def test_model_names_match(model, name):
    assert match_template(model) == name
