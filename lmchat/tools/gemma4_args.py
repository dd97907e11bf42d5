"""Gemma 4's call arguments, ``{key:value,...}`` in its own notation, translated to JSON as they stream.

Keys are bare (``location``) or quoted with the ``<|"|>`` token, strings are quoted with it
(``<|"|>Paris, France<|"|>``: commas, braces and JSON quotes inside are text), numbers, ``true``, ``false`` and
``null`` are bare, objects and arrays nest as in JSON. What is released is never taken back: a member is sent
once its value begins (a string, an object, an array) or ends (a bare value), with the comma before it, so a
call cut off by the end of the output is closed after its last complete value, as every lmchat parser does.
"""
from __future__ import annotations

import json
import math

from .sink import WS, Sink

QUOTE = '<|"|>'
_LITERALS = {"true": "true", "false": "false", "null": "null"}


def bare_value(token: str) -> str:
    """A bare value as JSON: a literal, a number, else (what a model wrote unquoted) a string."""
    token = token.strip(WS)
    if token in _LITERALS:
        return token
    try:
        return str(int(token))
    except ValueError:
        pass
    try:
        number = float(token)
    except ValueError:
        return json.dumps(token, ensure_ascii=False)
    return json.dumps(number) if math.isfinite(number) else json.dumps(token, ensure_ascii=False)


def _held_quote(text: str) -> int:
    """How many characters at the end of ``text`` could begin a ``<|"|>`` still arriving."""
    for k in range(min(len(QUOTE) - 1, len(text)), 0, -1):
        if QUOTE.startswith(text[-k:]):
            return k
    return 0


class GemmaArgs:
    """One call's arguments, from their opening ``{``; ``feed`` takes text, ``close`` ends them."""

    def __init__(self, sink: Sink, index: int):
        self.sink, self.index = sink, index
        self.stack: list[list[object]] = []  # [kind 'o' or 'a', whether a member was sent] per open container
        self.state = "start"  # start, key, keytext, qkey, colon, value, string, token, after, done, error
        self.buf = ""
        self.word = ""  # the key or bare value being read
        self.pending = ""  # what goes out before the next value: a comma, a key
        self.tail = ""  # text after the closing brace
        self.error = ""

    def _send(self, text: str) -> None:
        self.sink.args(self.index, text)

    def _member(self, key: str | None) -> None:
        """What precedes the next member of the innermost container: a comma after the first, then its key."""
        top = self.stack[-1]
        self.pending = ("," if top[1] else "") + (json.dumps(key, ensure_ascii=False) + ": " if key is not None
                                                  else "")

    def _begin(self, opening: str) -> None:
        """A value starts: its member goes out now."""
        if self.stack:
            self.stack[-1][1] = True
        self._send(self.pending + opening)
        self.pending = ""

    def _fail(self, reason: str) -> None:
        self.state, self.error = "error", reason

    def feed(self, text: str, final: bool = False) -> None:
        self.buf += text
        i, buf = 0, self.buf
        while i < len(buf) and self.state not in ("done", "error"):
            c, state = buf[i], self.state
            if state in ("string", "qkey"):
                end = buf.find(QUOTE, i)
                if end < 0:
                    stop = len(buf) if final else len(buf) - _held_quote(buf[i:])
                    self._text(buf[i:stop])
                    i = stop
                    break
                self._text(buf[i:end])
                i = end + len(QUOTE)
                if state == "string":
                    self._send('"')
                    self.state = "after"
                else:
                    self.state = "colon"
                continue
            if state in ("keytext", "token"):
                if c == ":" and state == "keytext":
                    self._member(self.word.strip(WS))
                    self.state = "value"
                elif c in ",}]" and state == "token":
                    self._begin(bare_value(self.word))
                    self.state = "after"
                    continue  # the delimiter is read again
                elif c in ",}]":
                    self._fail(f"a key without a value: {self.word.strip(WS)[:20]!r}")
                    continue
                else:
                    self.word += c
                i += 1
                continue
            if c in WS:
                i += 1
                continue
            if buf.startswith(QUOTE, i) or (not final and QUOTE.startswith(buf[i:]) and c == "<"):
                if not buf.startswith(QUOTE, i):
                    break  # maybe a quote still arriving
                if state == "key":
                    self.state, self.word = "qkey", ""
                elif state == "value":
                    self._begin('"')
                    self.state = "string"
                else:
                    self._fail("a string where none belongs")
                    continue
                i += len(QUOTE)
                continue
            self._step(c)
            i += 1
        self.buf = buf[i:]
        if self.state == "done":
            self.tail += self.buf
            self.buf = ""

    def _text(self, text: str) -> None:
        if self.state == "string":
            if text:
                self._send(json.dumps(text, ensure_ascii=False)[1:-1])
        else:
            self.word += text

    def _step(self, c: str) -> None:
        state = self.state
        if state == "start":
            if c != "{":
                self._fail("the arguments do not open with '{'")
                return
            self._send("{")
            self.stack.append(["o", False])
            self.state = "key"
        elif state == "key":
            if c == "}":
                self._close("o")
            else:
                self.state, self.word = "keytext", c
        elif state == "colon":
            if c == ":":
                self._member(self.word)
                self.state = "value"
            else:
                self._fail("no ':' after a quoted key")
        elif state == "value":
            if c in "{[":
                self._begin(c)
                self.stack.append(["o" if c == "{" else "a", False])
                self.state = "key" if c == "{" else "value"
                if c == "[":
                    self._member(None)
            elif c == "]" and self.stack[-1][0] == "a":
                self._close("a")  # an empty array, or a comma before its end
            elif c in ",}]":
                self._begin('""')  # 'key:' with nothing after it: an empty value, as vLLM reads it
                self.state = "after"
                self._step(c)
            else:
                self.state, self.word = "token", c
        elif state == "after":
            kind = self.stack[-1][0]
            if c == ",":
                self.state = "key" if kind == "o" else "value"
                self._member(None)
            elif c in "}]" and {"}": "o", "]": "a"}[c] == kind:
                self._close(kind)
            else:
                self._fail(f"unexpected {c!r} after a value")

    def _close(self, kind: str) -> None:
        self.stack.pop()
        self._send("}" if kind == "o" else "]")
        self.state = "done" if not self.stack else "after"

    def close(self, ended: bool) -> None:
        """The call's region ends (``ended``: at ``<tool_call|>``, not the end of the output)."""
        self.feed("", final=True)
        if self.state == "done":
            return
        if self.state == "string":
            self._send('"')
        elif self.state == "token" and ended:
            self._begin(bare_value(self.word))  # the end marker ends a bare value too
        if self.stack:
            self._send("".join("}" if kind == "o" else "]" for kind, _ in reversed(self.stack)))
        reason = self.error or ("the call ends before its arguments close" if ended
                                else "the output ends inside the call")
        self.sink.note(f"{self.sink.label(self.index)}: {reason}; arguments kept up to the last complete value")
