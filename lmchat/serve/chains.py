"""Response ids as session states: reading them, a turn's :class:`Plan` and what it notes.

A response is the state of a session after one of its turns: ``resp_<sid>_<k>``
is the ``k``-th noted turn of session ``sid`` (:mod:`.items`), and its
:class:`~.chain_state.Note` (``stream_turn(note=)``, saved in the turn's
compare-and-set) holds where its items are and what the request asked. Beside
the notes, the session's :class:`~.chain_state.SessionState` (its ``extra``)
says what kind of session it is, whether its first message is a system prompt
that is no item, and a conversation's queue and deletions. A branch's
``origin`` names the items it was forked with (:class:`.item_names.Names`): they keep the
ids they had in the chain or conversation they came from, so that a
response's input items (its whole ancestry) read the same on every branch.

``previous_response_id`` naming the latest response of a ``responses``
session extends it with the new input (a delta, O(turn)); naming an older
one, or one of a conversation, forks the session at that response's last
message (the branch's first delta resets). With ``store: false`` the new
session, or the branch, is a one-off (``SessionManager.oneoff``): held in
memory for the turn only, never stored, so its response can never be read
or continued. Which of these a request gets is decided in :mod:`.responses_turn`. Large fields that rarely change
(``model``, the request's fields, ``instructions``, ``tools``) are written in a note when they change and
referenced (:class:`~.chain_state.Same`) otherwise.
"""
from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

import attrs

from ..errors import SessionNotFound
from ..jsontypes import JSONObject
from ..manager import SessionManager
from ..manager.frame import Frame
from ..manager.request import Target
from ..manager.table import View
from ..messages import Message
from ..templates.base import BaseTemplate
from .chain_state import (
    CARRIED,
    Carried,
    DroppedMessage,
    Note,
    Same,
    SessionState,
    note_of,
    resolve,
    resolved,
    state_of,
)
from .errors import ApiError
from .item_names import count_below
from .items import Serials, conversation_id, parse_conversation_id, parse_response_id, response_id
from .truncation import Places
from .wire import Tools

_SWITCH: dict[str, bool] = {}
T = TypeVar("T")


def new_sid(key: str | None = None, who: str | None = None, branch_of: str | None = None) -> str:
    """A new chain's session id: random, or derived from the request's Idempotency-Key and its owner (and, for
    a branch, the response it branches from), so that a retry finds the session its first attempt made."""
    if key is None:
        return uuid.uuid4().hex
    seed = f"{who or ''}\0{key}" + (f"\0{branch_of}" if branch_of is not None else "")
    return hashlib.sha256(seed.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def replayed(mgr: SessionManager, who: str | None, key: str | None, previous: str | None,
             conversation: str | None) -> str | None:
    """The response an earlier attempt of this request (the same Idempotency-Key) stored, or None.

    It is the one right after ``previous`` (in its chain, or first in the branch the key made off it), the
    latest of ``conversation``, or the first of the chain the key names; its note holds the key. A retry
    then reads it back instead of running the turn again.
    """
    if key is None:
        return None
    places: list[tuple[str | None, int | None]]
    if conversation is not None:
        places = [(parse_conversation_id(conversation), None)]
    elif previous is not None:
        parsed = parse_response_id(previous)
        places = [(parsed[0], parsed[1] + 1), (new_sid(key, who, branch_of=previous), 0)] if parsed else []
    else:
        places = [(new_sid(key, who), 0)]
    for sid, k in places:
        found = inspected(mgr, sid, _keyed_note(key, k), who) if sid else None
        if sid and found is not None:
            return response_id(sid, found)
    return None


def _keyed_note(key: str, k: int | None) -> Callable[[View], int | None]:
    """A reader: note ``k`` (None: the latest) if it holds ``key`` and its response is not deleted."""

    def read(v: View) -> int | None:
        n, state = len(v.notes) - 1 if k is None else k, state_of(v)
        if state is None or not 0 <= n < len(v.notes) or n in state.deleted_responses:
            return None
        return n if note_of(v, n).idempotency_key == key else None

    return read


def not_found(what: str, value: object, param: str | None) -> ApiError:
    code = {"response": "response_not_found", "conversation": "conversation_not_found", "previous response":
            "previous_response_not_found", "item": "item_not_found"}[what]
    return ApiError(404, f"{what} {str(value)[:200]!r} not found", type="invalid_request_error", param=param,
                    code=code)


def thinking_switch(template: BaseTemplate) -> bool:
    """Whether the template renders ``enable_thinking`` (Qwen3's switch): found by rendering, once per template."""
    name = getattr(template, "name", "")
    if name not in _SWITCH:
        m = [{"role": "user", "content": "x"}]
        try:
            _SWITCH[name] = (template.messages2prompt(m, enable_thinking=False)
                             != template.messages2prompt(m, enable_thinking=True))
        except Exception:  # noqa: BLE001 - a template that refuses the keyword has no switch
            _SWITCH[name] = False
    return _SWITCH[name]


@attrs.frozen
class Want:
    """What a request wants the session's frame to be for its turn (its input aside)."""

    instructions: str | None
    tools: Tools | None
    thinking: bool | None  # None: the template's default
    overflow: str
    #: ``reasoning.effort`` as sent, for a template that takes its level (gpt-oss); None: the template's default
    effort: str | None = None


@attrs.frozen
class Plan:
    """Where a request's turn runs (:mod:`.responses_turn` decides it): the session, the new response's index, its
    first input item's serial, and the session's frame for the turn."""

    #: the stored session's id, or (``store: false``) the one-off the turn runs on, gone with it
    target: Target
    k: int
    serial: int
    frame: Frame  # the turn's edit: the session as the request wants it
    expect: int | None = None  # the version the decision was made on (None: a session made for it)
    #: a conversation's items the model has not seen, sent first
    queued: list[Message] = attrs.field(factory=list)
    #: the carried fields of the session's last note: {"instructions": (k, value), ...}
    last: Carried | None = None
    conversation: str | None = None
    #: a branch's dropped items (those of the items it was made with), whose messages its first note keeps
    dropped: tuple[DroppedMessage, ...] = ()

    @property
    def sid(self) -> str:
        """The session's id (a one-off's random one)."""
        return self.target if isinstance(self.target, str) else self.target.session_id

    @property
    def created(self) -> bool:
        """Made for this request (a new chain, a branch, a one-off): ended if the turn does not start."""
        return self.expect is None


def carried(notes_last: Carried | None, key: str, value: T) -> T | Same:
    """What a new note holds for a carried field: a reference when the last note has the same value."""
    if notes_last is not None and key in notes_last and notes_last[key][1] == value and value is not None:
        return Same(notes_last[key][0])
    return value


# ---------------------------------------------------------------------------------------------- reads
@attrs.frozen
class ResponseAt:
    """Response ``k`` of a session and the session around it, as :func:`read_response` found them."""

    version: int  # the store version read
    note: Note
    state: SessionState
    items: int  # how many items the response's state has (its answer the last)
    messages: int  # how many of the session's messages the response's state holds (dropped items aside)
    stale: bool  # an item its state held was deleted since: it cannot be continued
    latest: bool  # the latest response of an unchanged chain: continuing it extends the session
    last: Carried | None  # the carried fields of the session's last note (:attr:`Plan.last`)
    template: BaseTemplate
    responses: int  # how many responses the session noted


def _last_carried(v: View) -> Carried | None:
    if not v.notes:
        return None
    k = len(v.notes) - 1
    return {key: resolve(v, k, key) for key in CARRIED}


def read_response(k: int) -> Callable[[View], ResponseAt | None]:
    """A reader (for ``mgr.inspect``) of response ``k``: a :class:`ResponseAt`, or None."""

    def read(v: View) -> ResponseAt | None:
        state = state_of(v)
        if state is None or k >= len(v.notes) or k in state.deleted_responses:
            return None
        note = note_of(v, k)
        n = count_below(state.deleted_items, note.end_serial)
        m = state.head + Places(v, state).held_below(n)
        stale = any(cut.stales(k, note.end_serial) for cut in state.cuts)
        latest = state.kind == "responses" and k == len(v.notes) - 1 and v.messages == m and not state.queue
        return ResponseAt(v.version, note, state, n, m, stale, latest, _last_carried(v), v.session.template,
                          len(v.notes))

    return read


@attrs.frozen
class ConversationAt:
    """A conversation as :func:`read_conversation` found it: the store version read, its next response's index
    and first item's serial, its queue, the carried fields of its last note, its template and state."""

    version: int
    k: int
    serial: int
    queue: list[Message]
    last: Carried | None
    template: BaseTemplate
    state: SessionState


def read_conversation(v: View) -> ConversationAt | None:
    state = state_of(v)
    if state is None or state.kind != "conversation":
        return None
    items = Places(v, state).count
    return ConversationAt(v.version, len(v.notes), Serials(state.deleted_items).serial(items), list(state.queue),
                          _last_carried(v), v.session.template, state)


# ---------------------------------------------------------------------------------------------- for planning
def _parsed(previous: str) -> tuple[str, int]:
    """The (session id, index) of a response id known to parse (read from the store already)."""
    parsed = parse_response_id(previous)
    assert parsed is not None  # noqa: S101 - the caller read the response it names
    return parsed


def inspected(mgr: SessionManager, sid: str, read: Callable[[View], T | None], who: str | None) -> T | None:
    try:
        return mgr.inspect(sid, read, who)
    except SessionNotFound:
        return None


def effort_level(effort: str, levels: tuple[str, ...]) -> str:
    """OpenAI's ``reasoning.effort`` as one of a template's levels (gpt-oss: low, medium, high): the same name,
    else the nearest (``minimal`` is the lowest, ``xhigh`` the highest); ``none`` is refused before the turn."""
    if effort in levels:
        return effort
    return levels[0] if effort == "minimal" else levels[-1]


# ---------------------------------------------------------------------------------------------- the turn's note
def note_for(p: Plan, n_input: int, *, model: str, previous: str | None, want: Want, request: JSONObject,
             idempotency_key: str | None = None) -> tuple[JSONObject, Note]:
    """What the turn notes (compact: fields equal to the last note's by reference, the previous response only
    when it is not the chain's previous one), as JSON; and the same note whole, as a response object reads it."""
    whole = Note(p.serial, p.serial + n_input + 1, round(time.time(), 3), idempotency_key or None, previous, model,
                 request, want.instructions, want.tools, dropped=p.dropped)
    chained = previous is None or (p.k and previous == response_id(p.sid, p.k - 1))
    note = attrs.evolve(whole, previous_response_id=None if chained else previous,
                        model=carried(p.last, "model", whole.model), request=carried(p.last, "request", whole.request),
                        instructions=carried(p.last, "instructions", whole.instructions),
                        tools=carried(p.last, "tools", whole.tools))
    return note.to_json(), whole


def expanded(v: View, sid: str, k: int) -> tuple[Note, str | None]:
    """Note ``k`` whole (its carried fields resolved, its previous response named) and the id of the
    conversation it belongs to (None: a chain's)."""
    state, note = state_of(v), resolved(v, k)
    assert state is not None  # noqa: S101 - the caller read note k of a session of ours
    if note.previous_response_id is None and k and state.kind == "responses":
        note = attrs.evolve(note, previous_response_id=response_id(sid, k - 1))
    return note, conversation_id(sid) if state.kind == "conversation" else None
