"""DeepSeek-V3, R1 and V3.1: calls between ``<｜tool▁calls▁begin｜>`` and ``<｜tool▁calls▁end｜>``.

A V3/R1 call is
``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``;
the name is announced at the end of its line and the arguments stream as
they come. The Markdown fence around the arguments is optional here.
A V3.1 call (``deepseek_v31``) has no type and no fence:
``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``; the name is
announced at the separator.
"""
from __future__ import annotations

from ..lark import Expr, Grammar, Text, seq
from . import forcing_shapes as shape
from .base import NAME, SectionFormat
from .calls import JsonArgs
from .channel_lead import Mark
from .sink import WS, Sink
from .syntax import Forcing, Syntax

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


class DeepSeekCall:
    """One call's region: a head naming the tool, then JSON arguments (optionally fenced).

    V3/R1's head is ``type<｜tool▁sep｜>name\\n``; subclasses read other heads (:meth:`head`).
    """

    #: the marker that opened the region (given back with the text when it is no call)
    begin = CALL_BEGIN
    #: what a head that never comes is called in the note
    missing = "a DeepSeek tool call without a 'type<｜tool▁sep｜>name' line"

    def __init__(self, sink: Sink):
        self.sink = sink
        self.state = "head"  # head (type, separator, name line), fence, args, tail
        self.buf = ""
        self.args: JsonArgs | None = None

    def head(self) -> tuple[str, str | None, int] | None:
        """``(name, the id the model wrote or None, where the arguments start)`` once the head is complete."""
        sep = self.buf.find(SEP)
        end = self.buf.find("\n", sep) if sep >= 0 else -1
        name = self.buf[sep + len(SEP):end].strip(WS)
        return (name, None, end + 1) if end >= 0 and NAME.fullmatch(name) else None

    def feed(self, text: str) -> None:
        self.buf += text
        if self.state == "head":
            head = self.head()
            if head is None:
                return  # judged at close when it never becomes a head
            name, model_id, rest = head
            self.args = JsonArgs(self.sink, self.sink.start_call(name, model_id))
            self.buf, self.state = self.buf[rest:], "fence"
        if self.state == "fence":
            lead = self.buf.lstrip(WS)
            if lead.startswith("```") and "\n" in lead:
                self.buf, self.state = lead[lead.index("\n") + 1:], "args"
            elif lead and not ("```".startswith(lead) or lead.startswith("```")):
                self.buf, self.state = lead, "args"
            else:
                return  # nothing yet, or a fence line still arriving
        if self.state == "args":
            assert self.args is not None, "the head, which makes the arguments, came first"
            n = self.args.feed(self.buf)
            self.buf = self.buf[n:]
            if self.args.lex.done or self.args.lex.error:
                self.state = "tail"
        return

    def close(self, marker: str) -> None:
        if self.args is None:
            self.sink.content.write(self.begin + self.buf + marker)
            self.sink.note(f"{self.missing}; kept as content")
            return
        self.args.close()
        tail = self.buf.strip(WS)
        if tail not in ("", "```"):
            self.sink.note(f"text after the tool call's arguments: {tail[:20]!r}...; kept as content")
            self.sink.content.write(self.buf)


class DeepSeekV3(SectionFormat):
    opens = (CALLS_BEGIN, CALL_BEGIN, CALLS_END)
    closes = (CALL_END,)
    markers = (*opens, *closes, SEP)
    call_begin, section = CALL_BEGIN, (CALLS_BEGIN, CALLS_END)

    def open(self, marker: str) -> DeepSeekCall | None:
        return DeepSeekCall(self.sink) if marker == CALL_BEGIN else None  # the list markers only group calls


class DeepSeekV31Call(DeepSeekCall):
    """V3.1's head: ``name<｜tool▁sep｜>``."""

    missing = "a DeepSeek tool call without a 'name<｜tool▁sep｜>' head"

    def head(self) -> tuple[str, str | None, int] | None:
        sep = self.buf.find(SEP)
        name = self.buf[:sep].strip(WS)
        return (name, None, sep + len(SEP)) if sep >= 0 and NAME.fullmatch(name) else None


class DeepSeekV31(DeepSeekV3):
    """DeepSeek-V3.1: V3's markers around ``NAME<｜tool▁sep｜>{...}`` calls."""

    def open(self, marker: str) -> DeepSeekCall | None:
        return DeepSeekV31Call(self.sink) if marker == CALL_BEGIN else None


def _calls_joined(parallel: bool, mark: Mark) -> Grammar:
    # DeepSeek-R1's template: the calls joined by "\n" between <｜tool▁calls▁begin｜> and <｜tool▁calls▁end｜>
    return shape.start(seq(mark(CALLS_BEGIN), shape.calls_between(parallel, Text("\n")),
                           mark(CALLS_END)))


def _v3_head(name: str, mark: Mark) -> Expr:
    return seq(mark(CALL_BEGIN), Text("function"), mark(SEP), Text(name + "\n```json\n"))


def _v31_head(name: str, mark: Mark) -> Expr:
    return seq(mark(CALL_BEGIN), Text(name), mark(SEP))


SYNTAX = Syntax("deepseek_v3", DeepSeekV3, Forcing(_calls_joined, shape.named_calls(
    _v3_head, lambda mark: seq(Text("\n```"), mark(CALL_END)))))
V31 = Syntax("deepseek_v31", DeepSeekV31, Forcing(
    shape.sections(CALLS_BEGIN, CALLS_END),
    shape.named_calls(_v31_head, lambda mark: mark(CALL_END))))
