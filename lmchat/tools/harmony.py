"""OpenAI's harmony format (gpt-oss): an answer is a sequence of messages, each on a channel.

After the generation prompt ``<|start|>assistant`` the model writes, for example::

    <|channel|>analysis<|message|>The user asks for the weather.<|end|>
    <|start|>assistant<|channel|>commentary to=functions.weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>

or ``<|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>``. A message's header runs to
``<|message|>``; its body to ``<|end|>``, ``<|call|>`` or ``<|return|>`` (or the next header, or the end of
the output). The ``analysis`` channel is reasoning, ``final`` is content, a message addressed to a
recipient (``to=functions.NAME``, before or after the channel, as both are seen) is a tool call whose body
is its JSON arguments (streamed as they come; a recipient outside ``functions.`` — the built-in ``python``
or ``browser.search`` — is a call of that name, its body read as JSON too). ``commentary`` without a
recipient (a preamble the model shows the user) is content. Text outside any message (an answer without
harmony markup) is content, as written.

One state machine: ``begin`` (is there a header right away?), ``outside``, ``header``, ``body``. Bodies
are written as they are, whitespace included: the template renders a message's text exactly between its
markers.
"""
from __future__ import annotations

import re

from ..lark import Expr, Text, seq
from . import forcing_shapes as shape
from .base import Format, cut
from .calls import JsonArgs
from .channel_lead import Mark, harmony_lead
from .sink import WS, Sink
from .syntax import Forcing, Syntax

START, CHANNEL, MESSAGE, CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"
END, CALL, RETURN = "<|end|>", "<|call|>", "<|return|>"
#: what ends a message's body: its end markers, or a next header the model began without one
BODY_ENDS = (END, CALL, RETURN, START, CHANNEL)
#: what opens a header outside a message
HEADER_OPENS = (START, CHANNEL)
#: how a header begins right after the generation prompt (``<|start|>assistant``) when it names its recipient
#: before its channel
RECIPIENT_HEADS = (" to=", "to=")
RECIPIENT = re.compile(r"(?:^|\s)to=([^\s<]+)")
CHANNEL_NAME = re.compile(r"\s*([^\s<]*)")
FUNCTIONS = "functions."
#: recipients that address a person, not a tool
PEOPLE = ("assistant", "user", "all")


class Harmony(Format):
    """The harmony parser (see the module docstring): reasoning, content and calls by channel."""

    markers = (START, CHANNEL, MESSAGE, END, CALL, RETURN, CONSTRAIN)
    verbatim_without_markers = False  # " to=functions.f..." right after the prompt opens a header
    #: this format carries the model's reasoning itself (the analysis channel): no ``<think>`` splitting
    reasons = True

    def __init__(self, sink: Sink):
        super().__init__(sink)
        self.state = "begin"  # begin, outside, header, body
        self.kind = ""  # the body's: reasoning, content or call
        self.args: JsonArgs | None = None
        self.args_done = False
        self.has_args = False  # the call body has more than whitespace
        self.tail = ""  # a call body's text after its JSON object

    def step(self, final: bool) -> None:
        while True:
            if self.state == "begin":
                # a recipient right after the generation prompt opens a header; markers are the outside's
                if not final and any(h.startswith(self.buf) and h != self.buf for h in RECIPIENT_HEADS):
                    return
                opens = any(self.buf.startswith(h) for h in RECIPIENT_HEADS)
                self.state = "header" if opens else "outside"
            if self.state == "outside":
                pos, marker = cut(self.buf, HEADER_OPENS, final)
                self.sink.content.write(self.buf[:pos])
                if marker is None:
                    self.buf = self.buf[pos:]
                    return
                # <|start|> is dropped; <|channel|> belongs to the header it opens
                self.buf = self.buf[pos + (len(marker) if marker == START else 0):]
                self.state = "header"
            if self.state == "header":
                pos, marker = cut(self.buf, (MESSAGE,), final)
                if marker is None:
                    if final:
                        if self.buf.strip(WS):
                            self.sink.note(f"the output ends inside a message header {self.buf[:40]!r}; dropped")
                        self.buf = ""
                    return
                self.open_body(self.buf[:pos])
                self.buf = self.buf[pos + len(marker):]
                self.state = "body"
            if self.state == "body":
                pos, marker = cut(self.buf, BODY_ENDS, final)
                self.write_body(self.buf[:pos])
                if marker is None:
                    self.buf = self.buf[pos:]
                    if final:
                        self.close_body(ended=False)
                    return
                self.close_body(ended=True)
                self.buf = self.buf[pos + (len(marker) if marker != CHANNEL else 0):]
                self.state = "header" if marker in (START, CHANNEL) else "outside"

    # ------------------------------------------------------------------ one message
    def open_body(self, header: str) -> None:
        role_part, has_channel, channel_part = header.partition(CHANNEL)
        found = CHANNEL_NAME.match(channel_part)
        channel = found.group(1) if has_channel and found else ""
        to = RECIPIENT.search(header)
        recipient = to.group(1) if to else ""
        if recipient and recipient not in PEOPLE:
            name = recipient[len(FUNCTIONS):] if recipient.startswith(FUNCTIONS) else recipient
            self.kind = "call"
            self.args = JsonArgs(self.sink, self.sink.start_call(name or recipient))
            self.args_done, self.has_args, self.tail = False, False, ""
            return
        if channel == "analysis":
            self.kind = "reasoning"
            return
        if channel not in ("final", "commentary"):
            self.sink.note(f"a message on no known channel (header {header[:40]!r}); read as content")
        self.kind = "content"

    def write_body(self, text: str) -> None:
        if not text:
            return
        if self.kind == "reasoning":
            self.sink.reasoning.write(text)
        elif self.kind == "content":
            self.sink.content.write(text)
        elif self.args_done:
            self.tail += text
        else:
            assert self.args is not None, "a call body has its arguments"
            self.has_args = self.has_args or bool(text.strip(WS))
            n = self.args.feed(text)
            if self.args.lex.done or self.args.lex.error:
                self.args_done = True
                self.tail += text[n:]

    def close_body(self, ended: bool) -> None:
        if self.kind == "call":
            assert self.args is not None, "a call body has its arguments"
            if self.has_args:
                self.args.close()
            else:  # a call without arguments (an empty body): {}
                assert self.args.index is not None, "the call was announced when its header ended"
                self.sink.end_call(self.args.index)
            if self.tail.strip(WS):
                self.sink.note(f"text after the tool call's arguments: {self.tail.strip(WS)[:20]!r}...; "
                               "kept as content")
                self.sink.content.write(self.tail)
            self.args, self.tail = None, ""
        elif not ended and self.kind == "reasoning":
            self.sink.note("the output ends inside the analysis channel: all of it is reasoning")
        self.kind = ""


def _head(name: str, mark: Mark) -> Expr:
    return seq(Text(" to=functions." + name), mark(CHANNEL), Text("commentary json"), mark("<|message|>"))


# forced: one call (<|call|> ends the turn), in the header order its template renders (the recipient first),
# after the model's free reasoning (the lead)
SYNTAX = Syntax("harmony", Harmony, Forcing(shape.single, shape.named_calls(_head, lambda mark: mark(CALL)),
                                            lead=lambda mark: harmony_lead(mark, final=False)),
                answer_lead=lambda mark: harmony_lead(mark, final=True))
