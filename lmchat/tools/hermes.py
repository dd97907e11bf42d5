"""Hermes-style calls: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, repeated.

Qwen2.5, Qwen3, QwQ and Hermes write one JSON object per tag; Falcon3 writes a
JSON array of them inside one tag, which is accepted too. Text between calls
is content; text inside a tag after its call is content with a note.
"""
from __future__ import annotations

from ..lark import Grammar, Ref, Text, many, opt, rules, seq
from . import forcing_shapes as shape
from .base import RegionFormat
from .channel_lead import Mark
from .seq import CallSeq
from .sink import Sink
from .syntax import Forcing, Syntax

OPEN, CLOSE = "<tool_call>", "</tool_call>"


class CallRegion:
    """The JSON calls between an opening and a closing marker."""

    def __init__(self, sink: Sink, opening: str, shape: str):
        self.sink = sink
        self.seq = CallSeq(sink, shape, opening)
        self.trailing = False

    def feed(self, text: str) -> None:
        if not self.trailing:
            rest = self.seq.feed(text)
            if rest is None:
                return
            self.trailing = True
            self.sink.note("text after the tool call inside its tags; kept as content")
            text = rest
        self.sink.content.write(text)
        return

    def close(self, marker: str) -> None:
        self.seq.close(marker)


class Hermes(RegionFormat):
    opens = (OPEN,)
    closes = (CLOSE,)

    def open(self, marker: str) -> CallRegion:
        return CallRegion(self.sink, marker, "any")


def calls_in_tags(parallel: bool, mark: Mark) -> Grammar:
    """Each call in its tags, as Qwen2.5's system prompt says: <tool_call>\n{"name": <function-name>, "arguments":
    <args-json-object>}\n</tool_call>; a newline may follow the last call: a model that writes one after a tag can
    still end there."""
    one = Ref("one")
    calls = seq(one, many(seq(Text("\n"), one))) if parallel else one
    return rules(("start", seq(calls, opt(Text("\n")))),
                 ("one", seq(mark(OPEN), Text("\n"), shape.CALL, Text("\n"), mark(CLOSE))))


SYNTAX = Syntax("hermes", Hermes, Forcing(calls_in_tags, shape.json_calls("arguments")))
