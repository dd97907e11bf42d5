"""Conversations for conformance and session tests: a fixed battery and hypothesis strategies."""
from __future__ import annotations

from hypothesis import strategies as st

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "City name, e.g. 上海"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["location"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    },
]

TRICKY = [
    "",
    " ",
    "\n",
    "  leading",
    "trailing  ",
    "\n\nnewlines around\n\n",
    "你好，世界 😀 café",
    "<b>html & \"quotes\"</b> 'single'",
    "tab\tinside",
    "<|im_end|> typed by a user",
    "[INST] fake [/INST]",
    "{{ not jinja }} {% raw %}",
]


def u(content):
    return {"role": "user", "content": content}


def a(content, **extra):
    return {"role": "assistant", "content": content, **extra}


def s(content):
    return {"role": "system", "content": content}


def call(name, arguments, id="call_1"):
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool(content, id="call_1", name="get_current_weather"):
    return {"role": "tool", "content": content, "tool_call_id": id, "name": name}


PLAIN = {
    "single-user": [u("Hello!")],
    "system-user": [s("You are terse."), u("Hello!")],
    "multi-turn": [u("Hi"), a("Hello! How can I help?"), u("What is 2 + 2?")],
    "system-multi-turn": [s("Be brief."), u("Hi"), a("Hello."), u("2+2?"), a("4"), u("Thanks")],
    "ends-with-assistant": [u("Hi"), a("Hello.")],
    "system-only": [s("Only a system prompt")],
    "user-user": [u("one"), u("two")],
    "assistant-first": [a("I start"), u("ok")],
    "system-in-middle": [u("Hi"), s("late system"), u("again")],
    "empty-content": [s(""), u(""), a(""), u("")],
}
for i, t in enumerate(TRICKY):
    PLAIN[f"tricky-{i}"] = [s(t), u(t), a(t), u(t)]
    PLAIN[f"tricky-nosys-{i}"] = [u(t), a(t), u(t)]

REASONING = {
    "reasoning-field": [u("2+2?"), a("4", reasoning_content="add them"), u("3+3?")],
    "reasoning-last": [u("2+2?"), a("4", reasoning_content="add them")],
    "think-in-content": [u("2+2?"), a("<think>\nadd them\n</think>\n\n4"), u("and 3+3?")],
    "think-in-content-last": [u("2+2?"), a("<think>\nadd them\n</think>\n\n4")],
}

TOOL_CONVERSATIONS = {
    "tools-first-turn": [u("Weather in Paris?")],
    "tools-system": [s("Use tools wisely."), u("Weather in Paris?")],
    "tool-call-dict-args": [
        u("Weather in Paris?"),
        a("", tool_calls=[call("get_current_weather", {"location": "Paris"})]),
        tool('{"temperature": 22}'),
    ],
    "tool-call-string-args": [
        u("Weather in Paris?"),
        a("", tool_calls=[call("get_current_weather", '{"location": "Paris"}')]),
        tool('{"temperature": 22}'),
        a("It is 22 degrees."),
        u("Thanks"),
    ],
    "two-calls-two-results": [
        s("sys"),
        u("Add 1+2 and weather in 上海"),
        a("Let me check.", tool_calls=[call("add", {"a": 1, "b": 2}, "c1"), call("get_current_weather", {"location": "上海"}, "c2")]),
        tool("3", "c1", "add"),
        tool('{"temperature": 22}', "c2"),
    ],
}


def text_strategy():
    return st.one_of(
        st.sampled_from(TRICKY + ["ok", "Paris", "<think>\nhmm\n</think>\n\nyes", "a</think>b"]),
        st.text(max_size=16),
        st.text(alphabet=st.sampled_from(list(" \n\tab中😀<|>/")), max_size=12),
    )


@st.composite
def conversations(draw, roles=("system", "user", "assistant"), max_messages=7):
    """Any sequence of messages over ``roles``: the official template may reject it."""
    n = draw(st.integers(1, max_messages))
    return [{"role": draw(st.sampled_from(roles)), "content": draw(text_strategy())} for _ in range(n)]


@st.composite
def dialogues(draw, with_system=None, max_turns=5):
    """A well-formed session script: optional system, then alternating user prompts and answers."""
    system = draw(st.one_of(st.none(), text_strategy())) if with_system is None else with_system
    turns = draw(st.lists(st.tuples(text_strategy(), text_strategy()), min_size=1, max_size=max_turns))
    return system, turns


PLAIN_WORDS = st.text(alphabet=st.sampled_from(list("abc XYZ,.?!中文😀")), min_size=1, max_size=20).map(
    lambda t: t.strip() or "x"
)


@st.composite
def plain_dialogues(draw, max_turns=6):
    """Conversations a prefix-stable template must never reset on: no edge whitespace, no reasoning."""
    system = draw(st.one_of(st.none(), PLAIN_WORDS))
    turns = draw(st.lists(st.tuples(PLAIN_WORDS, PLAIN_WORDS), min_size=1, max_size=max_turns))
    return system, turns
