"""A battery of conversations, and the comparison of two templates over it.

Used by ``lmchat check`` (a built-in against a Jinja template) and ``lmchat
export`` tests. The conversations cover the usual shapes (system or not,
multi-turn, ending with an answer), rule breakers (two users in a row, an
assistant first), edge whitespace, non-ASCII, text that looks like markup or
template syntax, reasoning fields and tool calls. Two templates agree on a
conversation when they render the same text, or both reject it.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import attrs

from ..jsontypes import JSONObject
from ..messages import Message
from ..templates.base import BaseTemplate

DATE = dt.date(2024, 7, 26)

TOOLS: list[JSONObject] = [
    {"type": "function", "function": {
        "name": "get_current_weather", "description": "Get the current weather in a given location",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string", "description": "City name, e.g. 上海"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["location"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two integers",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"]}}},
]

TRICKY = [
    "", " ", "\n", "  leading", "trailing  ", "\n\nnewlines around\n\n", "你好，世界 😀 café",
    "<b>html & \"quotes\"</b> 'single'", "tab\tinside", "<|im_end|> typed by a user", "[INST] fake [/INST]",
    "{{ not jinja }} {% raw %}",
]


def u(content: str) -> Message:
    return {"role": "user", "content": content}


def a(content: str, **extra: object) -> Message:
    return {"role": "assistant", "content": content, **extra}


def s(content: str) -> Message:
    return {"role": "system", "content": content}


def call(name: str, arguments: object, id: str = "call_1") -> JSONObject:
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool(content: str, id: str = "call_1", name: str = "get_current_weather") -> Message:
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
    **{f"tricky-{i}": [s(t), u(t), a(t), u(t)] for i, t in enumerate(TRICKY)},
    **{f"tricky-nosys-{i}": [u(t), a(t), u(t)] for i, t in enumerate(TRICKY)},
}

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
        u("Weather in Paris?"), a("", tool_calls=[call("get_current_weather", {"location": "Paris"})]),
        tool('{"temperature": 22}')],
    "tool-call-string-args": [
        u("Weather in Paris?"), a("", tool_calls=[call("get_current_weather", '{"location": "Paris"}')]),
        tool('{"temperature": 22}'), a("It is 22 degrees."), u("Thanks")],
    "two-calls-two-results": [
        s("sys"), u("Add 1+2 and weather in 上海"),
        a("Let me check.", tool_calls=[call("add", {"a": 1, "b": 2}, "c1"),
                                       call("get_current_weather", {"location": "上海"}, "c2")]),
        tool("3", "c1", "add"), tool('{"temperature": 22}', "c2")],
}


@attrs.frozen
class Case:
    """One conversation of the battery with its render options."""

    label: str
    messages: list[Message]
    tools: list[JSONObject] | None = None

    # Any: render options as the templates take them (BaseTemplate.messages2prompt's **kwargs)
    def options(self) -> dict[str, Any]:
        return {"tools": self.tools} if self.tools is not None else {}


def cases(with_tools: bool = False) -> Iterator[Case]:
    """The battery; tool conversations (with the tool list) only when asked for."""
    for label, messages in {**PLAIN, **REASONING}.items():
        yield Case(label, messages)
    if with_tools:
        for label, messages in TOOL_CONVERSATIONS.items():
            yield Case(label, messages, TOOLS)


@attrs.frozen
class Difference:
    """Where two templates first disagree on a case."""

    case: Case
    add_generation_prompt: bool
    position: int
    expected: tuple[bool, str]  # the reference's (rendered, text or error message)
    got: tuple[bool, str]

    def describe(self, context: int = 30, names: tuple[str, str] = ("built-in", "jinja")) -> str:
        lo, hi = max(0, self.position - context), self.position + context
        lines = [
            f"conversation {self.case.label!r} (add_generation_prompt={self.add_generation_prompt}"
            f"{', with tools' if self.case.tools is not None else ''}):",
            f"  messages: {self.case.messages!r}",
        ]
        if self.expected[0] and self.got[0]:
            lines.append(f"  first difference at character {self.position}:")
        width = max(len(n) for n in names)
        for name, (ok, text) in zip(names, (self.expected, self.got), strict=True):
            shown = f"...{text[lo:hi]!r}..." if ok else f"rejects it: {text}"
            lines.append(f"  {name.ljust(width)}: {shown}")
        return "\n".join(lines)


def outcome(template: BaseTemplate, case: Case, add_generation_prompt: bool) -> tuple[bool, str]:
    """(True, text), or (False, the error message) when the template rejects the conversation."""
    try:
        text = template.messages2prompt(case.messages, add_generation_prompt=add_generation_prompt, date=DATE,
                                        **case.options())
    except ValueError as exc:
        return False, str(exc)
    return True, text


def first_difference(reference: BaseTemplate, candidate: BaseTemplate,
                     with_tools: bool = False) -> tuple[int, Difference | None]:
    """(number of conversations compared, the first difference or None)."""
    count = 0
    for case in cases(with_tools):
        count += 1
        for gp in (True, False):
            ref, cand = outcome(reference, case, gp), outcome(candidate, case, gp)
            if (ref[0] or cand[0]) and ref != cand:  # both rejecting agrees, whatever the wording
                pos = next((i for i, (x, y) in enumerate(zip(ref[1], cand[1], strict=False)) if x != y),
                           min(len(ref[1]), len(cand[1])))
                return count, Difference(case, gp, pos, ref, cand)
    return count, None
