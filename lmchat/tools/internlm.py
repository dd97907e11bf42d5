"""InternLM2/2.5/3: ``<|action_start|><|plugin|>\\n{json}<|action_end|>`` and the code interpreter.

A plugin call is ``{"name": ..., "parameters": {...}}`` (``arguments`` is
accepted too); an answer may hold several. ``<|action_start|><|interpreter|>``
opens a Python code block (usually fenced), reported as a call named
``python`` with arguments ``{"code": ...}`` streamed as they come.
``<|action_end|>`` is one of InternLM's stop words, so an action the engine
cut there ends with the answer. These markers only appear when the engine
decodes with ``skip_special_tokens=False``.
"""
from __future__ import annotations

import json

from ..lark import Grammar, Text, seq
from . import forcing_shapes as shape
from .base import RegionFormat, cut
from .channel_lead import Mark
from .hermes import CallRegion
from .sink import WS, Sink
from .syntax import Forcing, Syntax

PLUGIN, INTERPRETER, END = "<|action_start|><|plugin|>", "<|action_start|><|interpreter|>", "<|action_end|>"
FENCE_END = "\n```"


class CodeRegion:
    """An interpreter block: the code, without its Markdown fence, as ``{"code": ...}``."""

    def __init__(self, sink: Sink):
        self.sink = sink
        self.index = sink.start_call("python")
        sink.args(self.index, '{"code": "')
        self.state = "lead"  # lead (before the code: a fence or not?), fenced, plain, after (the fence closed)
        self.buf = ""

    def _code(self, text: str) -> None:
        if text:
            self.sink.args(self.index, json.dumps(text, ensure_ascii=False)[1:-1])  # escaping is per character

    def feed(self, text: str) -> None:
        self.buf += text
        if self.state == "lead":
            head = self.buf.lstrip(WS)
            if head.startswith("```"):
                if "\n" not in head:
                    return
                self.buf, self.state = head[head.index("\n") + 1:], "fenced"
            elif "```".startswith(head):
                return  # empty or a fence beginning
            else:
                self.buf, self.state = head, "plain"
        if self.state == "fenced":
            pos, marker = cut(self.buf, (FENCE_END,), final=False)
            self._code(self.buf[:pos])
            self.buf = self.buf[pos + len(marker or ""):]
            if marker:
                self.state = "after"
        if self.state == "plain":
            code = self.buf.rstrip(WS)  # trailing blank lines before the end marker are not code
            self._code(code)
            self.buf = self.buf[len(code):]
        return

    def close(self, marker: str) -> None:
        after = ""
        if self.state == "lead":
            self._code(self.buf.lstrip(WS))
        elif self.state == "fenced":
            self._code(self.buf)
            self.sink.note(f"{self.sink.label(self.index)}: the code block is not closed")
        elif self.state == "after":
            after = self.buf
        self.sink.args(self.index, '"}')
        self.sink.end_call(self.index)
        if after.strip(WS + "`"):
            self.sink.note(f"text after the code block: {after.strip()[:20]!r}...; kept as content")
            self.sink.content.write(after)


class InternLM(RegionFormat):
    opens = (PLUGIN, INTERPRETER)
    closes = (END,)

    def open(self, marker: str) -> CodeRegion | CallRegion:
        if marker == INTERPRETER:
            return CodeRegion(self.sink)
        return CallRegion(self.sink, marker, "object")


def _action(parallel: bool, mark: Mark) -> Grammar:
    return shape.start(seq(mark("<|action_start|>"), mark("<|plugin|>"), Text("\n"), shape.CALL,
                           mark("<|action_end|>")))


SYNTAX = Syntax("internlm", InternLM, Forcing(_action, shape.json_calls("parameters")))
