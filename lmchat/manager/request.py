"""One turn, asked for: what every turn method of the session manager takes, from the route down to the turn.

A :class:`TurnRequest` is built once, where the request is read (an HTTP
route, a caller's code), and carried unchanged to where each of its fields
is used; no layer in between unpacks it into parameters or a kwargs dict.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, TypeAlias

import attrs

from ..backends.base import SamplingParams
from ..errors import ConfigError, SessionKindMismatch
from ..jsontypes import JSONObject
from ..session import Delta, Session
from .table import View

if TYPE_CHECKING:
    from .oneoff import OneOff


class AnyKind:
    """:attr:`TurnRequest.kind`'s default: a turn on a session of any kind."""

    def __repr__(self) -> str:
        return "ANY_KIND"


#: see :attr:`TurnRequest.kind`
ANY_KIND = AnyKind()

def check_kind(session_id: str, extra: Mapping[str, object] | None, wanted: str | None | AnyKind) -> None:
    """Refuse a change of ``wanted``'s API (a turn, an end) on a session whose ``extra`` says another API keeps
    records of it (:attr:`TurnRequest.kind`); :data:`ANY_KIND` takes any session."""
    held = (extra or {}).get("kind")
    if not isinstance(wanted, AnyKind) and held != wanted:
        raise SessionKindMismatch(session_id, kind=None if held is None else str(held), wanted=wanted)


#: what a turn runs on (:attr:`TurnRequest.session`) and ``SessionManager.cancel`` names: a stored session's id, or
#: a one-off's handle (:class:`~.oneoff.OneOff`)
Target: TypeAlias = "str | OneOff"

#: what an :attr:`TurnRequest.edit` returns: replacements of the session and its ``extra`` (None keeps one), or None
Edit = Callable[[View], tuple[Session | None, dict[str, object] | None] | None]
#: what an :attr:`TurnRequest.on_drop` returns: replacements of the session's ``extra`` and of the turn's ``note``
#: (None keeps one)
OnDrop = Callable[[View, Delta], tuple[dict[str, object] | None, dict[str, object] | None]]


def _messages(value: Iterable[Mapping[str, object]] | None) -> tuple[Mapping[str, object], ...] | None:
    return None if value is None else tuple(value)


def _stop(value: str | Iterable[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


@attrs.frozen
class TurnRequest:
    """One turn: append ``messages`` to ``session``, stream the answer, commit and save it.

    ``session``: a session's id, or a :class:`~.oneoff.OneOff` (``SessionManager.oneoff``), whose turn saves
    nothing. ``history`` instead of ``messages``: the whole conversation as an OpenAI client resends it (with
    its ``tools``); the turn is what the session does not hold yet, or the session is replaced by it (see
    :mod:`.history`); a missing session is created. ``params``: sampling over the template's (a mapping of
    :class:`SamplingParams` fields, or the whole of them); ``stop`` adds stop strings; ``max_new_tokens``: the
    answer's budget. ``owner``: whose session (see :mod:`lmchat.manager.core`). ``create``: a session id that
    names no session creates it (LMDeploy clients choose their ids). ``idempotency_key``: a retry of the turn
    that last committed with this key returns that turn's result instead of running again. ``expect``: run only
    on this store version of the session, else ``SessionMoved`` (a caller that read the session decides from a
    state that is still the session's). ``edit(view)``: the session (and ``extra``) the turn starts from, as
    replacements, either one None to keep it (e.g. a copy with another system prompt, made with
    :func:`lmchat.session.edits.restored`, so that its delta resets): they replace the session only if the
    turn starts, and are saved with it (a caller that decided the edit from what it read passes it as data: a
    :class:`~.frame.Frame`). ``note``: a JSON object appended to the session's notes when the turn
    is saved, in the same compare-and-set, with the turn's counts under ``"turn"`` (:func:`lmchat.turns.result.
    record_of` with ``chars``, the answer's length, instead of its text). ``on_drop(view, delta)``: called when
    the overflow policy dropped messages to fit the turn (``delta.removed``, which the session no longer holds;
    ``view``: the session after the drop, with the ``extra`` the turn started from); the ``extra`` and ``note``
    it returns replace the session's and the turn's, saved with the turn (a caller keeping records of the
    session's messages keeps the dropped ones that way). ``kind``: the session's
    ``extra["kind"]`` the turn requires (None: a session with no kind, as chat completions and the interactive
    API make); a session of another kind raises ``SessionKindMismatch`` and nothing changes (the default,
    :data:`ANY_KIND`: any session).
    """

    session: Target
    messages: tuple[Mapping[str, object], ...] | None = attrs.field(default=None, converter=_messages)
    history: list[Mapping[str, object]] | None = attrs.field(default=None, kw_only=True)
    tools: list[JSONObject] | None = attrs.field(default=None, kw_only=True)
    params: SamplingParams | Mapping[str, object] | None = attrs.field(default=None, kw_only=True)
    stop: tuple[str, ...] = attrs.field(default=(), converter=_stop, kw_only=True)
    max_new_tokens: int | None = attrs.field(default=None, kw_only=True)
    owner: str | None = attrs.field(default=None, kw_only=True)
    create: bool = attrs.field(default=False, kw_only=True)
    idempotency_key: str | None = attrs.field(default=None, kw_only=True)
    expect: int | None = attrs.field(default=None, kw_only=True)
    edit: Edit | None = attrs.field(default=None, kw_only=True)
    note: dict[str, object] | None = attrs.field(default=None, kw_only=True)
    on_drop: OnDrop | None = attrs.field(default=None, kw_only=True)
    kind: str | None | AnyKind = attrs.field(default=ANY_KIND, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.messages is not None and self.history is not None:
            raise ConfigError("a turn takes new messages or the whole history, not both", field="history")

    @property
    def creates(self) -> bool:
        """Whether a session id that names no session is created by this turn (``create``, or a history)."""
        return self.create or self.history is not None
