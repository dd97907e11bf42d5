"""One conversation as a template sees it: normalised messages plus render options."""
from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any

import attrs

from ..messages import Message, text


def as_date(value: _dt.date | None) -> _dt.date | None:
    """The day templates print: a ``datetime`` counts as its date (``date.isoformat`` must round-trip)."""
    return value.date() if isinstance(value, _dt.datetime) else value


@attrs.define(slots=True)
class Chat:
    """One conversation as a template sees it: normalised messages plus render options.

    A session keeps one ``Chat`` and appends to ``messages``; the cached round
    numbers grow with it, so asking for the round of the newest message is O(1).
    """

    messages: list[Message]
    # Any here: tools and template keywords as the chat template reads them: any value Jinja may read
    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True
    date: _dt.date | None = attrs.field(default=None, converter=as_date)
    kwargs: Mapping[str, Any] = attrs.field(factory=dict)
    _rounds: list[int] = attrs.field(factory=list, repr=False)

    def role(self, i: int) -> str | None:
        """Role of message ``i``, or None outside the conversation."""
        if 0 <= i < len(self.messages):
            role: str = self.messages[i]["role"]
            return role
        return None

    def round(self, i: int) -> int:
        """1-based number of user turns up to and including message ``i``."""
        rounds = self._rounds
        if len(rounds) > len(self.messages):  # messages were dropped (undo/truncate)
            del rounds[len(self.messages):]
        while len(rounds) <= i:
            j = len(rounds)
            prev = rounds[-1] if rounds else 0
            rounds.append(prev + (self.messages[j]["role"] == "user"))
        return rounds[i]

    def forget_rounds(self) -> None:
        """Drop cached round numbers (messages were removed before the end)."""
        self._rounds.clear()

    def today(self) -> _dt.date:
        return self.date or _dt.date.today()

    def text(self, i: int, field: str = "content") -> str:
        return text(self.messages[i], i, field)
