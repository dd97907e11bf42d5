"""Gemma 4: reasoning in a thought channel, and calls in Gemma's own notation.

An answer is, for example::

    <|channel>thought\\nThe user wants the weather.<channel|>Let me check.
    <|tool_call>call:get_weather{location:<|"|>Paris<|"|>}<tool_call|>

(on two lines here; the model writes no line break there)

``<|channel>thought\\n...<channel|>`` is reasoning (the channel's name and the newlines at its edges are the
template's, as vLLM's gemma4 reasoning parser strips them); a call is
``<|tool_call>call:NAME{key:value,...}<tool_call|>``, announced once its name is complete, its arguments
translated to JSON as they stream (:mod:`.gemma4_args`). The model stops at ``<|tool_response>`` after its
calls (a stop word). After tool results with thinking on, the generation prompt itself opens the channel
(:attr:`Gemma4.opened_by`): a turn reads that from its delta (:func:`.registry.prompt_opened`), a caller of its
own passes ``prompt_opened=True``. A call written inside the reasoning is reasoning text.

One state machine: ``content``, ``head`` (the channel's name), ``thought``, ``call``.
"""
from __future__ import annotations

import json
import re

from ..errors import ConstraintUnsupported
from ..jsontypes import JSON
from ..lark import Expr, Grammar, Text, alt, opt, seq, some
from . import forcing_params as by_param
from . import forcing_shapes as shape
from .base import NAME, Format, cut
from .channel_lead import Mark, gemma4_lead
from .gemma4_args import QUOTE, GemmaArgs
from .sink import WS, Sink
from .syntax import Forcing, Syntax

CHANNEL, CHANNEL_END = "<|channel>", "<channel|>"
CALL, CALL_END = "<|tool_call>", "<tool_call|>"
THOUGHT = "thought"
CALL_PREFIX = "call:"


class Gemma4Call:
    """One call's region: ``call:NAME`` up to its ``{``, then the arguments."""

    def __init__(self, sink: Sink):
        self.sink = sink
        self.head = ""
        self.args: GemmaArgs | None = None

    def feed(self, text: str) -> None:
        if self.args is not None:
            self.args.feed(text)
            return
        self.head += text
        brace = self.head.find("{")
        if brace < 0:
            return
        name = self.head[:brace].strip(WS).removeprefix(CALL_PREFIX).strip(WS)
        if not NAME.fullmatch(name):
            return  # judged at close: no call
        rest, self.head = self.head[brace:], self.head[:brace]
        self.args = GemmaArgs(self.sink, self.sink.start_call(name))
        self.args.feed(rest)

    def close(self, marker: str) -> None:
        if self.args is None:
            self.sink.content.write(CALL + self.head + marker)
            self.sink.note("a Gemma 4 tool call without a 'call:NAME{' head; kept as content")
            return
        self.args.close(ended=bool(marker))
        tail = self.args.tail.strip(WS)
        self.sink.end_call(self.args.index)
        if tail:
            self.sink.note(f"text after the tool call's arguments: {tail[:20]!r}...; kept as content")
            self.sink.content.write(self.args.tail)


class Gemma4(Format):
    """The gemma4 parser (see the module docstring)."""

    markers = (CHANNEL, CHANNEL_END, CALL, CALL_END, QUOTE)
    #: the thought channel is this format's reasoning: no ``<think>`` splitting
    reasons = True
    opened_by = f"{CHANNEL}{THOUGHT}\n"

    def __init__(self, sink: Sink):
        super().__init__(sink)
        self.state = "content"
        self.call: Gemma4Call | None = None

    def open_reasoning(self) -> None:
        """The generation prompt opened the thought channel (after tool results, with thinking on)."""
        self.state = "thought"
        self.sink.reasoning.drop = "\n"

    def step(self, final: bool) -> None:
        while True:
            if self.state == "content":
                pos, marker = cut(self.buf, (CHANNEL, CALL, CHANNEL_END, CALL_END), final)
                self.sink.content.write(self.buf[:pos])
                self.buf = self.buf[pos + len(marker or ""):]
                if marker is None:
                    return
                if marker == CHANNEL:
                    self.sink.content.boundary()
                    self.state = "head"
                elif marker == CALL:
                    self.call, self.state = Gemma4Call(self.sink), "call"
                else:
                    self.sink.note(f"{marker} outside a channel or call; kept as content")
                    self.sink.content.write(marker)
            if self.state == "head":
                if not final and len(self.buf) < len(THOUGHT) and THOUGHT.startswith(self.buf):
                    return
                self.buf = self.buf.removeprefix(THOUGHT)
                self.open_reasoning()
            if self.state == "thought":
                pos, marker = cut(self.buf, (CHANNEL_END,), final)
                self.sink.reasoning.write(self.buf[:pos])
                self.buf = self.buf[pos + len(marker or ""):]
                if marker is None:
                    if final:
                        self.sink.note("the output ends inside the thought channel: all of it is reasoning")
                    return
                self.sink.reasoning.boundary("\n")
                self.state = "content"
                continue
            if self.state == "call":
                assert self.call is not None, "a call region is open"
                pos, marker = cut(self.buf, (CALL_END,), final)
                self.call.feed(self.buf[:pos])
                self.buf = self.buf[pos + len(marker or ""):]
                if marker is None:
                    if final:
                        self.call.close("")
                        self.call = None
                    return
                self.call.close(marker)
                self.call, self.state = None, "content"


#: what a parameter's name may be to be written as a bare key that the parser reads back
KEY = re.compile(r"[\w.\-/]+")


def _calls(parallel: bool, mark: Mark) -> Grammar:
    # calls back to back, then the <|tool_response> the template renders after them (a stop word) or the end
    return shape.start(seq(some(shape.CALL) if parallel else shape.CALL, opt(mark("<|tool_response>"))))


def _call(name: str, args: Expr, mark: Mark) -> Expr:
    """``<|tool_call>call:NAME{key:value,...}<tool_call|>``: strings between ``<|"|>`` tokens, numbers and literals
    bare; objects and arrays are refused."""
    return seq(mark(CALL), Text(f"{CALL_PREFIX}{name}{{"), args, Text("}"), mark(CALL_END))


def _reads(text: str, declared: JSON) -> JSON:
    return text if declared in (None, "string") else json.loads(text)


def _param(tool: str, p: by_param.Param, mark: Mark) -> Expr:
    if not KEY.fullmatch(p.name):
        raise ConstraintUnsupported(f"the parameter {p.name!r} of {tool!r} cannot be written as a bare key in this "
                                    "template's call syntax", field="tools")
    declared = p.schema.get("type")
    choices = [p.schema["const"]] if "const" in p.schema else p.schema.get("enum")
    listed = choices if isinstance(choices, list) else ()  # an enum is a list (JSON Schema); any other none
    strings = declared in (None, "string") and all(isinstance(v, str) for v in listed)
    value: Expr
    if strings:
        value = seq(mark(QUOTE), by_param.tagged_value(tool, p, _reads), mark(QUOTE))
    elif declared in ("integer", "number"):
        value = by_param.tagged_value(tool, p, _reads)
    elif declared == "boolean" and not choices:
        value = alt(Text("true"), Text("false"))
    elif declared == "null":
        value = Text("null")
    else:
        raise ConstraintUnsupported(f"the parameter {p.name!r} of {tool!r} cannot be forced in this template's call "
                                    f"syntax: a value of type {declared!r} (strings, numbers, booleans and null "
                                    "only)", field="tools")
    return seq(Text(p.name + ":"), value)


def _case_insensitively(params: list[by_param.Param]) -> list[by_param.Param]:
    return sorted(params, key=lambda p: p.name.lower())  # the order Gemma 4's template sorts them in


# forced: Gemma's notation, after an optional thought channel (the lead); the parameters in the order the
# template sorts them (case-insensitively), one at a time (forcing_params)
SYNTAX = Syntax("gemma4", Gemma4, Forcing(_calls, shape.param_calls(_call, _param, sep=Text(","),
                                                                    order=_case_insensitively),
                                          lead=lambda mark: gemma4_lead(mark)),
                answer_lead=lambda mark: gemma4_lead(mark))
