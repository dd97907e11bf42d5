"""Cohere's Command-R family: calls as a JSON list of ``{"tool_name": ..., "parameters": {...}}``.

* Command-R and R+ (``command_r``) write ``Action: ```json\\n[{"tool_name": ..., "parameters": {...}}]\\n```````
  after any text of their own (a plan). A call of ``directly_answer`` (or ``directly-answer``, as the template's
  instruction spells it) is the model saying it calls nothing: read, not announced. ``Action:`` that is not
  followed by a list (optionally fenced) is text.
* Command R7B (``command_r7b``) writes ``<|START_THINKING|>{plan}<|END_THINKING|>`` (reasoning), then
  ``<|START_ACTION|>[{"tool_call_id": "0", "tool_name": ..., "parameters": {...}}]<|END_ACTION|>`` or
  ``<|START_RESPONSE|>{answer}<|END_RESPONSE|>`` (content, the markers dropped). The ``tool_call_id`` it writes
  is a number its template renders from the call's position, not an id: calls get ids of their own, so that
  results of different turns never answer the same one.

Calls are announced once their name is complete and their arguments stream as they come (:class:`.seq.CallSeq`).
"""
from __future__ import annotations

from .base import Format, RegionFormat, cut
from .calls import JsonCall
from .seq import CallSeq
from .sink import WS, Sink
from .syntax import Syntax

ACTION = "Action:"
FENCE = "```"
NO_CALL = ("directly_answer", "directly-answer")
START_THINKING, END_THINKING = "<|START_THINKING|>", "<|END_THINKING|>"
START_ACTION, END_ACTION = "<|START_ACTION|>", "<|END_ACTION|>"
START_RESPONSE, END_RESPONSE = "<|START_RESPONSE|>", "<|END_RESPONSE|>"


class CohereCall(JsonCall):
    """``{"tool_name": ..., "parameters": {...}}`` (``name`` read too)."""

    name_keys = ("tool_name", "name")


class CommandRCall(CohereCall):
    def skips(self, name: str) -> bool:
        return name in NO_CALL


def _action_head(buf: str, final: bool) -> int | None:
    """Where the list starts after ``Action:`` (spaces, an optional ```` ```json ```` fence line, then ``[``):
    its position, -1 when this is no action, None while the text so far cannot tell."""
    i = len(buf) - len(buf.lstrip(WS))
    rest = buf[i:]
    if rest.startswith(FENCE):
        j = i + len(FENCE)
        tag = buf[j:j + 4]
        if "json".startswith(tag) and len(tag) < 4 and j + len(tag) == len(buf):
            return None if not final else -1  # ```js... still arriving
        j += 4 if tag == "json" else 0
        k = len(buf) - len(buf[j:].lstrip(WS))
        if k == len(buf):
            return None if not final else -1
        return k if buf[k] == "[" else -1
    if not rest or (FENCE.startswith(rest) and not final):
        return None if not final else -1
    return i if rest[0] == "[" else -1


class CommandR(Format):
    """Content, then ``Action:`` and its list of calls (see the module docstring); text after the list (past
    its closing fence) is content again."""

    markers = (ACTION,)

    def __init__(self, sink: Sink):
        super().__init__(sink)
        self.state = "content"  # content, head (after Action:), calls, tail (after the list)
        self.seq: CallSeq | None = None

    def step(self, final: bool) -> None:
        while True:
            if self.state == "content":
                pos, marker = cut(self.buf, (ACTION,), final)
                self.sink.content.write(self.buf[:pos])
                self.buf = self.buf[pos + len(marker or ""):]
                if marker is None:
                    return
                self.state = "head"
            if self.state == "head":
                start = _action_head(self.buf, final)
                if start is None:
                    return
                if start < 0:  # prose that says "Action:": text
                    self.sink.content.write(ACTION)
                    self.state = "content"
                    if final and not self.buf:
                        return
                    continue
                self.sink.content.boundary()
                # the head is given back with the list when the list is no calls
                self.seq = CallSeq(self.sink, "array", ACTION + self.buf[:start], call=CommandRCall)
                self.buf, self.state = self.buf[start:], "calls"
            if self.state == "calls":
                assert self.seq is not None, "the head made the sequence"
                rest, self.buf = self.seq.feed(self.buf), ""
                if rest is None:
                    if final:
                        self.seq.close()
                    return
                self.buf, self.state = rest, "tail"
            if self.state == "tail":
                lead = self.buf.lstrip(WS)
                if not final and (not lead or (FENCE.startswith(lead) and lead != FENCE)):
                    return
                self.buf = lead[len(FENCE):] if lead.startswith(FENCE) else self.buf
                self.state = "content"
                if final and not self.buf:
                    return


class ThinkingRegion:
    """R7B's plan or reflection: reasoning."""

    def __init__(self, sink: Sink):
        self.sink = sink

    def feed(self, text: str) -> None:
        self.sink.reasoning.write(text)

    def close(self, marker: str) -> None:
        if not marker:
            self.sink.note(f"the output ends inside {START_THINKING} (no {END_THINKING}): all of it is reasoning")


class ResponseRegion:
    """R7B's answer: content."""

    def __init__(self, sink: Sink):
        self.sink = sink

    def feed(self, text: str) -> None:
        self.sink.content.write(text)

    def close(self, marker: str) -> None:
        return


class ActionRegion:
    """R7B's list of calls."""

    def __init__(self, sink: Sink):
        self.sink = sink
        self.seq = CallSeq(sink, "array", START_ACTION, call=CohereCall)
        self.trailing = False

    def feed(self, text: str) -> None:
        if not self.trailing:
            rest = self.seq.feed(text)
            if rest is None:
                return
            self.trailing = True
            text = rest
            if text.strip(WS):
                self.sink.note(f"text after the list of calls inside {START_ACTION}; kept as content")
        if text.strip(WS):
            self.sink.content.write(text)

    def close(self, marker: str) -> None:
        self.seq.close(marker)


class CommandR7B(RegionFormat):
    """R7B's thinking, action and response blocks (see the module docstring); text outside them is content.
    A closing marker without its opening one is dropped, but for the action block's, a call section's end around
    no call: the model's text, kept as written."""

    opens = (START_THINKING, START_ACTION, START_RESPONSE, END_THINKING, END_ACTION, END_RESPONSE)
    closes = (END_THINKING, END_ACTION, END_RESPONSE)
    #: the thinking block is the model's reasoning, parsed here: no ``<think>`` splitting
    reasons = True
    section = (START_ACTION, END_ACTION)

    def open(self, marker: str) -> ThinkingRegion | ActionRegion | ResponseRegion | None:
        if marker == START_THINKING:
            return ThinkingRegion(self.sink)
        if marker == START_ACTION:
            return ActionRegion(self.sink)
        if marker == START_RESPONSE:
            return ResponseRegion(self.sink)
        return None  # a stray closing marker

    def kept(self, marker: str, final: bool) -> bool | None:
        return marker == END_ACTION  # found here, it closes no action block


# no grammar: a call cannot be forced in Command R's syntaxes
SYNTAX = Syntax("command_r", CommandR)
R7B = Syntax("command_r7b", CommandR7B)
