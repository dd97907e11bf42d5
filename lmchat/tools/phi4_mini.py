"""Phi-4-mini: ``<|tool_call|>[{"name": ..., "arguments": {...}}, ...]<|/tool_call|>``, or ``functools[...]``.

Phi-4-mini's tokenizer has ``<|tool_call|>`` and ``<|/tool_call|>`` for the calls it was trained to write, a
JSON list of ``{"name", "arguments"}`` objects (one object alone is accepted too); the closing marker may be
missing when the model stops at ``<|end|>``. vLLM's ``phi4_mini_json`` parser and SGLang's detector read
``functools[{...}, ...]`` instead, the syntax vLLM's example tool template asks the model for: it is read too,
as a JSON array right after ``functools`` that ends the region by itself. Text around the calls is content
(vLLM drops it).
"""
from __future__ import annotations

from ..lark import Grammar, Text, seq
from . import forcing_shapes as shape
from .base import RegionFormat
from .channel_lead import Mark
from .hermes import CallRegion
from .seq import CallSeq
from .sink import Sink
from .syntax import Forcing, Syntax

OPEN, CLOSE, FUNCTOOLS = "<|tool_call|>", "<|/tool_call|>", "functools["


class FunctoolsRegion:
    """The JSON array after ``functools``; it ends with its ``]``, and what follows is content again."""

    def __init__(self, sink: Sink):
        self.seq = CallSeq(sink, "array", FUNCTOOLS[:-1])
        self.seq.feed("[")  # the marker holds the array's bracket

    def feed(self, text: str) -> str | None:
        return self.seq.feed(text)

    def close(self, marker: str) -> None:
        self.seq.close(marker)


class Phi4Mini(RegionFormat):
    opens = (OPEN, FUNCTOOLS)
    closes = (CLOSE,)

    def open(self, marker: str) -> CallRegion | FunctoolsRegion:
        if marker == FUNCTOOLS:
            return FunctoolsRegion(self.sink)
        return CallRegion(self.sink, marker, "any")


def _calls_in_list(parallel: bool, mark: Mark) -> Grammar:
    """A JSON array of calls between its own tokens, as its model card writes them."""
    return shape.start(seq(mark(OPEN), Text("["), shape.calls_between(parallel, Text(", ")), Text("]"),
                           mark(CLOSE)))


SYNTAX = Syntax("phi4_mini", Phi4Mini, Forcing(_calls_in_list, shape.json_calls("arguments")))
