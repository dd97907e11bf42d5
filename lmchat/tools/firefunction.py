"""FireFunction v2: text, then every call in one JSON list after ``functools``: `` functools[{"name": ..., "arguments":
{...}}, ...]``.

The list is read as Mistral's and Granite's lists are (:class:`.seq.CallSeq`): each call announced once its name
is complete, its arguments streamed; the list ends the region, and text after it is content again. The space the
template puts before ``functools`` touches the calls and is not content.
"""
from __future__ import annotations

from ..lark import EMPTY
from . import forcing_shapes as shape
from .base import RegionFormat
from .seq import CallSeq
from .sink import Sink
from .syntax import Forcing, Syntax

MARKER = "functools["


class CallList:
    """The JSON list after ``functools``: the region ends with it."""

    def __init__(self, sink: Sink):
        self.seq = CallSeq(sink, "array", "functools")
        self.seq.feed("[")

    def feed(self, text: str) -> str | None:
        return self.seq.feed(text)

    def close(self, marker: str) -> None:
        self.seq.close(marker)


class FirefunctionV2(RegionFormat):
    opens = (MARKER,)

    def open(self, marker: str) -> CallList:
        return CallList(self.sink)


# forced: the JSON list after " functools", as its template renders it
SYNTAX = Syntax("firefunction_v2", FirefunctionV2, Forcing(shape.array(" functools", EMPTY),
                                                           shape.json_calls("arguments")))
