"""Reading a stored JSON record into typed fields: each reader checks a value's type and returns it typed,
or raises ``ValueError``/``TypeError`` (:mod:`.chain_state` turns either into ``StoreCorrupt`` naming the
session). Records were written by lmchat, so a wrong type means a damaged store, never a client's mistake.
"""
from __future__ import annotations

from typing import TypeVar

from ..jsontypes import JSON, JSONObject

T = TypeVar("T")


def obj(value: JSON) -> JSONObject:
    if not isinstance(value, dict):
        raise TypeError(f"an object, not {type(value).__name__}")
    return value


def string(value: JSON) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{str(value)[:40]!r} is no string")
    return value


def serial(value: JSON) -> int:
    """An integer (a serial, an index, a count): a bool is none."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{str(value)[:40]!r} is no serial")
    return value


def seconds(value: JSON) -> float:
    """A time (seconds since the epoch)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{str(value)[:40]!r} is no time")
    return value


def listed(value: JSON) -> list[object]:
    """A list a record may leave out (None: empty)."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{str(value)[:40]!r} is no list")
    return list(value)


def optional(value: JSON, want: type[T]) -> T | None:
    if value is None or isinstance(value, want):
        return value
    raise ValueError(f"{str(value)[:40]!r} is no {want.__name__}")


def strings(value: JSON) -> dict[str, str]:
    """An object of strings a record may leave out (a conversation's metadata, checked when it was set)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError("metadata is an object of strings")
    return dict(value)
