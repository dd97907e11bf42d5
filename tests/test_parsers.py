"""Parsing model output: each family's tool-call syntax, whole text, malformed output, round trips."""
import json

import pytest

import lmchat
from lmchat.tools import ResponseFormat, parse_response

from .parser_chunks import calls

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
GLM45 = ResponseFormat("glm45", reasoning=True)
DS_CALL = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>{}\n```json\n{}\n```<｜tool▁call▁end｜>"


# (template, model output, content, calls)
CASES = [
    (
        "qwen2.5",
        'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
        "Sure.",
        [("get_weather", {"city": "Paris"}), ("get_time", {})],
    ),
    ("hermes3", '<tool_call>{"arguments": {"a": [1, 2.5, null]}, "name": "f"}</tool_call>', "",
     [("f", {"a": [1, 2.5, None]})]),
    ("falcon3", '<tool_call>\n[{"name": "f", "arguments": {}}, {"name": "g", "arguments": {"x": true}}]\n</tool_call>',
     "", [("f", {}), ("g", {"x": True})]),
    ("llama3.1", '{"name": "f", "parameters": {"x": 1}}; {"name": "g", "arguments": {"y": "z"}}', "",
     [("f", {"x": 1}), ("g", {"y": "z"})]),
    ("llama3.2", '<|python_tag|>{"name": "f", "parameters": {}}', "", [("f", {})]),
    ("llama3.1", '<|python_tag|>brave_search.call(query="weather in Paris")', "",
     [("brave_search", {"query": "weather in Paris"})]),
    ("llama3.1", "The answer is {x}.", "The answer is {x}.", []),
    ("mistral-v0.3", 'OK [TOOL_CALLS] [{"name": "f", "arguments": {"x": 1}}, {"name": "g", "arguments": {}}]',
     "OK", [("f", {"x": 1}), ("g", {})]),
    ("granite3", '<|tool_call|>[{"name": "f", "arguments": {"q": "日本語"}}]', "", [("f", {"q": "日本語"})]),
    (
        "internlm2",
        "好的。<|action_start|><|plugin|>\n"
        '{"name": "get_weather", "parameters": {"city": "上海"}}<|action_end|>\n'
        '<|action_start|><|plugin|>\n{"name": "search", "arguments": {"q": "x"}}<|action_end|>',
        "好的。",
        [("get_weather", {"city": "上海"}), ("search", {"q": "x"})],
    ),
    (
        "internlm2.5",
        "Plotting.\n\n<|action_start|><|interpreter|>\n```python\nimport math\nprint(math.pi)\n```<|action_end|>\n",
        "Plotting.",
        [("python", {"code": "import math\nprint(math.pi)"})],
    ),
    ("internlm3", '<|action_start|><|plugin|>\n{"name": "f", "parameters": {}}', "", [("f", {})]),  # stop word cut
    (
        "chatglm3",
        "好的<|assistant|>get_current_weather\n```python\ntool_call(location=\"beijing\", unit=\"celsius\")\n```",
        "好的",
        [("get_current_weather", {"location": "beijing", "unit": "celsius"})],
    ),
    ("chatglm3", "interpreter\n```python\nprint(1)\n```", "", [("interpreter", {"code": "print(1)"})]),
    ("chatglm3", "\n Hello, I'm ChatGLM3. ", "Hello, I'm ChatGLM3.", []),
    ("glm4", 'get_weather\n{"location": "北京"}', "", [("get_weather", {"location": "北京"})]),
    ("glm4", "\nHello", "Hello", []),
    (
        GLM45,
        "Checking.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n"
        "<arg_key>at</arg_key>\n<arg_value>[1, 2]</arg_value>\n</tool_call>"
        "<tool_call>ls <arg_key>dir</arg_key> <arg_value>backend</arg_value> </tool_call>",
        "Checking.",
        [("get_weather", {"city": "Beijing", "days": 3, "at": [1, 2]}), ("ls", {"dir": "backend"})],
    ),
    (
        "deepseek-v3",
        "Let me look.<｜tool▁calls▁begin｜>" + DS_CALL.format("f", '{"a": 1}') + "\n" + DS_CALL.format("g", "{}")
        + "<｜tool▁calls▁end｜>",
        "Let me look.",
        [("f", {"a": 1}), ("g", {})],
    ),
]


@pytest.mark.parametrize("template, text, content, expected", CASES)
def test_each_family_parses_its_calls(template, text, content, expected):
    parsed = parse_response(template, text)
    assert (parsed.content, calls(parsed), parsed.errors) == (content, expected, [])
    assert all(c["type"] == "function" and c["id"] for c in parsed.tool_calls)


def test_a_template_instance_and_an_alias_work_like_the_name():
    text = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    assert calls(parse_response(lmchat.get_template("qwen2.5"), text)) == calls(parse_response("qwen2_5", text))
    assert calls(parse_response("llama3", '{"name": "f", "parameters": {}}')) == []  # Llama 3.0: no tools


def test_mistral_ids_are_nine_alphanumerics_and_a_valid_model_id_before_the_name_is_kept():
    parsed = parse_response("mistral-v0.3", '[TOOL_CALLS] [{"id": "abc123XYZ", "name": "f", "arguments": {}}, '
                                            '{"name": "g", "arguments": {}, "id": "later0000"}]')
    first, second = (c["id"] for c in parsed.tool_calls)
    assert first == "abc123XYZ" and second != "later0000"
    assert len(second) == 9 and second.isalnum()


# (template, output, content, calls, note fragments)
MALFORMED = [
    ("qwen2.5", '<tool_call>{"name": "f", "arguments": {"city": "Par', "", [("f", {"city": "Par"})], ["ends inside"]),
    ("qwen2.5", '<tool_call>{"nam', '<tool_call>{"nam', [], ["before the tool name"]),
    ("qwen2.5", "Hi <tool_call>not json</tool_call> bye", "Hi <tool_call>not json</tool_call> bye", [],
     ["expected a tool call"]),
    ("qwen2.5", '<tool_call>{"name": "a", "arguments": {}}</tool_call> garbage '
                '<tool_call>{"name": "b", "arguments": {}}</tool_call>',
     "garbage", [("a", {}), ("b", {})], []),
    ("qwen2.5", '<tool_call>{"name": "a", "arguments": {"x": 1,, }}</tool_call>', ", }}", [("a", {"x": 1})],
     ["unexpected ','"]),
    ("qwen2.5", '<tool_call>{"name": "a", "arguments": {}} extra</tool_call>', "extra", [("a", {})], ["text after"]),
    ("qwen2.5", '<tool_call>{"name": "a", "arguments": "{\\"x\\": 1}"}</tool_call>', "", [("a", {"x": 1})], []),
    ("qwen2.5", '<tool_call>{"name": "a", "arguments": 5}</tool_call>', "", [("a", {})], ["not a JSON object"]),
    ("qwen2.5", '<tool_call>{"name": 7, "arguments": {}}</tool_call>',
     '<tool_call>{"name": 7, "arguments": {}}</tool_call>', [], ["not a non-empty string"]),
    ("mistral-v0.3", '[TOOL_CALLS] [{"name": "f", "arguments": {}}', "", [("f", {})], ["not closed"]),
    ("mistral-v0.3", "[TOOL_CALLS] oops", "[TOOL_CALLS] oops", [], ["expected a tool call"]),
    ("llama3.1", '{"answer": 42}', '{"answer": 42}', [], ["no name"]),
    ("llama3.1", "<|python_tag|>import os", "<|python_tag|>import os", [], ["not a tool call"]),
    ("internlm2", '<|action_start|><|plugin|>\n{"name": "f", "parameters": {"q": [1, {"a"',
     "", [("f", {"q": [1, {}]})], ["ends inside"]),
    ("internlm2", "<|action_start|><|interpreter|>\n```python\nprint(1)", "", [("python", {"code": "print(1)"})],
     ["not closed"]),
    ("chatglm3", "f\n```python\ntool_call(x=compute())\n```", "f\n```python\ntool_call(x=compute())\n```", [],
     ["'x' is not a literal"]),
    ("chatglm3", "f\n```python\ntool_call(x={1, 2})\n```", "f\n```python\ntool_call(x={1, 2})\n```", [],
     ["not JSON values"]),
    ("glm4", "get_weather\nBeijing please", "get_weather\nBeijing please", [], ["without JSON arguments"]),
    (GLM45, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Bei",
     "<arg_key>city</arg_key>\n<arg_value>Bei", [("get_weather", {})], ["ends inside an argument"]),
    ("deepseek-v3", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n"
                    "```json\n{\"a\": tru",
     "", [("f", {})], ["ends inside"]),
    ("deepseek-v3", "<｜tool▁call▁begin｜>oops<｜tool▁call▁end｜>",
     "<｜tool▁call▁begin｜>oops<｜tool▁call▁end｜>", [], ["without a 'type"]),
]


@pytest.mark.parametrize("template, text, content, expected, notes", MALFORMED)
def test_malformed_output_comes_back_with_a_note(template, text, content, expected, notes):
    parsed = parse_response(template, text)
    assert (parsed.content, calls(parsed)) == (content, expected)
    assert len(parsed.errors) == len(notes)
    for note, fragment in zip(parsed.errors, notes, strict=True):
        assert fragment in note


def test_chatglm3_python_is_parsed_never_run(tmp_path):
    marker = tmp_path / "ran"
    for code in (
        "tool_call(__import__('os'))",
        f"tool_call(x=__import__('os').system('touch {marker}'))",
        f"tool_call(**{{'x': open('{marker}', 'w')}})",
        f"__import__('os').system('touch {marker}')",
    ):
        parsed = parse_response("chatglm3", f"run\n```python\n{code}\n```")
        assert parsed.tool_calls == [] and len(parsed.errors) == 1 and code in parsed.content
    assert not marker.exists()


def test_calls_are_checked_against_the_request_tools():
    text = ('<tool_call>{"name": "get_weather", "arguments": {"city": 1, "days": "2"}}</tool_call>'
            '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'
            '<tool_call>{"name": "nope", "arguments": {}}</tool_call>')
    parsed = parse_response("qwen3", text, tools=[WEATHER])
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["get_weather", "get_weather", "nope"]  # all kept
    assert parsed.errors == [
        "tool call 0 (get_weather): argument 'city' should be string, got int",
        "tool call 0 (get_weather): argument 'days' should be integer, got str",
        "tool call 1 (get_weather): missing required argument 'city'",
        "tool call 2 (nope): not one of the request's tools (kept)",
    ]


def test_internlm_keeps_calls_to_unknown_tools_flagged():
    text = ('<|action_start|><|plugin|>\n{"name": "get_weather", "parameters": {"city": "x"}}<|action_end|>'
            '<|action_start|><|plugin|>\n{"name": "search", "parameters": {}}<|action_end|>')
    parsed = parse_response("internlm2", text, tools=[WEATHER["function"]])  # InternLM lists bare functions
    assert [n for n, _ in calls(parsed)] == ["get_weather", "search"]
    assert parsed.errors == ["tool call 1 (search): not one of the request's tools (kept)"]


def test_glm45_values_follow_the_schema_when_tools_are_given():
    text = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>123</arg_value>\n</tool_call>"
    assert calls(parse_response(GLM45, text)) == [("get_weather", {"city": 123})]
    assert calls(parse_response(GLM45, text, tools=[WEATHER])) == [("get_weather", {"city": "123"})]


def test_control_characters_and_unicode_in_arguments_give_strict_json():
    text = ('<tool_call>{"name": "run", "arguments": {"code": "print(1)\n\tx = \'é😀\'", '
            '"u": "\\ud83d\\ude00"}}</tool_call>')
    ((_, args),) = calls(parse_response("qwen2.5", text))
    assert args == {"code": "print(1)\n\tx = 'é😀'", "u": "😀"}


def answer_text(template, messages, tools=None):
    """The assistant's part of a rendering: the whole conversation minus the prompt before the answer."""
    prefix = template.messages2prompt(messages[:-1], tools=tools)
    full = template.messages2prompt(messages, tools=tools, add_generation_prompt=False)
    assert full.startswith(prefix)
    end = template.eoa + template.separator
    assert full.endswith(end)
    return full[len(prefix): len(full) - len(end)]


ARGS = [{"city": "巴黎 \"q\" \\ é 😀", "days": 3}, {}]


def openai_calls(string_arguments):
    return [
        {"id": f"call{k}abcd", "type": "function",
         "function": {"name": name, "arguments": json.dumps(a, ensure_ascii=False) if string_arguments else a}}
        for k, (name, a) in enumerate(zip(("get_weather", "get_time"), ARGS, strict=True))
    ]


@pytest.mark.parametrize("name, content, string_arguments, n", [
    ("qwen2.5", "Let me check.", False, 2),
    ("qwen3", "Let me check.", True, 2),
    ("mistral-v0.3", None, False, 2),
    ("llama3.1", None, False, 1),
    ("llama3.2", None, False, 1),
    ("deepseek-r1", "", True, 2),
])
def test_rendered_calls_parse_back(name, content, string_arguments, n):
    template = lmchat.get_template(name)
    message = {"role": "assistant", "content": content, "tool_calls": openai_calls(string_arguments)[:n]}
    text = answer_text(template, [{"role": "user", "content": "Weather?"}, message], tools=[WEATHER])
    parsed = parse_response(template, text)
    assert calls(parsed) == list(zip(("get_weather", "get_time"), ARGS, strict=True))[:n]
    assert (parsed.content, parsed.errors) == (content or "", [])


@pytest.mark.parametrize("name, interpreter", [("internlm2", "python"), ("chatglm3", "interpreter")])
def test_agent_format_renderings_parse_back(name, interpreter):
    template = lmchat.get_template(name)
    tools = [WEATHER, {"type": "code_interpreter"}]
    plugin = {"role": "assistant", "content": "OK.", "tool_calls": openai_calls(False)}
    code = {"role": "assistant", "content": "Computing.", "tool_calls": [
        {"id": "c", "type": "function",
         "function": {"name": interpreter, "arguments": {"code": "import math\nprint(1)"}}}]}
    for message, expected in ((plugin, list(zip(("get_weather", "get_time"), ARGS, strict=True))),
                              (code, [(interpreter, {"code": "import math\nprint(1)"})])):
        text = answer_text(template, [{"role": "user", "content": "Hi"}, message], tools=tools)
        parsed = parse_response(template, text)
        assert (parsed.content, calls(parsed), parsed.errors) == (message["content"], expected, [])


def test_every_template_names_a_known_format():
    for name in lmchat.template_names():
        assert lmchat.tools.response_format(name).tools in lmchat.tools.FORMATS, name


@pytest.mark.parametrize("fmt, call", [
    ("hermes", '<tool_call>\n{"name": "f", "arguments": {"k": "v"}}\n</tool_call>'),
    ("glm45", "<tool_call>f\n<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>"),
    ("internlm", '<|action_start|><|plugin|>\n{"name": "f", "parameters": {"k": "v"}}<|action_end|>'),
    ("deepseek_v3", '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n'
                    '```json\n{"k": "v"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
])
def test_text_around_a_call_is_kept_as_the_model_wrote_it(fmt, call):
    """The content is the answer minus the call markup: text on both sides is never glued together."""
    parsed = parse_response(ResponseFormat(fmt), f"First part. {call} second part.")
    assert parsed.content == "First part.  second part."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls] == \
        [("f", {"k": "v"})]
    # the whitespace a template puts between the content and a call is its separator, not content
    assert parse_response(ResponseFormat(fmt), f"Sure.\n\n{call}\n").content == "Sure."
