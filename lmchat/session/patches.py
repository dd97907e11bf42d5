"""Snapshot patches: what a turn changed, so a store appends O(turn) instead of rewriting O(history).

A session's snapshot (:meth:`Session.to_dict`) has five lists that grow with
the conversation (``messages``, ``earlier``, ``context``, ``offsets``, ``context_ids``) and
a few small fields. A patch holds, for each list, the index from which it
changed and the items from there on, plus the new values of the small fields that changed::

    {"lists": {"messages": [4, [...]], "context_ids": [812, [...]]}, "set": {"tail": 1204, ...}}

:func:`apply` turns the snapshot before a turn into the snapshot after it;
a store keeps a base snapshot and the patches since, and folds them in when
they outgrow it.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypedDict

from ..jsontypes import JSONObject
from ..messages import json_copy

#: the snapshot's lists, patched from an index on
LISTS = ("messages", "earlier", "context", "offsets", "context_ids")
#: the small fields a patch sets when they changed (the rest only change with a new session: a full save)
SMALL = ("tail", "rendered", "pending", "needs_reset", "reset_reason", "anchor", "rewind", "answer_end", "reopened",
         "session_len", "overflow", "max_new_tokens", "injection", "max_message_chars", "drift",
         "overflow_room")


class Patch(TypedDict):
    """A patch: per list that changed, ``[index, items from there on]``; the small fields that changed."""

    lists: dict[str, list[object]]
    set: JSONObject


class Changes:
    """Where each of a session's lists changed since it was last saved (the index each patch starts from).
    Before the first save nothing is tracked: only a whole snapshot describes the session."""

    def __init__(self) -> None:
        self.lows: dict[str, int] | None = None
        #: the small fields' values as last saved, in :data:`SMALL`'s order (a tuple: it is kept per session)
        self.small: tuple[object, ...] = ()

    def lower(self, **lows: int) -> None:
        if self.lows is not None:
            for key, low in lows.items():
                self.lows[key] = min(self.lows.get(key, low), low)

    def saved(self, small: tuple[object, ...]) -> None:
        self.lows, self.small = {}, small


def make(snapshot_lists: Mapping[str, Sequence[object]], lows: Mapping[str, int], small: Mapping[str, object]
         ) -> Patch:
    """A patch from each list's low-water mark (lists not in ``lows`` did not change); it shares nothing
    with the session."""
    lists = {key: [low, json_copy(snapshot_lists[key][low:])] for key, low in lows.items()}
    return {"lists": lists, "set": {k: json_copy(v) for k, v in small.items()}}


def apply(snapshot: JSONObject, patch: Mapping[str, object]) -> JSONObject:
    """``snapshot`` with ``patch`` applied (in place; returned for convenience)."""
    lists, small = patch.get("lists", {}), patch.get("set", {})
    if not isinstance(lists, dict) or not isinstance(small, dict):
        raise ValueError("a patch has dicts under 'lists' and 'set'")
    for key, (low, items) in lists.items():
        current = snapshot.get(key)
        if current is None:
            current = []
        if not isinstance(current, list) or not isinstance(low, int) or not 0 <= low <= len(current) \
                or not isinstance(items, list):
            raise ValueError(f"patch of {key!r} does not fit the snapshot (from {low!r} of {_size(current)})")
        snapshot[key] = current[:low] + items
    snapshot.update(small)
    return snapshot


def _size(value: object) -> object:
    return len(value) if isinstance(value, list) else type(value).__name__


def first_change(old: Sequence[object], new: Sequence[object]) -> int:
    """The first index where ``new`` differs from ``old`` (rare edits only: it walks the lists)."""
    return next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
