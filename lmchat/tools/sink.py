"""Where format parsers write: the content and reasoning channels, calls, notes.

Formats decide *what* a piece of output is; the sink turns that into events,
handles the whitespace around structure (the blank line a template puts
between an answer and its first call is not part of the answer), numbers the
calls and checks them against the request's tools.
"""
from __future__ import annotations

import json
import secrets
import string
from collections.abc import Callable, Iterable

from ..jsontypes import JSON, JSONObject
from .events import (
    ContentDelta,
    Event,
    ParseError,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallStart,
)

WS = " \t\r\n"
_ALNUM = string.ascii_letters + string.digits
_TYPES: dict[str, Callable[[JSON], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


class Channel:
    """One text stream (content or reasoning) whose whitespace around structure depends on where it is.

    Whitespace that touches structure (a tool call, a think block) is held at
    the boundary: when text follows on the same channel and text came before,
    it is the model's own and is kept (``"First part. <call> second part."``
    reads ``"First part.  second part."``: the model's text minus the call);
    at the start or the end of the channel it is the template's separator
    (the blank line before a first call) and is dropped.
    """

    def __init__(self, emit: Callable[[str], None]):
        self._emit = emit
        self._pending = ""  # held trailing whitespace
        self.drop = ""  # characters to drop before the next text
        self._gap: str | None = None  # whitespace held at a boundary, None when there is none
        self._gap_chars = WS
        self._wrote = False

    def write(self, text: str) -> None:
        if self.drop:
            stripped = text.lstrip(self.drop)
            if not stripped:
                return
            text, self.drop = stripped, ""
        if self._gap is not None:
            rest = text.lstrip(self._gap_chars)
            self._gap += text[: len(text) - len(rest)]
            if not rest:
                return
            if self._wrote and self._gap:  # between two texts: the model's whitespace
                self._emit(self._gap)
            text, self._gap = rest, None
        body = text.rstrip(WS)
        if body:
            self._emit(self._pending + body)
            self._pending, self._wrote = "", True
        self._pending += text[len(body):]

    def boundary(self, chars: str = WS) -> None:
        """Structure starts here: the held whitespace in ``chars`` waits to see what follows."""
        kept = self._pending.rstrip(chars)
        if kept:
            self._emit(kept)
            self._wrote = True
        self._gap = (self._gap or "") + self._pending[len(kept):]
        self._gap_chars = chars
        self._pending = ""

    def flush(self) -> None:
        if self._pending:
            self._emit(self._pending)
        self._pending, self._gap = "", None  # whitespace held at a boundary at the end: a separator


def openai_id(model_id: JSON) -> str:
    return model_id if isinstance(model_id, str) and model_id else "call_" + secrets.token_hex(12)


def mistral_id(model_id: JSON) -> str:
    """Mistral's templates reject ids that are not 9 alphanumeric characters."""
    if isinstance(model_id, str) and len(model_id) == 9 and model_id.isascii() and model_id.isalnum():
        return model_id
    return "".join(secrets.choice(_ALNUM) for _ in range(9))


def tool_schemas(tools: Iterable[JSON] | None) -> JSONObject | None:
    """name -> parameters schema for OpenAI tools (``{"type": "function", "function": {...}}``) or bare functions."""
    if tools is None:
        return None
    out: JSONObject = {}
    for tool in tools:
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            out[function["name"]] = function.get("parameters")
    return out


def schema_problems(schema: JSON, args: JSON) -> list[str]:
    """Missing required arguments and arguments of the wrong JSON type (no coercion, no other rules)."""
    if not isinstance(schema, dict):
        return []
    if not isinstance(args, dict):
        return ["arguments are not a JSON object"]
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    out = [f"missing required argument {k!r}" for k in schema.get("required") or () if k not in args]
    for key, value in args.items():
        prop = props.get(key)
        declared = prop.get("type") if isinstance(prop, dict) else None
        types = [declared] if isinstance(declared, str) else declared if isinstance(declared, list) else []
        checks = [_TYPES[t] for t in types if t in _TYPES]
        if checks and not any(check(value) for check in checks):
            out.append(f"argument {key!r} should be {' or '.join(types)}, got {type(value).__name__}")
    return out


class Sink:
    """Collects the events of one answer."""

    def __init__(self, tools: Iterable[JSON] | None = None, ids: Callable[[JSON], str] = openai_id):
        self.events: list[Event] = []
        self.content = Channel(lambda text: self.events.append(ContentDelta(text)))
        self.reasoning = Channel(lambda text: self.events.append(ReasoningDelta(text)))
        self.ids = ids
        self._schemas = tool_schemas(tools)
        self._names: list[str] = []
        self._args: list[list[str]] = []

    def take(self) -> list[Event]:
        events, self.events = self.events, []
        return events

    def note(self, text: str) -> None:
        self.events.append(ParseError(text))

    def start_call(self, name: str, model_id: JSON = None) -> int:
        self.content.boundary()
        index = len(self._names)
        self._names.append(name)
        self._args.append([])
        self.events.append(ToolCallStart(index, self.ids(model_id), name))
        return index

    def args(self, index: int, text: str) -> None:
        if text:
            self._args[index].append(text)
            self.events.append(ToolCallArgumentsDelta(index, text))

    def label(self, index: int) -> str:
        return f"tool call {index} ({self._names[index]})"

    def end_call(self, index: int) -> None:
        """The call is complete: a call without arguments gets ``{}``; check it against the tools."""
        if not self._args[index]:
            self.args(index, "{}")
        self.content.boundary()
        if self._schemas is None:
            return
        name = self._names[index]
        if name not in self._schemas:
            self.note(f"{self.label(index)}: not one of the request's tools (kept)")
            return
        try:
            args = json.loads("".join(self._args[index]))
        except (ValueError, RecursionError):  # JSON nested deeper than Python's parser goes
            self.note(f"{self.label(index)}: arguments could not be checked")
            return
        for problem in schema_problems(self._schemas[name], args):
            self.note(f"{self.label(index)}: {problem}")

    def property_type(self, name: str, key: str) -> JSON:
        """The declared JSON type of argument ``key`` of tool ``name``, if the tools say."""
        schema = (self._schemas or {}).get(name)
        props = schema.get("properties") if isinstance(schema, dict) else None
        prop = props.get(key) if isinstance(props, dict) else None
        return prop.get("type") if isinstance(prop, dict) else None
