"""A sequence of JSON tool calls: one object, an array of them, or objects joined by ``;``.

Text that is not (yet) part of an announced call is kept in ``raw``, so a
sequence that turns out not to be a call gives the model's text back as
content, with a note. Once a call is announced it stays; output that breaks
the format after that point goes to content.
"""
from __future__ import annotations

from .calls import JsonCall
from .sink import WS, Sink

SHAPES = ("object", "array", "any", "list")  # "any": an object or an array; "list": objects joined by ";"


class CallSeq:
    def __init__(self, sink: Sink, shape: str, opening: str = "", call: type[JsonCall] = JsonCall):
        assert shape in SHAPES
        self.sink = sink
        self._make_call = call
        self.shape = shape
        self.raw = opening  # given back as content if nothing here is a call
        self.state = "begin"  # begin, elem (a call may come), call, between (after a call), after (array closed)
        self.calls = 0
        self.failed = False
        self._call: JsonCall | None = None
        self._array = False

    def feed(self, text: str) -> str | None:
        """Consume ``text``; once the sequence has ended, return the text that follows it."""
        while text:
            if self.failed:
                self.sink.content.write(text)
                return None
            if self.state == "call":
                text = self._feed_call(text)
                continue
            stripped = text.lstrip(WS)
            self.raw += text[: len(text) - len(stripped)]
            text = stripped
            if not text:
                return None
            nxt = self._next(text[0])
            if nxt == "end":
                return text
            if nxt is None:
                self._fail(f"expected a tool call, found {text[0]!r}")
            elif nxt == "call":
                self._call, self.state = self._make_call(self.sink), "call"
            else:
                self.raw += text[0]
                text, self.state = text[1:], nxt
        return None

    def close(self, closing: str = "") -> None:
        """The text of the sequence ended (closing marker, or end of answer)."""
        if not self.failed:
            if self.state == "call" and self._current().skipped:
                pass  # cut off inside a call that stands for none: nothing to close
            elif self.state == "call" and self._current().index is None:
                self._fail("the output ends before the tool name")
            elif self.state == "call":
                self._current().close()
                self.calls += 1
            elif self.state == "begin":
                self._fail("empty tool call")
            elif self._array and self.state in ("elem", "between"):
                if self.calls:
                    self.sink.note("the list of tool calls is not closed")
                else:
                    self._fail("the list of tool calls is not closed")
        if self.failed and not self.calls:
            self.sink.content.write(closing)

    def _next(self, c: str) -> str | None:
        """The state after character ``c`` ('call' when it starts one, 'end' past the sequence, None: malformed)."""
        state = self.state
        if state == "begin":
            if c == "[" and self.shape in ("array", "any"):
                self._array = True
                return "elem"
            return "call" if c == "{" and self.shape != "array" else None
        if state == "elem":
            if c == "{":
                return "call"
            return "after" if c == "]" and self._array else None
        if state == "between" and self._array:
            return {",": "elem", "]": "after"}.get(c)
        if state == "between" and self.shape == "list" and c == ";":
            return "elem"
        return "end"

    def _current(self) -> JsonCall:
        """The call being read (state "call" always has one)."""
        assert self._call is not None, "no call in state 'call'"
        return self._call

    def _feed_call(self, text: str) -> str:
        call = self._current()
        n = call.feed(text)
        # text before the announcement is part of the call once it is announced
        self.raw = "" if call.index is not None else self.raw + text[:n]
        if not call.ended:
            return text[n:]
        if call.skipped and call.lex.done:  # a complete call that stands for none (Command-R's directly_answer)
            self.state = "between"
            return text[n:]
        if call.index is None:
            self._fail(f"not a tool call ({call.problem or call.lex.error or 'no name'})")
            return text[n:]
        call.close()
        self.calls += 1
        if call.lex.done:
            self.state = "between"
        else:
            self.failed = True  # broken after the name: the call stays, the rest is content
        return text[n:]

    def _fail(self, why: str) -> None:
        self.sink.content.write(self.raw)
        self.raw = ""
        self.sink.note(f"{why}; kept as content")
        self.failed = True
