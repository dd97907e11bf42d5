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

from .base import NAME, RegionFormat
from .calls import JsonArgs
from .sink import WS, Sink

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


class DeepSeekCall:
    #: V3/R1's head, ``type<｜tool▁sep｜>name\\n``; V3.1's is ``name<｜tool▁sep｜>``
    typed = True

    def __init__(self, sink: Sink):
        self.sink = sink
        self.state = "head"  # head (type, separator, name line), fence, args, tail
        self.buf = ""
        self.args: JsonArgs | None = None

    def feed(self, text: str) -> None:
        self.buf += text
        if self.state == "head":
            sep = self.buf.find(SEP)
            if self.typed:
                end = self.buf.find("\n", sep) if sep >= 0 else -1
                name, rest = self.buf[sep + len(SEP):end].strip(WS), end + 1
            else:
                end, name, rest = sep, self.buf[:sep].strip(WS), sep + len(SEP)
            if end < 0 or not NAME.fullmatch(name):
                return  # judged at close when it never becomes a name line
            self.args = JsonArgs(self.sink, self.sink.start_call(name))
            self.buf, self.state = self.buf[rest:], "fence"
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
            head = "'type<｜tool▁sep｜>name' line" if self.typed else "'name<｜tool▁sep｜>' head"
            self.sink.note(f"a DeepSeek tool call without a {head}; kept as content")
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


class DeepSeekV31Call(DeepSeekCall):
    typed = False


class DeepSeekV31(DeepSeekV3):
    """DeepSeek-V3.1: V3's markers around ``NAME<｜tool▁sep｜>{...}`` calls."""

    def open(self, marker: str) -> DeepSeekCall | None:
        return DeepSeekV31Call(self.sink) if marker == CALL_BEGIN else None
