"""One Responses turn: what the request asks (:class:`ResponsesTurn`), and :func:`start`, which plans and runs it.

Where the turn runs is decided here, and only here, from what the request
names and what the store holds (read with ``SessionManager.inspect``):

* ``conversation``: appended to that conversation's session, its queued items first;
* no ``previous_response_id``: a new chain's session (``store: false``: a one-off);
* the latest response of an unchanged chain: continued, a delta on its session;
* an older response, or one of a conversation: a branch, a fork of its session at that response
  (``store: false``: a one-off copy, which only reads the chain);
* refused: a response or conversation that is not there (404), one whose items were deleted since (409),
  what the session's template cannot do (400).

The decision is made on the version read: the turn runs with ``expect``
(the manager refuses a session that moved since with ``SessionMoved``, and
the turn is planned again) and with the session's frame (instructions,
tools, reasoning switch, overflow policy, a consumed queue) decided here too,
as data (:class:`~lmchat.manager.frame.Frame`) that the manager applies when
the turn starts. A chain's latest response that another request is
continuing (``SessionBusy``) is branched off instead.
"""
from __future__ import annotations

import contextlib

import attrs
from starlette.types import Receive

from ..constraints import Constraint
from ..errors import LmchatError, SessionBusy, SessionExists, SessionMoved
from ..jsontypes import JSONObject
from ..manager import SessionManager, TurnRequest, TurnResult, TurnStream
from ..manager.frame import Frame
from ..messages import Message
from ..templates.base import BaseTemplate
from ..validation import check_tools_supported
from .chain_state import Dropped, DroppedMessage, Note, SessionState
from .chains import (
    Plan,
    ResponseAt,
    Want,
    _parsed,
    effort_level,
    inspected,
    new_sid,
    not_found,
    note_for,
    read_conversation,
    read_response,
)
from .deps import blocking
from .errors import ApiError
from .item_names import Names
from .items import bad, parse_conversation_id, parse_response_id
from .request_turns import run
from .responses_model import ResponsesRequest, check_effort
from .truncation import inherited, recording

#: how often a request re-plans when the session moved under it (another request extended it first)
ATTEMPTS = 4
#: the template keywords a Responses request's reasoning settings own
SWITCHES = ("enable_thinking", "reasoning_effort")


@attrs.frozen
class ResponsesTurn:
    """What a ``POST /v1/responses`` asks of its turn, checked whole before anything is read or made.

    ``conversation``: the conversation's id as checked; ``want``: the frame the session is to have;
    ``messages``: the new input; ``model``, ``fields``: what the response names and echoes; ``key``: the
    Idempotency-Key (stored requests only); ``constraint``: what the answer must match (a format, a forced call).
    """

    body: ResponsesRequest
    who: str | None
    conversation: str | None
    want: Want
    messages: list[Message]
    model: str
    fields: JSONObject
    key: str | None
    constraint: Constraint | None

    def check(self, template: BaseTemplate) -> None:
        """Refuse what the session's template cannot do, before anything is created."""
        check_tools_supported(template, self.want.tools)
        check_effort(template, self.want.thinking)


@attrs.frozen
class Started:
    """A turn that started: where it runs, its note whole (as the response reads it), its stream or result."""

    plan: Plan
    whole: Note
    turn: TurnStream | TurnResult


async def start(mgr: SessionManager, turn: ResponsesTurn, receive: Receive) -> Started:
    """Plan, then start the turn: its stream (primed) or its result; a moved session is planned again, a chain's
    latest response that another request is continuing is branched off."""
    plan = await blocking(plan_for, mgr, turn)
    for attempt in range(ATTEMPTS):
        note, whole = note_for(plan, len(turn.messages), model=turn.model, previous=turn.body.previous_response_id,
                               want=turn.want, request=turn.fields, idempotency_key=turn.key)
        request = _request(turn, plan, note)
        try:
            if not request.messages:
                raise bad("input", "nothing to answer: the input is empty")
            if turn.body.stream:
                return Started(plan, whole, await mgr.astream_turn(request).start())
            return Started(plan, whole, await run(mgr, request, receive))
        except SessionMoved:  # another request changed the session since it was read: decide again
            await _drop(mgr, plan, turn.who)
            if attempt == ATTEMPTS - 1:
                raise
            plan = await blocking(plan_for, mgr, turn)
        except SessionBusy:  # the chain's latest response is being continued by another request: branch off
            await _drop(mgr, plan, turn.who)
            previous = turn.body.previous_response_id
            if plan.created or previous is None or attempt == ATTEMPTS - 1:
                raise
            plan = await blocking(_branch_after_busy, mgr, turn, previous)
        except BaseException:
            await _drop(mgr, plan, turn.who)
            raise
    raise AssertionError("unreachable")  # every attempt returns or raises


def _request(turn: ResponsesTurn, plan: Plan, note: JSONObject) -> TurnRequest:
    body = turn.body
    return TurnRequest(
        plan.target, plan.queued + turn.messages, owner=turn.who, expect=plan.expect, note=note,
        params={"temperature": body.temperature, "top_p": body.top_p, "constraint": turn.constraint},
        max_new_tokens=body.max_output_tokens, edit=plan.frame, on_drop=recording(note),
        kind="responses" if plan.conversation is None else "conversation")


async def _drop(mgr: SessionManager, plan: Plan, who: str | None) -> None:
    """A session made for a request whose turn did not start goes again (a one-off is gone already)."""
    if plan.created and isinstance(plan.target, str):
        with contextlib.suppress(LmchatError):
            await blocking(mgr.end, plan.sid, who)


# ---------------------------------------------------------------------------------------------- planning
def plan_for(mgr: SessionManager, turn: ResponsesTurn) -> Plan:
    """Where the request's turn runs (blocking: call it from a worker)."""
    who, want, previous = turn.who, turn.want, turn.body.previous_response_id
    if turn.conversation is not None:
        sid = parse_conversation_id(turn.conversation)
        info = inspected(mgr, sid, read_conversation, who) if sid else None
        if sid is None or info is None:
            raise not_found("conversation", turn.conversation, "conversation")
        turn.check(info.template)
        return Plan(sid, info.k, info.serial, _frame(mgr, want, info.template, info.state, bool(info.queue)),
                    info.version, queued=info.queue, last=info.last, conversation=turn.conversation)
    if previous is None:
        template = mgr.default_template
        turn.check(template)
        head = want.instructions is not None or template.default_system is not None
        state = SessionState("responses", system_head=head)
        frame = _frame(mgr, want, template, state)
        if not turn.body.store:
            oneoff = mgr.oneoff(who, system=want.instructions, tools=want.tools, extra=state.to_json())
            return Plan(oneoff, 0, 0, frame)
        sid = mgr.create(new_sid(turn.key, who), who, system=want.instructions, tools=want.tools,
                         extra=state.to_json())
        return Plan(sid, 0, 0, frame)
    parsed = parse_response_id(previous)
    found = inspected(mgr, parsed[0], read_response(parsed[1]), who) if parsed else None
    if parsed is None or found is None:
        raise not_found("previous response", previous, "previous_response_id")
    if found.stale:
        raise ApiError(409, f"response {previous!r}: items of its conversation were deleted since: its state is "
                            "gone", param="previous_response_id", code="response_state_gone")
    turn.check(found.template)
    if not turn.body.store:
        return _aside(mgr, turn, previous, found)
    if found.latest:
        return Plan(parsed[0], found.responses, found.note.end_serial, _frame(mgr, want, found.template, found.state),
                    found.version, last=found.last)
    return _branch(mgr, turn, previous, found)


def _frame(mgr: SessionManager, want: Want, template: BaseTemplate, state: SessionState,
           consume_queue: bool = False) -> Frame:
    """The session's frame for the turn as the request wants it (``state``: the session's, as planned on): its
    system prompt (the instructions, else the template's default where the session opens with one), tools,
    reasoning switch or level and overflow policy, and a conversation's queue emptied (its items are the turn's
    first messages)."""
    system = want.instructions
    if system is None and state.system_head:
        system = template.default_system
    levels = template.reasoning_efforts
    switches: dict[str, str | bool] = {}
    if want.effort is not None and levels:
        switches["reasoning_effort"] = effort_level(want.effort, levels)
    elif want.thinking is not None:
        switches["enable_thinking"] = want.thinking
    kept = attrs.evolve(state, queue=()) if consume_queue and state.queue else None
    reframed = attrs.evolve(kept or state, system_head=system is not None)
    return Frame(system, state.system_head, want.tools, switches, SWITCHES, want.overflow,
                 None if kept is None else kept.to_json(), reframed.to_json(), mgr.tokenizer)


def _aside(mgr: SessionManager, turn: ResponsesTurn, previous: str, info: ResponseAt) -> Plan:
    """A ``store: false`` continuation of the response ``previous``: a one-off copy of its session up to that
    response (the stored chain is only read)."""
    sid = _parsed(previous)[0]
    state = SessionState("responses", system_head=info.state.system_head)
    oneoff = mgr.oneoff(turn.who, extra=state.to_json(), parent=sid, at=info.messages)
    return Plan(oneoff, 0, info.items, _frame(mgr, turn.want, info.template, state))


def _branch(mgr: SessionManager, turn: ResponsesTurn, previous: str, info: ResponseAt) -> Plan:
    """A new session holding the conversation up to the response ``previous`` (``info`` describes it); with an
    Idempotency-Key its id derives from the key, so that a retry finds it (:func:`~.chains.replayed`). The items
    its chain dropped stay dropped on the branch: it holds the messages the chain's session still holds."""
    who, sid = turn.who, _parsed(previous)[0]
    origin = Names(sid, info.state).runs(info.items)
    at, spans, dropped = info.messages, tuple[Dropped, ...](), tuple[DroppedMessage, ...]()
    if info.state.dropped:  # their messages are read where the session is read again: the fork point with them
        at, spans, dropped = mgr.inspect(sid, lambda v: inherited(v, info.items), who)
    state = SessionState("responses", system_head=info.state.system_head, origin=origin, dropped=spans)
    try:
        branch = mgr.fork(sid, new_sid(turn.key, who, branch_of=previous), who, at=at, extra=state.to_json())
    except SessionExists:  # an earlier attempt made the branch but its turn never landed: start another
        branch = mgr.fork(sid, new_sid(), who, at=at, extra=state.to_json())
    return Plan(branch, 0, info.items, _frame(mgr, turn.want, info.template, state), dropped=dropped)


def _branch_after_busy(mgr: SessionManager, turn: ResponsesTurn, previous: str) -> Plan:
    """A chain's latest response is being continued by another request: this one branches off it."""
    sid, k = _parsed(previous)
    info = inspected(mgr, sid, read_response(k), turn.who)
    if info is None:
        raise not_found("previous response", previous, "previous_response_id")
    return _branch(mgr, turn, previous, info)
