"""Granite 3.3's answers: ``<think>...</think><response>...</response>`` in thinking mode, and Granite's calls,
``<|tool_call|>[{"name": ..., "arguments": {...}}]``, in either mode.

The ``<think>`` block is split off before this format sees the answer (the template's ``reasoning``); here the
``<response>`` tags around the answer are taken off, as llama.cpp's Granite parser takes them: only a
``<response>`` that opens the answer (after whitespace) is a tag, and the first ``</response>`` after it closes
it; anywhere else the text is content. Whitespace just inside the tags is the template's, not the answer's.
"""
from __future__ import annotations

from ..lark import EMPTY
from . import forcing_shapes as shape
from .base import Format, cut
from .mistral import Granite
from .sink import WS, Sink, openai_id
from .syntax import Forcing, Syntax

RESPONSE, END_RESPONSE = "<response>", "</response>"


class Granite33(Format):
    """The response tags, with :class:`~lmchat.tools.mistral.Granite` reading what is inside and after them."""

    markers = (*Granite.markers, RESPONSE, END_RESPONSE)
    ids = staticmethod(openai_id)

    def __init__(self, sink: Sink):
        super().__init__(sink)
        self.inner = Granite(sink)
        self.state = "start"  # start (is the answer wrapped?), inside (until </response>), rest

    def step(self, final: bool) -> None:
        if self.state == "start":
            head = self.buf.lstrip(WS)
            if head.startswith(RESPONSE):
                self.buf, self.state = head[len(RESPONSE):], "inside"
                self.sink.content.boundary()
            elif RESPONSE.startswith(head) and not final:
                return  # perhaps the tag, still arriving
            else:
                self.state = "rest"
        if self.state == "inside":
            pos, marker = cut(self.buf, (END_RESPONSE,), final)
            self.inner.feed(self.buf[:pos])
            self.buf = self.buf[pos + len(marker or ""):]
            if marker is None:
                return
            self.inner.finish()  # what the response holds ends with it (a call cut short is closed here)
            self.inner = Granite(self.sink)
            self.sink.content.boundary()
            self.state = "rest"
        self.inner.feed(self.buf)
        self.buf = ""

    def finish(self) -> None:
        self.step(final=True)
        self.inner.finish()


# Granite 3.3 writes its calls as 3.0/3.1 do (its <response> tags wrap answers, never calls)
SYNTAX = Syntax("granite33", Granite33, Forcing(shape.array("<|tool_call|>", EMPTY), shape.json_calls("arguments")))
