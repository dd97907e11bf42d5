"""The items ``truncation: "auto"`` dropped: where each item of a Responses or Conversations session is, and what a
turn that drops some keeps of them.

To fit a turn, the session's overflow policy drops its oldest messages (``Delta.removed``). They stay items of the
chain or the conversation, as in OpenAI's API, where truncation only changes what the model sees: a response's
``input_items`` still lists them, ``GET`` still reads an answer that was dropped, and continuing a response works.
The session's state names them (:class:`~.chain_state.Dropped`, spans of serials) and the note of the turn that
dropped them keeps their messages (:attr:`~.chain_state.Note.dropped`): written once, with that turn, so that no
later save grows with them. An item is then held by the session, dropped, or queued (a conversation's items not sent
yet): :class:`Places` says where.
"""
from __future__ import annotations

from collections.abc import Iterable

import attrs

from ..errors import StoreCorrupt
from ..jsontypes import JSONObject
from ..manager.request import OnDrop
from ..manager.table import View
from ..messages import Message, json_copy
from ..session import Delta
from .chain_state import Dropped, DroppedMessage, Note, SessionState, dropped_messages, state_of
from .item_names import count_below
from .items import Serials


class Places:
    """Where the items of a session are (``state``: its state, read from ``v``). Items are numbered from 0 as they
    are listed: the session's messages after its head and the dropped items, in their order, then the queue."""

    def __init__(self, v: View, state: SessionState) -> None:
        self.v, self.state = v, state
        self.serials = Serials(state.deleted_items)
        removed = self.serials.removed
        #: the dropped items as (first index, how many), in order
        self.runs: list[tuple[int, int]] = []
        for span in state.dropped:
            lo, hi = count_below(removed, span.first_serial), count_below(removed, span.end_serial)
            if hi > lo:  # all of it may have been deleted since
                self.runs.append((lo, hi - lo))
        self.dropped = sum(count for _, count in self.runs)
        self.held = v.messages - state.head
        self._messages: dict[int, Message] | None = None

    @property
    def count(self) -> int:
        """How many items there are."""
        return self.held + self.dropped + len(self.state.queue)

    def held_below(self, n: int) -> int:
        """How many of the first ``n`` items (none of them queued) the session holds."""
        return n - sum(min(max(n - lo, 0), count) for lo, count in self.runs)

    def index_of(self, position: int) -> int:
        """The item that the session's message ``position`` (counted after its head) is."""
        i = position
        for lo, count in self.runs:
            if lo <= i:
                i += count
        return i

    def held_at(self, i: int) -> int | None:
        """The session's message that item ``i`` is (its index among all the session's messages), None: it is
        dropped or queued."""
        if i >= self.held + self.dropped or any(lo <= i < lo + count for lo, count in self.runs):
            return None
        return self.state.head + self.held_below(i)

    def message(self, i: int) -> Message:
        """The message of item ``i`` (a copy where the session holds it)."""
        if i >= self.held + self.dropped:
            return self.state.queue[i - self.held - self.dropped]
        at = self.held_at(i)
        if at is not None:
            return self.v.slice(at, at + 1)[0]
        if self._messages is None:
            self._messages = dropped_messages(self.v)
        serial = self.serials.serial(i)
        if serial not in self._messages:
            raise StoreCorrupt(f"session {self.v.session.session_id}: no note keeps the message of its dropped item "
                               f"{serial}: delete it")
        return self._messages[serial]

    def spans(self, runs: Iterable[tuple[int, int]]) -> tuple[Dropped, ...]:
        """Runs of items (first index, how many) as the state's spans, merged where they meet."""
        merged: list[list[int]] = []
        for lo, count in sorted(runs):
            if merged and lo <= merged[-1][0] + merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], lo + count - merged[-1][0])
            elif count:
                merged.append([lo, count])
        serial = self.serials.serial
        return tuple(Dropped(serial(lo), serial(lo + count - 1) + 1) for lo, count in merged)


def recording(note: JSONObject) -> OnDrop:
    """The turn's ``on_drop`` (``note``: the one it was given): the state names the dropped items, the note keeps
    their messages."""

    def on_drop(v: View, delta: Delta) -> tuple[JSONObject, JSONObject]:
        state = state_of(v)  # the session as the turn dropped from it; its state as it was before
        assert state is not None  # noqa: S101 - the manager checked the session's kind (ours) before the turn
        places = Places(v, state)
        indices = [places.index_of(delta.removed_at - state.head + j) for j in range(delta.dropped)]
        runs = [*places.runs, *((i, 1) for i in indices)]
        kept = Note.from_json(note)
        messages = (DroppedMessage(places.serials.serial(i), m) for i, m in zip(indices, delta.removed, strict=True))
        return (attrs.evolve(state, dropped=places.spans(runs)).to_json(),
                attrs.evolve(kept, dropped=(*kept.dropped, *messages)).to_json())

    return on_drop


def inherited(v: View, n: int) -> tuple[int, tuple[Dropped, ...], tuple[DroppedMessage, ...]]:
    """A branch holding the first ``n`` items of this session (a response's): how many of the session's messages
    it copies, and of the items the session dropped, the spans of its state (a branch's serials are its indices)
    and their messages, which its first note keeps."""
    state = state_of(v)
    assert state is not None  # noqa: S101 - the caller read a response of this session
    places = Places(v, state)
    runs = [(lo, min(count, n - lo)) for lo, count in places.runs if lo < n]
    messages = tuple(DroppedMessage(i, json_copy(places.message(i)))
                     for lo, count in runs for i in range(lo, lo + count))
    return state.head + places.held_below(n), tuple(Dropped(lo, lo + count) for lo, count in runs), messages
