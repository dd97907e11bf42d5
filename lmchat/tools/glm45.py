"""GLM-4.5/4.6: ``<tool_call>NAME\\n<arg_key>k</arg_key>\\n<arg_value>v</arg_value>...</tool_call>``.

The template writes string values as they are and other values as JSON, so a
value is a string when the tool's schema says so; otherwise it is read as JSON
when that gives a non-string (``42``, ``true``, ``[1]``) and kept as written
else. Arguments stream one key/value pair at a time. A call cut off by the end of
the answer keeps the pairs that were complete, with a note.
"""
from __future__ import annotations

import json
import re

from ..jsontypes import JSON
from ..lark import Expr, Grammar, Text, seq
from . import forcing_params as by_param
from . import forcing_shapes as shape
from .base import NAME, RegionFormat
from .channel_lead import Mark
from .sink import WS, Sink
from .syntax import Forcing, Syntax

OPEN, CLOSE = "<tool_call>", "</tool_call>"
PAIR = re.compile(r"\s*<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)
NAME_END = re.compile(r"[\n<]")


def typed(raw: str, declared: JSON) -> JSON:
    types = [declared] if isinstance(declared, str) else declared if isinstance(declared, list) else []
    if "string" in types:
        return raw
    try:
        value = json.loads(raw)
        json.dumps(value, allow_nan=False)  # NaN/Infinity are not JSON values
    except (ValueError, RecursionError):
        return raw
    return raw if isinstance(value, str) and not types else value


class Glm45Call:
    def __init__(self, sink: Sink):
        self.sink = sink
        self.buf = ""
        self.index: int | None = None
        self.name = ""
        self.pairs = 0

    def feed(self, text: str) -> None:
        self.buf += text
        index = self.index
        if index is None:
            end = NAME_END.search(self.buf)
            if end is None or not NAME.fullmatch(self.buf[:end.start()].strip(WS)):
                return  # judged at close when no name line comes
            index = self._start(self.buf[:end.start()].strip(WS))
            self.buf = self.buf[end.start():]
        while m := PAIR.match(self.buf):
            key, raw = m.group(1).strip(WS), m.group(2)
            value = typed(raw, self.sink.property_type(self.name, key))
            piece = json.dumps(key, ensure_ascii=False) + ": " + json.dumps(value, ensure_ascii=False)
            self.sink.args(index, ("{" if not self.pairs else ", ") + piece)
            self.pairs += 1
            self.buf = self.buf[m.end():]
        return

    def _start(self, name: str) -> int:
        self.name = name
        self.index = index = self.sink.start_call(name)
        return index

    def close(self, marker: str) -> None:
        index = self.index
        if index is None:
            if not NAME.fullmatch(self.buf.strip(WS)):
                self.sink.content.write(OPEN + self.buf + marker)
                self.sink.note("a GLM tool call without a name line; kept as content")
                return
            index = self._start(self.buf.strip(WS))  # a call without arguments
            self.buf = ""
        if self.pairs:
            self.sink.args(index, "}")
        self.sink.end_call(index)
        if self.buf.strip(WS):
            what = ("the output ends inside an argument" if not marker
                    else f"malformed arguments {self.buf.strip()[:20]!r}")
            self.sink.note(f"{self.sink.label(index)}: {what}; kept as content")
            self.sink.content.write(self.buf)
        elif not marker:  # cut off after a complete pair (or its name): the call may lack arguments
            self.sink.note(f"{self.sink.label(index)}: the output ends inside the call (no {CLOSE}); "
                           "kept with the arguments that were complete")


class Glm45(RegionFormat):
    opens = (OPEN,)
    closes = (CLOSE,)

    def open(self, marker: str) -> Glm45Call:
        return Glm45Call(self.sink)


def _calls(parallel: bool, mark: Mark) -> Grammar:
    return shape.start(shape.calls_between(parallel, Text("\n")))


def _call(name: str, args: Expr, mark: Mark) -> Expr:
    return seq(mark(OPEN), Text(name), args, Text("\n"), mark(CLOSE))


def _param(tool: str, p: by_param.Param, mark: Mark) -> Expr:
    value = by_param.tagged_value(tool, p, typed)
    return seq(Text("\n"), mark("<arg_key>"), Text(p.name), mark("</arg_key>"), Text("\n"), mark("<arg_value>"), value,
               mark("</arg_value>"))


# forced: one parameter at a time (forcing_params), values as the template renders them, typed back by the schema
SYNTAX = Syntax("glm45", Glm45, Forcing(_calls, shape.param_calls(_call, _param)), reads=typed)
