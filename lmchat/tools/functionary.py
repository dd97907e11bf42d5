"""MeetKai Functionary's calls: v3.1's ``<function=NAME>{...}</function>`` and v3.2's ``>>>NAME\\n{...}`` segments.

v3.1 (``functionary_v3_1``) writes text, then calls back to back, each ``<function=NAME>`` + JSON arguments +
``</function>``; the call is announced at the ``>`` of its head and its arguments stream. Code for the
interpreter follows ``<|python_tag|>`` up to the end of the answer and becomes a call ``python``: its arguments
are the text when that is a JSON object (what the template renders back), else ``{"code": text}`` as llama.cpp
reads it.

v3.2 (``functionary_v3_2``) answers in segments ``RECIPIENT\\nBODY`` separated by ``>>>``; the generation
prompt writes the first ``>>>``, so an answer starts with a recipient line. ``all`` is text for the user
(content), ``python`` code (as v3.1's), any other name a call with the JSON body as its arguments (the name's
line must be followed by the body's ``{``, as llama.cpp requires). A first line that is no recipient is content
as written, with no note: a model may answer without one.
"""
from __future__ import annotations

import json

from ..lark import EMPTY, Grammar, Text
from . import forcing_shapes as shape
from .base import NAME, Format, args_json, cut, whole_call
from .calls import JsonArgs
from .channel_lead import Mark
from .deepseek_v3 import DeepSeekCall
from .sink import WS, Sink
from .syntax import Forcing, Syntax

FUNCTION, END_FUNCTION, PYTHON_TAG = "<function=", "</function>", "<|python_tag|>"
SEGMENT = ">>>"


class FunctionCall(DeepSeekCall):
    """v3.1's call: the head is ``NAME>``, the rest JSON arguments up to ``</function>``."""

    begin = FUNCTION
    missing = "a Functionary call without a 'NAME>' head"

    def head(self) -> tuple[str, str | None, int] | None:
        end = self.buf.find(">")
        name = self.buf[:end]
        return (name, None, end + 1) if end >= 0 and NAME.fullmatch(name) else None


def python_call(sink: Sink, code: str, opening: str) -> None:
    """The interpreter's call: the text as arguments when it is a JSON object, else ``{"code": text}``."""
    if not code.strip(WS):
        sink.content.write(opening + code)
        sink.note(f"no code after {opening!r}; kept as content")
        return
    try:
        value = json.loads(code)
        args = args_json(value) if isinstance(value, dict) else None
    except (ValueError, RecursionError):
        args = None
    whole_call(sink, "python", args if args is not None else json.dumps({"code": code}, ensure_ascii=False))


class FunctionaryV31(Format):
    markers = (FUNCTION, END_FUNCTION, PYTHON_TAG)

    def __init__(self, sink: Sink):
        super().__init__(sink)
        self.call: FunctionCall | None = None
        self.code: str | None = None  # after <|python_tag|>: the rest of the answer

    def step(self, final: bool) -> None:
        while self.code is None:
            if self.call is None:
                pos, marker = cut(self.buf, (FUNCTION, PYTHON_TAG), final)
                self.sink.content.write(self.buf[:pos])
                self.buf = self.buf[pos + len(marker or ""):]
                if marker is None:
                    return
                if marker == PYTHON_TAG:
                    self.code = ""
                    break
                self.call = FunctionCall(self.sink)
                continue
            pos, marker = cut(self.buf, (END_FUNCTION,), final)
            text, self.buf = self.buf[:pos], self.buf[pos + len(marker or ""):]
            self.call.feed(text)
            if marker is None:
                if final:
                    self.call.close("")
                    self.call = None
                return
            self.call.close(marker)
            self.call = None
        self.code += self.buf
        self.buf = ""
        if final:
            python_call(self.sink, self.code, PYTHON_TAG)


class FunctionaryV32(Format):
    markers = (SEGMENT,)
    verbatim_without_markers = False  # the answer opens with a recipient line: NAME\n{...} is a call

    def __init__(self, sink: Sink):
        super().__init__(sink)
        self.state = "recipient"  # recipient, text, args, tail (after a call's JSON), code
        self.args: JsonArgs | None = None
        self.code = ""
        self.tail = ""  # what follows a call's JSON in its segment
        self.first = True  # the first segment's '>>>' is the prompt's

    def step(self, final: bool) -> None:
        while True:
            if self.state == "recipient" and not self._recipient(final):
                return
            if self.state == "args":
                assert self.args is not None, "a call's arguments follow its recipient line"
                n = self.args.feed(self.buf)
                self.buf = self.buf[n:]
                if not (self.args.lex.done or self.args.lex.error):
                    if final:
                        self._end_call("")
                    return
                self.state = "tail"
            if self.state in ("text", "tail", "code"):
                pos, marker = cut(self.buf, (SEGMENT,), final)
                text, self.buf = self.buf[:pos], self.buf[pos + len(marker or ""):]
                if self.state == "text":
                    self.sink.content.write(text)
                elif self.state == "code":
                    self.code += text
                else:
                    self.tail += text
                if marker is None and not final:
                    return
                self._end_segment(marker or "")
                if marker is None:
                    return
                self.state = "recipient"

    def _recipient(self, final: bool) -> bool:
        """Read the recipient line; False when more text is needed.

        As llama.cpp reads it, a recipient is ``all`` or ``python`` on a line of its own, or a name whose line is
        followed by the ``{`` of its arguments; any other first line is text, written as it is."""
        newline = self.buf.find("\n")
        line = self.buf[:newline] if newline >= 0 else self.buf
        named = bool(NAME.fullmatch(line))
        after = self.buf[newline + 1:newline + 2] if newline >= 0 else ""
        if newline >= 0 and (line in ("all", "python") or named and after == "{"):
            self.buf, self.first = self.buf[newline + 1:], False
            if line == "all":
                self.state = "text"
            elif line == "python":
                self.state, self.code = "code", ""
            else:
                self.args = JsonArgs(self.sink, self.sink.start_call(line))
                self.state = "args"
            return True
        if not final and (named or not line) and not after:
            return False  # the line, or what follows it, is still coming
        if final and newline < 0 and line in ("", "all"):
            self.buf = ""  # nothing, or an empty 'all' segment
            return False
        self.sink.content.write("" if self.first else SEGMENT)  # no recipient: text as written
        self.state, self.first = "text", False
        return True

    def _end_segment(self, marker: str) -> None:
        if self.state == "code":
            python_call(self.sink, self.code, "python\n")
        elif self.state == "tail":
            self._end_call(marker)

    def _end_call(self, marker: str) -> None:
        assert self.args is not None, "a call is open"
        self.args.close()
        tail = self.tail
        if tail.strip(WS):
            self.sink.note(f"text after the tool call's arguments: {tail.strip(WS)[:20]!r}...; kept as content")
            self.sink.content.write(tail)
        self.args, self.tail = None, ""


def _segments(parallel: bool, mark: Mark) -> Grammar:
    """v3.2: the prompt wrote the first ``>>>``; each further call is a segment of its own."""
    return shape.start(shape.calls_between(parallel, Text(SEGMENT)))


# v3.1: <function=NAME>{...}</function> back to back (text in Llama 3's tokenizer)
V31 = Syntax("functionary_v3_1", FunctionaryV31, Forcing(shape.back_to_back, shape.named_calls(
    lambda name, mark: Text(f"<function={name}>"), lambda mark: Text("</function>"))))
# v3.2: NAME\n{...}, further calls after ">>>" (the recipient line of each segment)
V32 = Syntax("functionary_v3_2", FunctionaryV32, Forcing(_segments, shape.named_calls(
    lambda name, mark: Text(name + "\n"), lambda mark: EMPTY)))
