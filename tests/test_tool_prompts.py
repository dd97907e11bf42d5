"""Tool prompts of InternLM2 and ChatGLM3 (docs/tool-prompts.md): the seed examples and the formats.

Sessions with tools: test_tool_prompt_sessions.py.
"""
from __future__ import annotations

import ast
import datetime as dt
import json
import re

import pytest

from lmchat import get_template

from . import oracle
from .conversations import PLAIN, TOOL_CONVERSATIONS, TOOLS, a, s, u
from .test_conformance import assert_same
from .tool_prompt_seeds import (
    INTERPRETER_MESSAGES,
    PLUGIN_MESSAGES,
    SEED_BOTH,
    SEED_INTERPRETER,
    SEED_PLUGIN,
    SYSTEM,
    WEATHER,
    as_rendered,
    call,
)

DATE = dt.date(2024, 7, 26)
INTERNLM = ["internlm2", "internlm2.5", "internlm3"]
WEATHER_TOOLS = [{"type": "function", "function": WEATHER}]
TOOL_PROMPT = "Answer the following questions as best as you can. You have access to the following tools:"

#: ChatGLM3's tool example as the seed shows it, whitespace collapsed when the seed was saved
GLM_SEED = (
    '<|system|> Answer the following questions as best as you can. You have access to the following tools: [ { "name": '
    '"get_current_weather", "description": "Get the current weather in a given location", "parameters": { "type": '
    '"object", "properties": { "location": { "type": "string", "description": "The city and state, e.g. San Francisco, '
    'CA", }, "unit": {"type": "string"}, }, "required": ["location"], }, } ] '
    '<|user|> 今天北京的天气怎么样? <|assistant|> '
    '好的,让我们来查看今天的天气 <|assistant|>get_current_weather '
    '```python tool_call(location="beijing", unit="celsius") '
    '``` <|observation|> {"temperature": 22} <|assistant|> 根据查询结果,今天北京的气温为 22 摄氏度。'
)
GLM_MESSAGES = [
    u("今天北京的天气怎么样?"),
    a("好的,让我们来查看今天的天气",
      tool_calls=[call("get_current_weather", {"location": "beijing", "unit": "celsius"}, "c0")]),
    {"role": "tool", "tool_call_id": "c0", "content": '{"temperature": 22}'},
    a("根据查询结果,今天北京的气温为 22 摄氏度。"),
]


def render(name, messages, **options):
    return get_template(name).messages2prompt(messages, date=DATE, add_generation_prompt=False, **options)


# ---------------------------------------------------------------------- the seed documents
def test_seed_copies_are_verbatim():
    internlm, glm = oracle.SEEDS / "000_548581ee50ad98b6.txt", oracle.SEEDS / "001_fa0a6b72d44de405.txt"
    if not (internlm.is_file() and glm.is_file()):
        pytest.skip(f"seed documents not found in {oracle.SEEDS} (set LMCHAT_SEEDS); the copies in "
                    "tests/tool_prompt_seeds.py are checked against them there")
    text = internlm.read_text(encoding="utf-8")
    assert SEED_PLUGIN in text and SEED_INTERPRETER in text and SEED_BOTH in text
    assert GLM_SEED in glm.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", INTERNLM)
@pytest.mark.parametrize("example", ["plugin", "interpreter", "both"])
def test_internlm2_renders_the_seed_examples(name, example):
    messages = {"plugin": PLUGIN_MESSAGES, "interpreter": INTERPRETER_MESSAGES,
                "both": INTERPRETER_MESSAGES + PLUGIN_MESSAGES}[example]
    options = {"plugin": {"tools": WEATHER_TOOLS}, "interpreter": {"interpreter": True},
               "both": {"tools": WEATHER_TOOLS, "interpreter": True}}[example]
    seed = {"plugin": SEED_PLUGIN, "interpreter": SEED_INTERPRETER, "both": SEED_BOTH}[example]
    assert render(name, [s(SYSTEM)] + messages, **options) == as_rendered(seed)


def test_chatglm3_renders_the_seed_tool_example():
    got = render("chatglm3", GLM_MESSAGES, tools=WEATHER_TOOLS)
    assert got == (
        f"[gMASK]sop<|system|>\n {TOOL_PROMPT}\n{json.dumps([WEATHER], indent=4, ensure_ascii=False)}"
        "<|user|>\n 今天北京的天气怎么样?<|assistant|>\n 好的,让我们来查看今天的天气"
        "<|assistant|>get_current_weather\n ```python\ntool_call(location='beijing', unit='celsius')\n```"
        '<|observation|>\n {"temperature": 22}'
        '<|assistant|>\n 根据查询结果,今天北京的气温为 22 摄氏度。'
    )
    # the seed lost its whitespace; apart from it, only its trailing commas and quote style differ
    seed = re.sub(r",(?=\s*[}\]])", "", GLM_SEED).replace('"beijing"', "'beijing'").replace('"celsius"', "'celsius'")
    assert "".join(got.removeprefix("[gMASK]sop").split()) == "".join(seed.split())


# ---------------------------------------------------------------------- InternLM2 details
def test_internlm2_names_and_environment():
    messages = [
        {"role": "system", "name": "plugin", "content": "P"},
        {"role": "user", "name": "file", "content": "F"},
        {"role": "user", "name": "plugin", "content": "U"},  # users' names print as they are (lagent)
        {"role": "assistant", "name": "interpreter", "content": "A"},
        {"role": "environment", "name": "interpreter", "content": "E"},
        {"role": "environment", "content": "E2"},
    ]
    assert render("internlm2", messages) == (
        "<s><|im_start|>system name=<|plugin|>\nP<|im_end|>\n<|im_start|>user name=file\nF<|im_end|>\n"
        "<|im_start|>user name=plugin\nU<|im_end|>\n<|im_start|>assistant name=<|interpreter|>\nA<|im_end|>\n"
        "<|im_start|>environment name=<|interpreter|>\nE<|im_end|>\n<|im_start|>environment\nE2<|im_end|>\n"
    )


def test_internlm2_tool_prompts_open_a_conversation_without_system():
    got = render("internlm2", [u("hi")], tools=WEATHER_TOOLS, interpreter="Run code.")
    assert got == (
        "<s><|im_start|>system name=<|interpreter|>\nRun code.<|im_end|>\n"
        f"<|im_start|>system name=<|plugin|>\n{json.dumps([WEATHER], ensure_ascii=False)}<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n"
    )


def test_internlm2_tool_prompts_follow_a_default_system_prompt():
    got = get_template("internlm2", meta_instruction="M").messages2prompt([u("hi")], tools=WEATHER_TOOLS)
    assert got.startswith("<s><|im_start|>system\nM<|im_end|>\n<|im_start|>system name=<|plugin|>\n[")


@pytest.mark.parametrize("name", ["internlm2", "chatglm3"])
def test_a_declared_python_function_is_a_plugin_not_the_interpreter(name):
    python = {"type": "function", "function": {"name": "python", "parameters": {}}}
    messages = [u("q"), a("", tool_calls=[call("python", {"code": "1"}, "c0")]),
                {"role": "tool", "tool_call_id": "c0", "content": "1"}]
    expected = {"internlm2": '<|action_start|><|plugin|>\n{"name": "python", "parameters": {"code": "1"}}'
                             '<|action_end|>',
                "chatglm3": "<|assistant|>python\n ```python\ntool_call(code='1')\n```"}[name]
    got = render(name, messages, tools=[python])
    assert expected in got and "interpreter" not in got


def raw_actions(calls) -> str:
    """What InternLM2 writes for calls, from the documented format (not from the implementation)."""
    out = ""
    for c in calls:
        fn, args = c["function"], json.loads(c["function"]["arguments"])
        if fn["name"] == "python":
            out += f"<|action_start|><|interpreter|>\n```python\n{args['code']}\n```<|action_end|>\n"
        else:
            out += ("<|action_start|><|plugin|>\n"
                    f"{json.dumps({'name': fn['name'], 'parameters': args}, ensure_ascii=False)}")
            out += "<|action_end|>"
    return out


def test_internlm2_calls_render_as_the_raw_answer_would():
    calls = [call("add", {"a": 1, "b": 2}, "c0"), call("python", {"code": "print('中')"}, "c1"),
             call("get_current_weather", {"location": "上海"}, "c2")]
    structured = render("internlm2", [u("q"), a("Let me see.", tool_calls=calls)], tools=TOOLS)
    assert structured == render("internlm2", [u("q"), a("Let me see." + raw_actions(calls))], tools=TOOLS)


@pytest.mark.parametrize("name", ["internlm2", "chatglm3"])
@pytest.mark.parametrize("bad", [
    {"id": "c", "function": {"name": "add", "arguments": "{not json"}},
    {"id": "c", "function": {"name": "add", "arguments": "[1, 2]"}},
    {"id": "c", "function": {"name": "python", "arguments": {"script": "1"}}},
    {"id": "c", "function": {"arguments": {}}},
])
def test_unrenderable_calls_are_rejected(name, bad):
    with pytest.raises(ValueError, match=r"messages\[1\] field 'tool_calls'"):
        render(name, [u("q"), a("", tool_calls=[bad])], tools=TOOLS)


# ---------------------------------------------------------------------- ChatGLM3 details
def test_chatglm3_native_system_tools_equal_the_tools_argument():
    native = [{"role": "system", "content": TOOL_PROMPT, "tools": [WEATHER]}] + GLM_MESSAGES
    assert render("chatglm3", native) == render("chatglm3", GLM_MESSAGES, tools=WEATHER_TOOLS)


def test_chatglm3_metadata_and_interpreter():
    code = "import json\ndata[:5]"
    native = [u("看看文件"), {"role": "assistant", "metadata": "interpreter", "content": f"```python\n{code}\n```"},
              {"role": "observation", "content": "```result\n[]\n```"}]
    openai = [u("看看文件"), a("", tool_calls=[call("python", {"code": code}, "c0")]),
              {"role": "tool", "tool_call_id": "c0", "content": "```result\n[]\n```"}]
    expected = (f"[gMASK]sop<|user|>\n 看看文件<|assistant|>interpreter\n ```python\n{code}\n```"
                "<|observation|>\n ```result\n[]\n```")
    assert render("chatglm3", native) == render("chatglm3", openai) == expected


def test_chatglm3_call_arguments_are_python_literals():
    args = {"s": "北京 'x'", "n": 1, "f": 1.5, "b": True, "z": None, "l": [1, "a"], "d": {"k": False}}
    got = render("chatglm3", [u("q"), a("", tool_calls=[call("f", args, "c0")])])
    line = got.split("```python\n")[1].split("\n```")[0]
    assert line == "tool_call(s=\"北京 'x'\", n=1, f=1.5, b=True, z=None, l=[1, 'a'], d={'k': False})"
    parsed = ast.parse(line, mode="eval").body
    assert {k.arg: ast.literal_eval(k.value) for k in parsed.keywords} == args


WITHOUT_TOOLS = [*list(TOOL_CONVERSATIONS.values())[:2], PLAIN["system-multi-turn"], PLAIN["tricky-5"]]

#: the official renderings these tests compare with (tests/golden)
GOLDEN = [(name, messages, {"tools": tools, "add_generation_prompt": generation_prompt})
          for name in ("internlm2", "chatglm3") for messages in WITHOUT_TOOLS
          for tools in (None, []) for generation_prompt in (True, False)]


@pytest.mark.parametrize("name", ["internlm2", "chatglm3"])
def test_without_tools_the_official_template_still_matches(name):
    for messages in WITHOUT_TOOLS:
        for tools in (None, []):
            for generation_prompt in (True, False):
                assert_same(name, messages, tools=tools, add_generation_prompt=generation_prompt)
