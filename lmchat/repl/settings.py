"""What ``/set`` can change, how each value is read and checked, and how it is saved with the session.

Values override the template's bundled sampling settings for this session
only (``overflow`` is the session's overflow policy, not a sampling setting:
what a turn that does not fit in the context does, and ``overflow_room`` how much
it then drops); they are saved with it (under ``"chat"`` in the stored snapshot) and
come back with ``--resume``. ``stop`` adds stop words to the template's own,
which always stay (a model that emits its end marker must stop there).
"""
from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import attrs

from .. import constraints
from ..backends.base import SamplingParams
from ..errors import ConstraintUnsupported, LmchatError
from ..jsontypes import JSON
from ..session import OVERFLOW_POLICIES
from ..tools.answer_constraint import for_answer

if TYPE_CHECKING:
    from ..templates.base import BaseTemplate

SNAPSHOT_KEY = "chat"


class SchemaFormat(TypedDict):
    """A ``format`` read from a schema file: the schema itself, and the file it came from ('' once unknown)."""

    file: str
    schema: JSON


#: a ``format`` value: ``"json"`` (any JSON object) or a schema
Format = str | SchemaFormat
#: a ``/set`` value as read: a number, stop words, an overflow policy or a format
Value = int | float | str | tuple[str, ...] | SchemaFormat


class SettingError(LmchatError, ValueError):
    """A ``/set`` value (typed or stored) is not valid; says which and why."""


@attrs.frozen
class Setting:
    """How a ``/set`` value is read: ``read`` (raises ValueError) and what it expects, in words (``rule``)."""

    read: Callable[[object], Value]
    rule: str

    def __call__(self, raw: object) -> Value:
        return self.read(raw)


def _number(kind: type[int] | type[float], check: Callable[[float], bool], rule: str) -> Setting:
    def parse(raw: object) -> Value:
        if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
            raise TypeError
        value = kind(raw)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError
        if not check(value):
            raise ValueError
        return value

    return Setting(parse, f"a{'n' if kind is int else ''} {kind.__name__} {rule}")


def _stops(raw: object) -> tuple[str, ...]:
    """A JSON list of strings, or one string (``/set stop ###``)."""
    if isinstance(raw, str):
        with contextlib.suppress(ValueError):
            raw = json.loads(raw) if raw.lstrip().startswith("[") else raw
    words = (raw,) if isinstance(raw, str) else tuple(raw) if isinstance(raw, (list, tuple)) else None
    if not words or not all(isinstance(w, str) and w for w in words):
        raise ValueError
    return words


def _overflow(raw: object) -> str:
    if raw not in OVERFLOW_POLICIES:
        raise ValueError
    return str(raw)


_OVERFLOW_RULE = ("shift (drop the oldest turns from the engine's cache, the system prompt stays), truncate "
                  "(the same, resending the rest) or error (refuse the turn)")
_ROOM_RULE = ("from 0 to below 1: the share of the context a drop leaves free, so the next turns extend the cache "
              "(0: drop only what the turn needs, and drop again at the next turn)")

#: a schema file above this size is refused unread (the constraint itself takes 100,000 characters at most)
MAX_SCHEMA_FILE_BYTES = 1 << 20


def _format(raw: object) -> Format:
    """``json`` (any JSON object), ``@FILE`` (a JSON schema read from FILE) or, as stored, ``{"file", "schema"}``:
    the schema itself is saved, so a resumed session keeps its format when the file has moved or changed."""
    if raw == "json":
        return "json"
    if isinstance(raw, str) and raw.startswith("@") and len(raw) > 1:
        path = Path(raw[1:]).expanduser()
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_SCHEMA_FILE_BYTES + 1)
        except OSError as exc:
            raise SettingError(f"/set format: cannot read {path}: {exc.strerror or exc}") from None
        if len(data) > MAX_SCHEMA_FILE_BYTES:
            raise SettingError(f"/set format: {path} is over {MAX_SCHEMA_FILE_BYTES >> 20} MiB, not a schema")
        try:
            schema = json.loads(data)
        except (ValueError, RecursionError) as exc:  # not UTF-8 JSON, or nested too deep for the parser
            why = "nested too deep" if isinstance(exc, RecursionError) else str(exc)[:200]
            raise SettingError(f"/set format: {path} is not JSON ({why})") from None
        raw = {"file": str(path), "schema": schema}
    file = raw.get("file", "") if isinstance(raw, Mapping) else None
    if not (isinstance(raw, Mapping) and isinstance(file, str) and "schema" in raw):
        raise ValueError
    try:
        constraints.json_schema(raw["schema"])
    except ConstraintUnsupported as exc:
        raise SettingError(f"/set format: {file or 'the schema'}: {exc.reason}") from None
    return {"file": file, "schema": raw["schema"]}


_FORMAT_RULE = "json (any JSON object), @FILE (a JSON schema file) or off"


def constraint(value: Format | None) -> constraints.Constraint | None:
    """The constraint a ``format`` value puts on every answer (None: none)."""
    if value is None:
        return None
    if isinstance(value, str):  # "json", the one text _format gives
        return constraints.json_object()
    return constraints.json_schema(value["schema"])


def format_of(value: Value | None) -> Format | None:
    """A ``format`` value (what ``parse("format", ...)`` gives, "json" or a schema) as its type; None: none."""
    return value if isinstance(value, (str, dict)) else None


def describe_format(value: Format | None) -> str:
    """A ``format`` value in a few words: ``json``, ``@person.json``, ``off``."""
    if value is None:
        return "off"
    if isinstance(value, str):  # "json", the one text _format gives
        return "json"
    return f"@{Path(value['file']).name}" if value.get("file") else "a JSON schema"


_STOPS_RULE = 'a stop word, or a JSON list of them (["###", "User:"]); added to the template\'s'

#: name -> parser (raises ValueError); ``parser.rule`` says what is expected
SETTINGS: dict[str, Setting] = {
    "temperature": _number(float, lambda v: v >= 0, ">= 0 (0: greedy)"),
    "top_p": _number(float, lambda v: 0 < v <= 1, "in (0, 1]"),
    "top_k": _number(int, lambda v: v >= 0, ">= 0 (0: off)"),
    "repetition_penalty": _number(float, lambda v: v > 0, "> 0 (1: off)"),
    "max_new_tokens": _number(int, lambda v: v >= 1, ">= 1"),
    "seed": _number(int, lambda v: v >= 0, ">= 0 (sampling repeats with the same seed)"),
    "stop": Setting(_stops, _STOPS_RULE),
    "overflow": Setting(_overflow, _OVERFLOW_RULE),
    "overflow_room": _number(float, lambda v: 0 <= v < 1, _ROOM_RULE),
    "format": Setting(_format, _FORMAT_RULE),
}
#: the settings that are not sampling parameters (``format`` becomes the sampling's constraint)
SESSION_SETTINGS = ("overflow", "overflow_room", "format")
#: the value of each setting that means "none" besides ``default`` (``/set format off``)
OFF = {"format": "off"}


def parse(name: str, raw: object) -> Value:
    if name not in SETTINGS:
        raise SettingError(f"unknown setting {name!r} (one of {', '.join(SETTINGS)})")
    try:
        return SETTINGS[name](raw)
    except SettingError:
        raise
    except (TypeError, ValueError):
        raise SettingError(f"/set {name}: expected {SETTINGS[name].rule}, got {raw!r:.200}") from None


def sampling(template: BaseTemplate, overrides: Mapping[str, Value],
             tokens: Mapping[str, int] | None = None) -> SamplingParams:
    """The template's sampling settings with the session's overrides (``tokens``: the model's added tokens, which
    a format's constraint requires as tokens)."""
    values = {k: v for k, v in overrides.items() if k != "stop" and k not in SESSION_SETTINGS}
    params = SamplingParams.from_template(template, **values)
    extra = overrides.get("stop")
    if isinstance(extra, tuple) and extra:  # stop words are a tuple (_stops)
        params = attrs.evolve(params, stop=tuple(dict.fromkeys((*params.stop, *extra))))
    fmt = format_of(overrides.get("format"))
    if fmt is None:
        return params
    # on the answer, after the model's reasoning, as the server does
    return attrs.evolve(params, constraint=for_answer(constraint(fmt), template, "format", tokens))


def saved(overrides: Mapping[str, Value]) -> dict[str, dict[str, object]]:
    """What goes into the stored snapshot."""
    return {"settings": {k: list(v) if isinstance(v, tuple) else v for k, v in overrides.items()}}


def restored(data: Mapping[str, object]) -> tuple[dict[str, Value], list[str]]:
    """Overrides from a stored snapshot, and a line per stored value that is not valid (then ignored)."""
    section = data.get(SNAPSHOT_KEY)
    stored = section.get("settings") if isinstance(section, Mapping) else None
    if not isinstance(stored, Mapping):
        return {}, [] if section is None else ["the stored /set values are unreadable: ignored"]
    overrides: dict[str, Value] = {}
    problems: list[str] = []
    for name, raw in stored.items():
        try:
            overrides[str(name)] = parse(str(name), raw)
        except SettingError as exc:
            problems.append(f"stored {exc}: ignored")
    return overrides, problems
