"""``SessionPolicy``: a session's limits and what it does at them, one record a manager can apply to all its
sessions (``SessionManager(session_defaults=...)``, ``lmchat serve``'s flags)."""
from __future__ import annotations

from collections.abc import Callable

import attrs

from .. import validation
from .overflow import POLICIES, ROOM, check_room

#: what a session does when the engine's ids of an answer differ from their canonical encoding
DRIFT_POLICIES = ("rewind", "reset", "keep")


def _among(allowed: tuple[str, ...]) -> Callable[[object, attrs.Attribute[str], str], None]:
    def check(_: object, attribute: attrs.Attribute[str], value: str) -> None:
        validation.one_of(value, allowed, attribute.name)  # the same ConfigError, naming the field

    return check


@attrs.frozen
class SessionPolicy:
    """``session_len``: the most the engine may hold (tokens with a tokenizer, else characters; None: the
    template's, enforced in characters only when given). ``overflow``: what a turn that does not fit does
    (:mod:`.overflow`), leaving ``overflow_room`` of ``session_len`` free after a drop. ``max_new_tokens``:
    the answer's budget reserved in ``session_len`` (0: none). ``injection``: what a message's text that
    spells the template's markers does (docs/security.md). ``max_message_chars``: the longest message text
    (None: no limit). ``drift``: what an answer whose ids are not their text's canonical encoding does."""

    session_len: int | None = None
    overflow: str = attrs.field(default="error", validator=_among(POLICIES))
    overflow_room: float = attrs.field(default=ROOM, converter=check_room)
    max_new_tokens: int = 0
    injection: str = attrs.field(default="split", validator=_among(validation.INJECTION_POLICIES))
    max_message_chars: int | None = validation.DEFAULT_MAX_CHARS
    drift: str = attrs.field(default="rewind", validator=_among(DRIFT_POLICIES))
