"""An incremental JSON lexer for tool calls that arrive a few characters at a time.

Streaming a call's arguments needs three things a JSON parser does not give:

* where each member of the top-level object starts and ends (the call's
  ``name`` must be complete before anything is announced; its ``arguments``
  are streamed as the raw text of their value);
* a *safe* point: the longest consumed prefix that stays valid JSON once the
  open strings and containers are closed. Text is only ever released up to it,
  so what was released is never taken back, and an answer cut off by the
  token limit still yields valid arguments (the prefix plus :attr:`closing`);
* tolerance of raw control characters in strings, which models do write
  (code with real newlines): they are escaped in :attr:`text`, so released
  arguments are strict JSON.

Anything else outside JSON's grammar stops the lexer with :attr:`error`; the
characters from there on are not consumed and go back to the caller.
"""
from __future__ import annotations

import io
import json
import re

_PLAIN = re.compile(r'[^"\\\x00-\x1f]+')  # a run of string characters needing no care
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_TOKEN_CHARS = frozenset("0123456789+-.eEtrufalsn")
_LITERALS = ("true", "false", "null")
_CLOSER = {"{": "}", "[": "]"}


class JsonLexer:
    """Consumes one JSON object from successive chunks."""

    def __init__(self) -> None:
        self._text = io.StringIO()  # the consumed text, control characters inside strings escaped
        self._len = 0  # (a StringIO so that long arguments arriving in small pieces cost linear time)
        self.done = False
        self.error = ""
        self.safe = 0  # see the module docstring
        self.begin: int | None = None  # where the top-level value starts
        self.members: list[tuple[str, int, int]] = []  # (key, start, end) of top-level members
        self.member: tuple[str, int] | None = None  # (key, start) of the member being read
        self._stack = ""  # open containers
        self._expect = "value"
        self._string = ""  # "key" or "value" inside a string
        self._escape = ""  # an escape sequence being read, from its backslash
        self._token = ""  # a number or literal being read
        self._key = ""
        self._safe_state = ("", False)

    def slice(self, start: int, stop: int) -> str:
        """The consumed text from ``start`` to ``stop``."""
        self._text.seek(start)
        return self._text.read(max(0, min(stop, self._len) - start))

    def closing(self, depth: int = 0) -> str:
        """What closes the text up to :attr:`safe`: the open string and containers, innermost first,
        except the outermost ``depth`` containers."""
        stack, in_string = self._safe_state
        return ('"' if in_string else "") + "".join(_CLOSER[c] for c in reversed(stack[depth:]))

    def feed(self, chunk: str) -> int:
        """Consume from ``chunk``; return how many characters were used (all, unless the value ended or failed)."""
        out: list[str] = []
        self._pos = self._len
        i, n = 0, len(chunk)
        while i < n and not self.done and not self.error:
            if self._string:
                i = self._string_step(chunk, i, out)
                continue
            c = chunk[i]
            if self._token:
                if c in _TOKEN_CHARS:
                    self._emit(c, out)
                    self._token += c
                    self._mark()
                    i += 1
                    continue
                if not self._end_token():
                    break
                continue
            if c in " \t\r\n":
                self._emit(c, out)  # whitespace never moves the safe point
                i += 1
                continue
            if not self._structural(c):
                self.error = f"unexpected {c!r} in JSON"
                break
            self._emit(c, out)
            if c in "}]":  # a container closed: it is a complete value
                self._value_done()
            self._mark()
            i += 1
        self._text.seek(self._len)
        self._len += self._text.write("".join(out))
        return i

    # ------------------------------------------------------------------ internals
    def _emit(self, s: str, out: list[str]) -> None:
        out.append(s)
        self._pos += len(s)

    def _string_step(self, chunk: str, i: int, out: list[str]) -> int:
        if self._escape:
            c = chunk[i]
            ok = c in '"\\/bfnrtu' if len(self._escape) == 1 else c in "0123456789abcdefABCDEF"
            if not ok:
                self.error = f"bad escape {self._escape + c!r} in JSON string"
                return i
            self._escape += c
            if self._escape[1] != "u" or len(self._escape) == 6:
                self._take_string_part(self._escape)
                self._escape = ""
            self._emit(c, out)
            self._mark()
            return i + 1
        m = _PLAIN.match(chunk, i)
        if m:
            self._take_string_part(m.group())
            self._emit(m.group(), out)
            self._mark()
            return m.end()
        c = chunk[i]
        if c == '"':
            self._emit(c, out)
            kind, self._string = self._string, ""
            if kind == "key":
                self._expect = "colon"
            else:
                self._value_done()
            self._mark()
        elif c == "\\":
            self._emit(c, out)
            self._escape = c
        else:  # a raw control character: escape it so released text stays strict JSON
            escaped = json.dumps(c)[1:-1]
            self._take_string_part(escaped)
            self._emit(escaped, out)
            self._mark()
        return i + 1

    def _take_string_part(self, s: str) -> None:
        if self._string == "key":
            self._key += s

    def _structural(self, c: str) -> bool:
        expect = self._expect
        if expect in ("value", "value_or_end"):
            if c == "]" and expect == "value_or_end":
                self._stack = self._stack[:-1]
                return True
            if c not in '{["-0123456789tfn' or (not self._stack and c != "{"):
                return False
            if not self._stack:
                self.begin = self._pos
            if self._stack == "{":
                self.member = (json.loads(f'"{self._key}"'), self._pos)
            if c in "{[":
                self._stack += c
                self._expect = "key_or_end" if c == "{" else "value_or_end"
            elif c == '"':
                self._string = "value"
            else:
                self._token = c
            return True
        if expect in ("key", "key_or_end"):
            if c == "}" and expect == "key_or_end":
                self._stack = self._stack[:-1]
                return True
            if c != '"':
                return False
            self._string, self._key = "key", ""
            return True
        if expect == "colon":
            if c == ":":
                self._expect = "value"
            return c == ":"
        if c == ",":  # expect == "comma"
            self._expect = "key" if self._stack[-1] == "{" else "value"
            return True
        if c == _CLOSER[self._stack[-1]]:
            self._stack = self._stack[:-1]
            return True
        return False

    def _end_token(self) -> bool:
        token, self._token = self._token, ""
        if token not in _LITERALS and not _NUMBER.fullmatch(token):
            self.error = f"bad JSON literal {token!r}"
            return False
        self._value_done()
        return True

    def _value_done(self) -> None:
        if not self._stack:
            self.done = True
            return
        self._expect = "comma"
        if self._stack == "{" and self.member is not None:
            key, start = self.member
            self.members.append((key, start, self._pos))
            self.member = None

    def _mark(self) -> None:
        """Move the safe point here if the text so far can be closed by appending."""
        if self._string == "value":
            safe = not self._escape
        elif self._string:
            safe = False
        elif self._token:
            safe = self._token in _LITERALS or bool(_NUMBER.fullmatch(self._token))
        else:
            safe = self.done or self._expect in ("comma", "key_or_end", "value_or_end")
        if safe:
            self.safe = self._pos
            self._safe_state = (self._stack, self._string == "value")
