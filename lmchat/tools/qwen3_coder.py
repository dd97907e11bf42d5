"""Qwen3-Coder's XML tool calls, in the lines the template writes them::

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    </function>
    </tool_call>

One state machine over the answer. A call is announced when its ``<function=NAME>``
is complete, and its arguments stream one parameter at a time, each once its value
has ended. A value is typed by the tool's JSON schema as vLLM's ``qwen3_coder``
parser types it (:func:`typed`): numbers, booleans, objects and arrays are parsed,
strings are kept verbatim but for the one newline the template puts on each side. A
boolean is ``true`` or ``false`` in any case, whitespace around it aside, as Qwen's own
parser reads it; anything else is kept as written (both parsers make it ``false``), and
the tools' check notes the wrong type, as for a number that is none.

What vLLM accepts, this accepts too: a ``<function=...>`` without ``<tool_call>``
around it, a parameter whose ``</parameter>`` is missing (it ends at the next
``<parameter=``, ``</function>`` or ``</tool_call>``), a ``<tool_call>`` or a
``</function>`` never closed. A call cut off by the end of the answer keeps the
parameters that were complete, with a note.
"""
from __future__ import annotations

import ast
import json
import math

from ..jsontypes import JSON
from ..lark import Expr, Text, seq
from . import forcing_params as by_param
from . import forcing_shapes as shape
from . import hermes
from .base import Format, cut
from .channel_lead import Mark
from .sink import WS, Sink
from .syntax import Forcing, Syntax

TOOL_CALL, END_TOOL_CALL = "<tool_call>", "</tool_call>"
FUNCTION, END_FUNCTION = "<function=", "</function>"
PARAMETER, END_PARAMETER = "<parameter=", "</parameter>"
#: what ends a value: its closing tag, or (the tag missing) the next parameter, the function's or the call's end
ENDS_VALUE = (END_PARAMETER, PARAMETER, END_FUNCTION, END_TOOL_CALL)

#: vLLM's type names, as it reads ``str(schema["type"]).strip().lower()``
STRING_TYPES = ("string", "str", "text", "varchar", "char", "enum")
INT_PREFIXES = ("int", "uint", "long", "short", "unsigned")
FLOAT_PREFIXES = ("num", "float")
BOOL_TYPES = ("boolean", "bool", "binary")
JSON_TYPES = ("object", "array", "arr")
JSON_PREFIXES = ("dict", "list")


def _json_value(value: object) -> bool:
    """Whether ``value`` is strict JSON (no NaN, no sets or bytes from ``ast.literal_eval``)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def _literal(raw: str) -> JSON:
    """``ast.literal_eval`` where it gives a JSON value, else the text (vLLM's last resort)."""
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return raw
    return json.loads(json.dumps(value)) if _json_value(value) else raw  # a tuple becomes a list


def _number(raw: str) -> JSON:
    try:
        value = float(raw)
    except ValueError:
        return raw
    if not math.isfinite(value):
        return raw
    return int(value) if value == int(value) else value


def _declared(declared: JSON) -> str | None:
    """The one type name a value is converted by (None: a string as written).

    A list of types (``["integer", "null"]``) is read by its first non-null
    member, unless it allows a string: then the text is kept (vLLM would read
    the list's Python text, which names no type, and guess by ``literal_eval``).
    """
    if isinstance(declared, list):
        names = [str(t).strip().lower() for t in declared]
        if any(n in STRING_TYPES for n in names):
            return None
        return next((n for n in names if n != "null"), None)
    return None if declared is None else str(declared).strip().lower()


def typed(raw: str, declared: JSON) -> JSON:
    """A parameter's value as vLLM's qwen3_coder parser converts it, given the schema's ``type`` (or None); a
    boolean that is neither true nor false stays text (see the module docstring)."""
    if raw.lower() == "null":
        return None
    kind = _declared(declared)
    if kind is None or kind in STRING_TYPES:
        return raw
    if kind.startswith(INT_PREFIXES):
        try:
            return int(raw)
        except ValueError:
            return raw
    if kind.startswith(FLOAT_PREFIXES):
        return _number(raw)
    if kind in BOOL_TYPES:
        # as Qwen3-Coder's own parser reads it; what it would turn into false stays as written, and the
        # tools' check notes the wrong type, as it does a number that is none
        word = raw.strip(WS).lower()
        return word == "true" if word in ("true", "false") else raw
    if kind in JSON_TYPES or kind.startswith(JSON_PREFIXES):
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            pass
        else:
            if _json_value(value):
                return value
    return _literal(raw)


def _value_text(raw: str) -> str:
    """The value between a parameter's tags: the template's newline on each side removed, nothing else."""
    raw = raw[1:] if raw.startswith("\n") else raw
    return raw[:-1] if raw.endswith("\n") else raw


class Qwen3Coder(Format):
    """States: ``text`` (content), ``open`` (after ``<tool_call>``), ``name`` (after ``<function=``),
    ``body`` (between parameters), ``key`` (after ``<parameter=``), ``value``, ``after`` (a function closed
    inside ``<tool_call>``)."""

    markers = (TOOL_CALL, END_TOOL_CALL, FUNCTION, END_FUNCTION, PARAMETER, END_PARAMETER)

    def __init__(self, sink: Sink):
        super().__init__(sink)
        self.state = "text"
        self.wrapped = False  # inside <tool_call>
        self.raw = ""  # the markup read since the last announced call: given back if it turns out no call
        self.index: int | None = None
        self.name = ""
        self.key = ""
        self.params = 0
        self.scanned = 0  # how far a value was searched for its end
        self.stray = ""  # text inside the call's markup that is no part of it, until a marker says where it ends
        self.noted: set[str] = set()  # the notes given on the current call (each once, however the text came)

    def step(self, final: bool) -> None:
        while self.buf or final:
            state = self.state
            handled = getattr(self, f"_{state}")(final)
            if not handled:
                if final and self.state == state:
                    self._end_of_answer()
                return

    # ------------------------------------------------------------------ states
    def _text(self, final: bool) -> bool:
        pos, marker = cut(self.buf, (TOOL_CALL, FUNCTION), final)
        self.sink.content.write(self.buf[:pos])
        self.buf = self.buf[pos + len(marker or ""):]
        if marker is None:
            return False
        self.wrapped, self.raw = marker == TOOL_CALL, marker
        self.state = "open" if self.wrapped else "name"
        return True

    def _open(self, final: bool) -> bool:
        rest = self.buf.lstrip(WS)
        self.raw += self.buf[: len(self.buf) - len(rest)]
        self.buf = rest
        if rest.startswith(FUNCTION):
            self.raw += FUNCTION
            self.buf, self.state = rest[len(FUNCTION):], "name"
            return True
        if not final and (not rest or FUNCTION.startswith(rest) or END_TOOL_CALL.startswith(rest)):
            return False
        if rest.startswith(END_TOOL_CALL):
            self.raw += END_TOOL_CALL
            self.buf = rest[len(END_TOOL_CALL):]
        self._give_back("no <function=NAME> in the <tool_call>")
        return True

    def _name(self, final: bool) -> bool:
        gt = self.buf.find(">")
        if gt < 0:
            if final:
                self._give_back("the output ends inside a <function=NAME>")
                return True
            return False
        name = self.buf[:gt].strip(WS)
        if not name or any(c in name for c in "<\n"):
            self._give_back(f"{self.raw + self.buf[:gt + 1]!r} names no function")
            return True
        self.buf, self.raw = self.buf[gt + 1:], ""
        self.name, self.params, self.noted = name, 0, set()
        self.index = self.sink.start_call(name)
        self.state = "body"
        return True

    def _body(self, final: bool) -> bool:
        pos, marker = cut(self.buf, (PARAMETER, END_FUNCTION, END_TOOL_CALL, FUNCTION), final)
        self.stray += self.buf[:pos]
        self.buf = self.buf[pos + len(marker or ""):]
        if marker is None:
            return False
        self._stray("text between the parameters of")
        if marker == PARAMETER:
            self.state = "key"
        elif marker == END_FUNCTION:
            self._end_call()
            self.state = "after" if self.wrapped else "text"
        else:  # the function is not closed: </tool_call> ends it, <function= starts the next one
            self._end_call()
            self.state = "name" if marker == FUNCTION else "text"
            self.raw = FUNCTION if marker == FUNCTION else ""
        return True

    def _key(self, final: bool) -> bool:
        gt = self.buf.find(">")
        if gt < 0:
            return False
        self.key = self.buf[:gt].strip(WS)
        self.buf, self.state, self.scanned = self.buf[gt + 1:], "value", 0
        return True

    def _value(self, final: bool) -> bool:
        # a value may be long (a file's text): each chunk scans only what is new since the last one
        found = [(i, m) for m in ENDS_VALUE if (i := self.buf.find(m, self.scanned)) >= 0]
        if not found:
            self.scanned = max(0, len(self.buf) - max(map(len, ENDS_VALUE)) + 1)
            return False
        pos, marker = min(found)
        raw = _value_text(self.buf[:pos])
        self.buf = self.buf[pos + (len(marker) if marker == END_PARAMETER else 0):]  # other markers end it unread
        self._param(self.key, typed(raw, self.sink.property_type(self.name, self.key)))
        self.state = "body"
        return True

    def _after(self, final: bool) -> bool:
        pos, marker = cut(self.buf, (END_TOOL_CALL, FUNCTION), final)
        self.stray += self.buf[:pos]
        self.buf = self.buf[pos + len(marker or ""):]
        if marker is None:
            return False
        self._stray("text after")
        self.state = "text" if marker == END_TOOL_CALL else "name"
        self.raw = FUNCTION if marker == FUNCTION else ""
        return True

    # ------------------------------------------------------------------ actions
    def _param(self, key: str, value: JSON) -> None:
        assert self.index is not None
        piece = json.dumps(key, ensure_ascii=False) + ": " + json.dumps(value, ensure_ascii=False)
        self.sink.args(self.index, ("{" if not self.params else ", ") + piece)
        self.params += 1

    def _end_call(self) -> None:
        assert self.index is not None
        if self.params:
            self.sink.args(self.index, "}")
        self.sink.end_call(self.index)
        self.index = None

    def _stray(self, where: str) -> None:
        """Text inside the call's markup that is no part of it: the model's, kept as content with a note."""
        text, self.stray = self.stray, ""
        if text.strip(WS):
            note = f"{where} the tool call {self.name!r}; kept as content"
            if note not in self.noted:
                self.noted.add(note)
                self.sink.note(note)
            self.sink.content.write(text)
            self.sink.content.boundary()  # markup follows: whitespace before it is a separator

    def _give_back(self, why: str) -> None:
        """The markup read is no call: it is content, as written; what follows is scanned as content again."""
        self.sink.content.write(self.raw)
        self.sink.note(f"{why}; kept as content")
        self.raw, self.state = "", "text"

    def _end_of_answer(self) -> None:
        """The answer ends in the state the last step left (``final``: nothing is held back any more)."""
        self._stray("text after" if self.state == "after" else "text between the parameters of")
        if self.state in ("key", "value"):
            assert self.index is not None
            what = f"parameter {self.key!r}" if self.state == "value" else "a parameter name"
            self.sink.note(f"{self.sink.label(self.index)}: the output ends inside {what}; "
                           "arguments kept up to the last complete parameter")
            self.buf = ""
        if self.index is not None:
            self._end_call()
        self.state = "text"


def _call(name: str, args: Expr, mark: Mark) -> Expr:
    # inside <tool_call>\n...\n</tool_call>, as Hermes' calls (the start rule writes those)
    return seq(Text(f"<function={name}>\n"), args, Text("</function>"))


def _param(tool: str, p: by_param.Param, mark: Mark) -> Expr:
    value = by_param.tagged_value(tool, p, typed, newlines=False)
    return seq(Text(f"<parameter={p.name}>\n"), value, Text("\n</parameter>\n"))


# forced: one parameter at a time (forcing_params), values as the template renders them, typed back by the schema
SYNTAX = Syntax("qwen3_coder", Qwen3Coder, Forcing(hermes.calls_in_tags, shape.param_calls(_call, _param)), reads=typed)
