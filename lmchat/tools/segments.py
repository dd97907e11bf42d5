"""GLM's answer layout (ChatGLM3, GLM-4): segments separated by ``<|assistant|>``, each led by a metadata line.

The generation prompt ends with ``<|assistant|>``, so the answer starts with
the metadata line: empty for text (``\\n Hello``), a tool name for a call. A
model may write text, then ``<|assistant|>get_weather\\n...`` in one answer.
Text segments are stripped, as GLM's own ``process_response`` does. A first
line that cannot be a tool name (spaces, punctuation) is plain text.
"""
from __future__ import annotations

import re

from .base import NAME, Format, cut
from .sink import WS, Sink

SEP = "<|assistant|>"
NAME_SO_FAR = re.compile(r"[ \t\r]*[\w.\-:/]*[ \t\r]*")  # a line that may still become a name line


class SegmentFormat(Format):
    """Segment bookkeeping; subclasses parse a tool segment's body (``tool_feed``/``tool_close``)."""

    markers = (SEP,)
    verbatim_without_markers = False  # the first line may name a tool

    def __init__(self, sink: Sink) -> None:
        super().__init__(sink)
        self.state = "meta"  # meta (reading the first line), content, tool
        self.name = ""
        self.line = ""  # the metadata line as written, given back if the body is not a call

    def step(self, final: bool) -> None:
        while True:
            if self.state == "meta" and not self._meta(final):
                return
            pos, marker = cut(self.buf, (SEP,), final)
            text, self.buf = self.buf[:pos], self.buf[pos + len(marker or ""):]
            if self.state == "content":
                self.sink.content.write(text)
            else:
                self.tool_feed(text)
            if marker is None and not final:
                return
            if self.state == "tool":
                self.tool_close()  # which may give the segment back as content
            if self.state == "content":
                self.sink.content.boundary()
            self.state = "meta"
            if marker is None:
                return

    def _meta(self, final: bool) -> bool:
        eol = self.buf.find("\n")
        line = self.buf if eol < 0 else self.buf[:eol]
        if eol < 0 and not final and NAME_SO_FAR.fullmatch(line):
            return False
        self.sink.content.boundary()
        if eol >= 0 and NAME.fullmatch(line.strip(WS)):
            self.state, self.name, self.line = "tool", line.strip(WS), self.buf[: eol + 1]
            self.buf = self.buf[eol + 1:]
            self.tool_open()
        else:
            self.state = "content"
            if eol >= 0 and not line.strip(WS):
                self.buf = self.buf[eol + 1:]  # the empty metadata line of a text segment
        return True

    def tool_open(self) -> None:
        """A tool segment starts (``self.name`` is set)."""
        raise NotImplementedError

    def tool_feed(self, text: str) -> None:
        raise NotImplementedError

    def tool_close(self) -> None:
        raise NotImplementedError

    def give_back(self, body: str, why: str) -> None:
        """The tool segment is not a call: its text (metadata line included) becomes content."""
        self.sink.content.write(self.line + body)
        self.sink.note(f"{why}; kept as content")
        self.state = "content"
