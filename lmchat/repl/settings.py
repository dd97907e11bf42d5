"""What ``/set`` can change, how each value is read and checked, and how it is saved with the session.

Values override the template's bundled sampling settings for this session
only (``overflow`` is the session's overflow policy, not a sampling setting:
what a turn that does not fit in the context does); they are saved with it (under ``"chat"`` in the stored snapshot) and
come back with ``--resume``. ``stop`` adds stop words to the template's own,
which always stay (a model that emits its end marker must stop there).
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ..backends.base import SamplingParams
from ..errors import LmchatError
from ..session import OVERFLOW_POLICIES

SNAPSHOT_KEY = "chat"


class SettingError(LmchatError, ValueError):
    """A ``/set`` value (typed or stored) is not valid; says which and why."""


def _number(kind: type, check: Callable[[Any], bool], rule: str):
    def parse(raw: Any):
        if isinstance(raw, bool):
            raise ValueError
        value = kind(raw)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError
        if not check(value):
            raise ValueError
        return value

    parse.rule = f"a{'n' if kind is int else ''} {kind.__name__} {rule}"
    return parse


def _stops(raw: Any) -> tuple[str, ...]:
    """A JSON list of strings, or one string (``/set stop ###``)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.lstrip().startswith("[") else raw
        except ValueError:
            pass
    words = (raw,) if isinstance(raw, str) else tuple(raw) if isinstance(raw, (list, tuple)) else None
    if not words or not all(isinstance(w, str) and w for w in words):
        raise ValueError
    return words


def _overflow(raw: Any) -> str:
    if raw not in OVERFLOW_POLICIES:
        raise ValueError
    return raw


_overflow.rule = ("shift (drop the oldest turns from the engine's cache, the system prompt stays), truncate "
                  "(the same, resending the rest) or error (refuse the turn)")

_stops.rule = 'a stop word, or a JSON list of them (["###", "User:"]); added to the template\'s'

#: name -> parser (raises ValueError); ``parser.rule`` says what is expected
SETTINGS: dict[str, Callable[[Any], Any]] = {
    "temperature": _number(float, lambda v: v >= 0, ">= 0 (0: greedy)"),
    "top_p": _number(float, lambda v: 0 < v <= 1, "in (0, 1]"),
    "top_k": _number(int, lambda v: v >= 0, ">= 0 (0: off)"),
    "repetition_penalty": _number(float, lambda v: v > 0, "> 0 (1: off)"),
    "max_new_tokens": _number(int, lambda v: v >= 1, ">= 1"),
    "seed": _number(int, lambda v: v >= 0, ">= 0 (sampling repeats with the same seed)"),
    "stop": _stops,
    "overflow": _overflow,
}
#: the settings that are not sampling parameters
SESSION_SETTINGS = ("overflow",)


def parse(name: str, raw: Any) -> Any:
    if name not in SETTINGS:
        raise SettingError(f"unknown setting {name!r} (one of {', '.join(SETTINGS)})")
    try:
        return SETTINGS[name](raw)
    except (TypeError, ValueError):
        raise SettingError(f"/set {name}: expected {SETTINGS[name].rule}, got {raw!r}") from None


def sampling(template, overrides: Mapping[str, Any]) -> SamplingParams:
    """The template's sampling settings with the session's overrides."""
    values = {k: v for k, v in overrides.items() if k != "stop" and k not in SESSION_SETTINGS}
    params = SamplingParams.from_template(template, **values)
    extra = overrides.get("stop") or ()
    return attrs.evolve(params, stop=tuple(dict.fromkeys((*params.stop, *extra)))) if extra else params


def saved(overrides: Mapping[str, Any]) -> dict:
    """What goes into the stored snapshot."""
    return {"settings": {k: list(v) if isinstance(v, tuple) else v for k, v in overrides.items()}}


def restored(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Overrides from a stored snapshot, and a line per stored value that is not valid (then ignored)."""
    section = data.get(SNAPSHOT_KEY)
    stored = section.get("settings") if isinstance(section, Mapping) else None
    if not isinstance(stored, Mapping):
        return {}, [] if section is None else ["the stored /set values are unreadable: ignored"]
    overrides, problems = {}, []
    for name, raw in stored.items():
        try:
            overrides[str(name)] = parse(str(name), raw)
        except SettingError as exc:
            problems.append(f"stored {exc}: ignored")
    return overrides, problems
