"""OpenAI's Responses API over sessions: ``POST /v1/responses``, ``GET``/``DELETE /v1/responses/ID``,
``GET /v1/responses/ID/input_items``.

Each response is a turn of a session (:mod:`.chains` says which and why):
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
from typing import Any, Literal, TypeVar

import attrs
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..backends.base import special_tokens
from ..constraints import Constraint
from ..manager import SessionManager, TurnRequest, TurnResult, TurnStream
from ..manager.table import View
from ..errors import (InvalidMessages, LmchatError, SessionBusy, SessionLengthExceeded, SessionMoved, SessionNotFound,
                      SnapshotError, StoreCorrupt)
from ..templates.base import BaseTemplate
from ..tools.answer_constraint import for_answer
from ..validation import check_tools_supported, validate_tools
from . import chains
from .chain_state import Note, state_of
from .deps import blocking, end_session, model_named, owner, text_limit
from .formats import text_constraint, tool_constraint
from .idempotency import releasing
from .item_names import Names, count_below
from .items import (Serials, answer_items, answer_parts, bad, input_messages, message_item, message_items, page,
                    parse_item_id, parse_response_id, response_id, session_tools)
from .request_turns import parsed_of, run
from .responses_model import ResponsesRequest, check_effort, input_error, response_object, turn_of
from .responses_sse import Events, response_events
from .truncation import Places, recording

router = APIRouter()
#: how often a request re-plans when the session moved under it (another request extended it first)
ATTEMPTS = 4
T = TypeVar("T")


def overflow_for(mgr: SessionManager, truncation: str) -> str:
    """``disabled``: a turn that does not fit is an error; ``auto``: the server's dropping policy (truncate)."""
    if truncation == "disabled":
        return "error"
    configured = mgr.session_defaults.get("overflow")
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

    def check(template: BaseTemplate) -> None:
        check_tools_supported(template, tools)
        check_effort(template, want.thinking)

    template = mgr.default_template
    forced = await tool_constraint(body.tool_choice, tools, template, mgr.backend, parallel=body.parallel_tool_calls,
                                   max_tokens=body.max_output_tokens, response=constraint, chat=False)
    # a reasoning block stays free text
    constraint = for_answer(forced or constraint, template, "text.format", special_tokens(mgr.backend))
    fields = body.fields(template, text_format)
    model = model_named(state, body.model)
    key = request.headers.get("idempotency-key") if body.store else None
    release = await state.inflight.hold(who, key)  # a retry waits here for its first attempt to be saved
    streaming = False  # a turn's stream lets go of the key once it ends
    try:
        if key is not None:
            stored = await blocking(chains.replayed, mgr, who, key, body.previous_response_id,
                                    checked["conversation"])
            if stored is not None:  # an earlier attempt of this request landed: answer it, do not run it again
                return _replay(await blocking(_found, mgr, stored, who, _response_reader(mgr)), body.stream)
        response = await _respond(request, mgr, who, body, checked["conversation"], want, check, messages, model,
                                  fields, key, release, constraint)
        streaming = body.stream
        return response
    except (InvalidMessages, SessionLengthExceeded) as exc:  # the request's input[i], not the session's messages
        raise input_error(exc, body.input) from None
    finally:
        if not streaming:
            release()


async def _respond(request: Request, mgr: SessionManager, who: str | None, body: ResponsesRequest,
                   conversation: str | None, want: chains.Want, check: Callable[[BaseTemplate], None],
                   messages: list[dict[str, Any]], model: str, fields: dict[str, Any], key: str | None,
                   release: Callable[[], None], constraint: Constraint | None = None) -> Response:
    """The turn's response: its JSON object, or its stream (which lets go of ``key`` once it ends)."""
    plan, whole, started_turn = await _start(request, mgr, who, body, conversation, want, check, messages, model,
                                             fields, key, constraint)
    rid, serial, parse = response_id(plan.sid, plan.k), plan.serial + len(messages), body.tool_choice != "none"
    tokens = mgr.tokenizer is not None

    def finish(result: TurnResult, output: list[dict[str, Any]]) -> dict[str, Any]:
        return response_object(rid, attrs.evolve(whole, turn=turn_of(result)), plan.conversation, output,
                               tokens=tokens)

    if isinstance(started_turn, TurnStream):  # body.stream
        base = response_object(rid, whole, plan.conversation, [], tokens=tokens)
        events = response_events(started_turn, base, sid=plan.sid, serial=serial, parse=parse, finish=finish)
        return StreamingResponse(releasing(events, release), media_type="text/event-stream")
    result = started_turn
    status = "completed" if result.finish_reason == "stop" else "incomplete"
    if parse:
        parsed = parsed_of(result)
        calls = parsed.tool_calls if result.finish_reason == "stop" else []
        output = answer_items(plan.sid, serial, parsed.content, parsed.reasoning_content, calls, status)
    else:
        output = [message_item(plan.sid, serial, result.text, status)]
    return JSONResponse(finish(result, output))


async def _start(request: Request, mgr: SessionManager, who: str | None, body: ResponsesRequest,
                 conversation: str | None, want: chains.Want, check: Callable[[BaseTemplate], None],
                 messages: list[dict[str, Any]], model: str, fields: dict[str, Any], key: str | None,
                 constraint: Constraint | None = None) -> tuple[chains.Plan, Note, TurnStream | TurnResult]:
    """Plan, then start the turn: its stream (primed) or its result; a moved session is planned again."""
    previous = body.previous_response_id
    plan = await blocking(chains.plan, mgr, who, previous, conversation, body.store, want, check, key)
    for attempt in range(ATTEMPTS):
        turn_messages = plan.queued + messages
        note, whole = chains.note_for(plan, len(messages), model=model, previous=previous, want=want,
                                      request=fields, idempotency_key=key)
        turn = TurnRequest(
            plan.target, turn_messages, owner=who, expect=plan.expect, note=note,
            params={"temperature": body.temperature, "top_p": body.top_p, "constraint": constraint},
            max_new_tokens=body.max_output_tokens, edit=chains.edit_for(want, mgr.tokenizer, bool(plan.queued)),
            on_drop=recording(note), kind="responses" if plan.conversation is None else "conversation")
        try:
            if not turn_messages:
                raise bad("input", "nothing to answer: the input is empty")
            if body.stream:
                return plan, whole, await mgr.astream_turn(turn).start()
            return plan, whole, await run(mgr, turn, request.receive)
        except SessionMoved:  # another request changed the session since it was read: decide again
            await _drop(mgr, plan, who)
            if attempt == ATTEMPTS - 1:
                raise
            plan = await blocking(chains.plan, mgr, who, previous, conversation, body.store, want, check, key)
        except SessionBusy:  # the chain's latest response is being continued by another request: branch off
            await _drop(mgr, plan, who)
            if plan.created or previous is None or attempt == ATTEMPTS - 1:
                raise
            plan = await blocking(chains.branch_after_busy, mgr, who, previous, key)
        except BaseException:
            await _drop(mgr, plan, who)
            raise
    raise AssertionError("unreachable")  # every attempt returns or raises


async def _drop(mgr: SessionManager, plan: chains.Plan, who: str | None) -> None:
    """A session made for a request whose turn did not start goes again (a one-off is gone already)."""
    if plan.created and plan.oneoff is None:
        with contextlib.suppress(LmchatError):
            await blocking(mgr.end, plan.sid, who)


def _replay(response: dict[str, Any], stream: bool) -> Response:
    """A stored response as a retry gets it: the JSON object, or its stream's first and last events."""
    if not stream:
        return JSONResponse(response)
    events = Events()
    opening = {**response, "status": "in_progress", "output": [], "usage": None}

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


def _response_reader(mgr: SessionManager) -> Callable[[str, int], Callable[[View], dict[str, Any] | None]]:
    def reader(sid: str, k: int) -> Callable[[View], dict[str, Any] | None]:
        def read(v: View) -> dict[str, Any] | None:
            info = chains.read_response(k)(v)
            if info is None:
                return None
            serial = info.note.end_serial - 1
            index = Serials(info.state.deleted_items).index(serial)
            output: list[dict[str, Any]] = []
            places = Places(v, info.state)
            if index is not None and index < places.held + places.dropped:
                message = places.message(index)
                status = "completed" if (info.note.turn or {}).get("finish_reason") == "stop" else "incomplete"
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
async def delete_response(rid: str, request: Request, who: str | None = Depends(owner)) -> dict[str, Any]:
    mgr: SessionManager = request.app.state.manager
    parsed = parse_response_id(rid)
    if parsed is None:
        raise chains.not_found("response", rid, "response_id")
    sid, k = parsed

    def change(v: View) -> tuple[None, dict[str, Any]]:
        info = chains.read_response(k)(v)
        if info is None:
            raise chains.not_found("response", rid, "response_id")
        deleted = tuple(sorted({*info.state.deleted_responses, k}))
        return None, info.state.evolve(deleted_responses=deleted).to_json()

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


def walk(v: View, sid: str, lo: int, hi: int, desc: bool, after: str | None) -> Iterator[dict[str, Any]]:
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

    def reader(sid: str, k: int) -> Callable[[View], dict[str, Any] | None]:
        def read(v: View) -> dict[str, Any] | None:
            info = chains.read_response(k)(v)
            if info is None:
                return None
            # everything before the response's answer: the session is the response's ancestry up to it
            hi = count_below(info.state.deleted_items, info.note.end_serial - 1)
            return page(walk(v, sid, 0, hi, order == "desc", after), limit, after)
        return read

    return JSONResponse(await blocking(_found, request.app.state.manager, rid, who, reader))
