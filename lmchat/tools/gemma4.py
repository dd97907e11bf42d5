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

from .base import NAME, Format, cut
from .gemma4_args import QUOTE, GemmaArgs
from .sink import WS, Sink

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
