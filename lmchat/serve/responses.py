"""OpenAI's Responses API over sessions: ``POST /v1/responses``, ``GET``/``DELETE /v1/responses/ID``,
``GET /v1/responses/ID/input_items``.

Each response is a turn of a session (:mod:`.responses_turn` decides which, and runs it):
a chain of ``previous_response_id`` is one session extended a delta at a
time, a branch from an older response is a fork, ``conversation`` appends to
that conversation's session, ``store: false`` runs on a one-off session (in
memory for its turn only: nothing is stored, so ``GET`` of its id is a 404,
as OpenAI answers for a response it did not store). The request is checked
whole before any session is read or made; a session made for a request whose
turn does not start is ended again.
"""
from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Literal, TypeVar

import attrs
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..backends.base import special_tokens
from ..errors import InvalidMessages, SessionBusy, SessionLengthExceeded, SessionNotFound, SnapshotError, StoreCorrupt
from ..jsontypes import JSONObject
from ..manager import SessionManager, TurnResult, TurnStream
from ..manager.table import View
from ..tools.answer_constraint import for_answer
from ..validation import validate_tools
from . import chains
from .chain_state import state_of
from .deps import blocking, end_session, model_named, owner, text_limit
from .formats import text_constraint, tool_constraint
from .idempotency import releasing
from .item_names import Names, count_below
from .items import (
    Serials,
    answer_items,
    answer_parts,
    bad,
    input_messages,
    message_item,
    message_items,
    page,
    parse_item_id,
    parse_response_id,
    response_id,
    session_tools,
)
from .request_turns import parsed_of
from .responses_model import ResponsesRequest, input_error, response_object, turn_of
from .responses_sse import Events, response_events
from .responses_turn import ResponsesTurn, Started, start
from .truncation import Places
from .wire import Deleted, Item, ItemPage, ResponseObject

router = APIRouter()
T = TypeVar("T")


def overflow_for(mgr: SessionManager, truncation: str) -> str:
    """``disabled``: a turn that does not fit is an error; ``auto``: the server's dropping policy (truncate)."""
    if truncation == "disabled":
        return "error"
    configured = mgr.session_defaults.overflow
    return configured if configured in ("truncate", "shift") else "truncate"


@router.post("/v1/responses")
async def create_response(body: ResponsesRequest, request: Request, who: str | None = Depends(owner)) -> Response:
    state = request.app.state
    mgr: SessionManager = state.manager
    checked = body.checked(text_limit(mgr))
    # before any session is read or made: a format the backend cannot enforce changes nothing
    constraint, text_format = await text_constraint(body.text, mgr.backend, body.max_output_tokens)
    messages = input_messages(body.input)
    tools = session_tools(body.tools)
    try:
        validate_tools(tools)
    except InvalidMessages as exc:
        raise bad("tools", str(exc)) from None
    want = chains.Want(body.instructions, tools, checked["thinking"], overflow_for(mgr, body.truncation),
                       checked["effort"])
    template = mgr.default_template
    forced = await tool_constraint(body.tool_choice, tools, template, mgr.backend, parallel=body.parallel_tool_calls,
                                   max_tokens=body.max_output_tokens, response=constraint, chat=False)
    # a reasoning block stays free text
    constraint = for_answer(forced or constraint, template, "text.format", special_tokens(mgr.backend))
    key = request.headers.get("idempotency-key") if body.store else None
    turn = ResponsesTurn(body, who, checked["conversation"], want, messages, model_named(state, body.model),
                         body.fields(template, text_format), key, constraint)
    release = await state.inflight.hold(who, key)  # a retry waits here for its first attempt to be saved
    streaming = False  # a turn's stream lets go of the key once it ends
    try:
        if key is not None:
            stored = await blocking(chains.replayed, mgr, who, key, body.previous_response_id,
                                    checked["conversation"])
            if stored is not None:  # an earlier attempt of this request landed: answer it, do not run it again
                return _replay(await blocking(_found, mgr, stored, who, _response_reader(mgr)), body.stream)
        response = _respond(mgr, turn, await start(mgr, turn, request.receive), release)
        streaming = body.stream
        return response
    except (InvalidMessages, SessionLengthExceeded) as exc:  # the request's input[i], not the session's messages
        raise input_error(exc, body.input) from None
    finally:
        if not streaming:
            release()


def _respond(mgr: SessionManager, turn: ResponsesTurn, started: Started, release: Callable[[], None]) -> Response:
    """The turn's response: its JSON object, or its stream (which lets go of the request's key once it ends)."""
    plan, whole, body = started.plan, started.whole, turn.body
    rid, serial, parse = response_id(plan.sid, plan.k), plan.serial + len(turn.messages), body.tool_choice != "none"
    tokens = mgr.tokenizer is not None

    def finish(result: TurnResult, output: list[Item]) -> ResponseObject:
        return response_object(rid, attrs.evolve(whole, turn=turn_of(result)), plan.conversation, output,
                               tokens=tokens)

    if isinstance(started.turn, TurnStream):  # body.stream
        base = response_object(rid, whole, plan.conversation, [], tokens=tokens)
        events = response_events(started.turn, base, sid=plan.sid, serial=serial, parse=parse, finish=finish)
        return StreamingResponse(releasing(events, release), media_type="text/event-stream")
    result = started.turn
    status = "completed" if result.finish_reason == "stop" else "incomplete"
    if parse:
        parsed = parsed_of(result)
        calls = parsed.tool_calls if result.finish_reason == "stop" else []
        output = answer_items(plan.sid, serial, parsed.content, parsed.reasoning_content, calls, status)
    else:
        output = [message_item(plan.sid, serial, result.text, status)]
    return JSONResponse(finish(result, output))


def _replay(response: ResponseObject, stream: bool) -> Response:
    """A stored response as a retry gets it: the JSON object, or its stream's first and last events."""
    if not stream:
        return JSONResponse(response)
    events = Events()
    opening: ResponseObject = {**response, "status": "in_progress", "output": [], "usage": None}

    async def replay() -> AsyncIterator[str]:
        yield events("response.created", response=opening)
        yield events("response.in_progress", response=opening)
        yield events("response.completed" if response["status"] == "completed" else "response.incomplete",
                     response=response)

    return StreamingResponse(replay(), media_type="text/event-stream")


# ---------------------------------------------------------------------------------------------- reads
def _found(mgr: SessionManager, rid: str, who: str | None, read: Callable[[str, int], Callable[[View], T | None]]
           ) -> T:
    parsed = parse_response_id(rid)
    try:
        got = mgr.inspect(parsed[0], read(*parsed), who) if parsed else None
    except SessionNotFound:
        got = None
    if got is None:
        raise chains.not_found("response", rid, "response_id")
    return got


def _response_reader(mgr: SessionManager) -> Callable[[str, int], Callable[[View], ResponseObject | None]]:
    def reader(sid: str, k: int) -> Callable[[View], ResponseObject | None]:
        def read(v: View) -> ResponseObject | None:
            info = chains.read_response(k)(v)
            if info is None:
                return None
            serial = info.note.end_serial - 1
            index = Serials(info.state.deleted_items).index(serial)
            output: list[Item] = []
            places = Places(v, info.state)
            if index is not None and index < places.held + places.dropped:
                message = places.message(index)
                turn = info.note.turn
                status = "completed" if turn and turn.get("finish_reason") == "stop" else "incomplete"
                output = answer_items(sid, serial, *answer_parts(message, v.session.template, v.session.tools),
                                      status=status)
            return response_object(response_id(sid, k), *chains.expanded(v, sid, k), output,
                                   tokens=mgr.tokenizer is not None)
        return read
    return reader


@router.get("/v1/responses/{rid}")
async def get_response(rid: str, request: Request, who: str | None = Depends(owner)) -> JSONResponse:
    mgr: SessionManager = request.app.state.manager
    return JSONResponse(await blocking(_found, mgr, rid, who, _response_reader(mgr)))


@router.delete("/v1/responses/{rid}", response_model=None)
async def delete_response(rid: str, request: Request, who: str | None = Depends(owner)) -> Deleted:
    mgr: SessionManager = request.app.state.manager
    parsed = parse_response_id(rid)
    if parsed is None:
        raise chains.not_found("response", rid, "response_id")
    sid, k = parsed

    def change(v: View) -> tuple[None, JSONObject]:
        info = chains.read_response(k)(v)
        if info is None:
            raise chains.not_found("response", rid, "response_id")
        deleted = tuple(sorted({*info.state.deleted_responses, k}))
        return None, attrs.evolve(info.state, deleted_responses=deleted).to_json()

    def gone(v: View) -> bool:
        state = state_of(v)
        return state is not None and state.kind == "responses" and len(state.deleted_responses) == len(v.notes)

    def delete() -> None:
        try:
            try:
                mgr.update(sid, change, who)
            except (StoreCorrupt, SnapshotError):  # nothing of it can be read: its whole session goes
                end_session(mgr, sid, who)
                return
            gone_all = mgr.inspect(sid, gone, who)
            if gone_all:  # every response of the chain is deleted: so is its session
                with contextlib.suppress(SessionBusy):
                    mgr.end(sid, who)
        except SessionNotFound:
            raise chains.not_found("response", rid, "response_id") from None

    await blocking(delete)
    return {"id": rid, "object": "response.deleted", "deleted": True}


def walk(v: View, sid: str, lo: int, hi: int, desc: bool, after: str | None) -> Iterator[Item]:
    """The items of messages ``[lo, hi)`` (item indices: the session's messages after its head, then a
    conversation's queue), in order or reversed, from the message of ``after`` on; named as
    :class:`~.item_names.Names` says (a branch's first items keep their ancestry's ids)."""
    state = state_of(v)
    assert state is not None  # noqa: S101 - the caller read a response of this session
    names, places = Names(sid, state), Places(v, state)
    indices = range(hi - 1, lo - 1, -1) if desc else range(lo, hi)
    if after is not None:
        found = parse_item_id(after)
        at = names.index(*found) if found else None
        if at is None or not lo <= at < hi:
            return
        indices = range(at, lo - 1, -1) if desc else range(at, hi)
    for i in indices:
        items = message_items(*names.of(i), places.message(i), v.session.template, v.session.tools)
        yield from reversed(items) if desc else items


#: OpenAI's ``include`` values (``ResponseIncludable``): accepted, none adds anything to a text model's items
INCLUDABLE = ("file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
              "message.input_image.image_url", "computer_call_output.output.image_url",
              "code_interpreter_call.outputs", "reasoning.encrypted_content", "message.output_text.logprobs")


@router.get("/v1/responses/{rid}/input_items")
async def input_items(rid: str, request: Request, limit: int = Query(20, ge=1, le=100),
                      order: Literal["asc", "desc"] = "desc", after: str | None = None,
                      who: str | None = Depends(owner)) -> JSONResponse:
    """The items the response was generated from, as OpenAI lists them: its whole ancestry (the chain of
    ``previous_response_id``, or the conversation, before it, their answers included) and its own input."""
    # the openai client sends a list as ``include[]=...``; a hand-written query may say ``include=...``
    query = request.query_params
    for i, value in enumerate(query.getlist("include[]") + query.getlist("include")):
        if value not in INCLUDABLE:
            raise bad(f"include[{i}]", f"{value[:100]!r} is not one of {', '.join(INCLUDABLE)}")

    def reader(sid: str, k: int) -> Callable[[View], ItemPage | None]:
        def read(v: View) -> ItemPage | None:
            info = chains.read_response(k)(v)
            if info is None:
                return None
            # everything before the response's answer: the session is the response's ancestry up to it
            hi = count_below(info.state.deleted_items, info.note.end_serial - 1)
            return page(walk(v, sid, 0, hi, order == "desc", after), limit, after)
        return read

    return JSONResponse(await blocking(_found, request.app.state.manager, rid, who, reader))
