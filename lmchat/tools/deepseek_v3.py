"""DeepSeek-V3 and R1: calls between ``<｜tool▁calls▁begin｜>`` and ``<｜tool▁calls▁end｜>``.

Each call is
``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``;
the name is announced at the end of its line and the arguments stream as
they come. The Markdown fence around the arguments is optional here.
"""
from __future__ import annotations

from .base import NAME, RegionFormat
from .calls import JsonArgs
from .sink import WS, Sink

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


class DeepSeekCall:
    def __init__(self, sink: Sink):
        self.sink = sink
        self.state = "head"  # head (type, separator, name line), fence, args, tail
        self.buf = ""
        self.args: JsonArgs | None = None

    def feed(self, text: str) -> None:
        self.buf += text
        if self.state == "head":
            sep = self.buf.find(SEP)
            eol = self.buf.find("\n", sep) if sep >= 0 else -1
            name = self.buf[sep + len(SEP):eol].strip(WS)
            if eol < 0 or not NAME.fullmatch(name):
                return  # judged at close when it never becomes a name line
            self.args = JsonArgs(self.sink, self.sink.start_call(name))
            self.buf, self.state = self.buf[eol + 1:], "fence"
        if self.state == "fence":
            head = self.buf.lstrip(WS)
            if head.startswith("```") and "\n" in head:
                self.buf, self.state = head[head.index("\n") + 1:], "args"
            elif head and not ("```".startswith(head) or head.startswith("```")):
                self.buf, self.state = head, "args"
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
            self.sink.content.write(CALL_BEGIN + self.buf + marker)
            self.sink.note("a DeepSeek tool call without a 'type<｜tool▁sep｜>name' line; kept as content")
            return
        self.args.close()
        tail = self.buf.strip(WS)
        if tail not in ("", "```"):
            self.sink.note(f"text after the tool call's arguments: {tail[:20]!r}...; kept as content")
            self.sink.content.write(self.buf)


class DeepSeekV3(RegionFormat):
    opens = (CALLS_BEGIN, CALL_BEGIN, CALLS_END)
    closes = (CALL_END,)
    markers = (*opens, *closes, SEP)

    def open(self, marker: str) -> DeepSeekCall | None:
        return DeepSeekCall(self.sink) if marker == CALL_BEGIN else None  # the list markers only group calls
