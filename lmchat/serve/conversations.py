"""OpenAI's Conversations API over sessions: ``/v1/conversations`` and its items.

A conversation is a session (``conv_<sid>``) whose ``extra`` holds its
``metadata`` and creation time (:class:`~.chain_state.SessionState`). Its items are the session's messages (after
the system prompt of ``instructions``, which is no item) and then the items
added and not yet answered (``queue``: they reach the model with the next
``responses.create(conversation=ID)``, as the first messages of its turn, so
adding items costs no reset). Deleting an item the model has seen is an edit
of the conversation: the next turn's delta resets, and the responses made
before the deletion whose state held the item can no longer be continued.
Deleting one item of an answer (its reasoning, text or calls) deletes the
answer's message, all its items.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import attrs
from fastapi import APIRouter, Body, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import Field

from ..errors import InvalidMessages, SessionKindMismatch, SessionNotFound, SnapshotError, StoreCorrupt
from ..jsontypes import JSON, JSONObject
from ..manager import SessionManager
from ..manager.table import View
from ..messages import Message, normalize_messages
from ..session import Session
from ..session.edits import restored
from ..session.snapshot import messages_of
from ..validation import MAX_MESSAGES, validate_messages
from . import chains
from .chain_state import Cut, SessionState, state_of
from .deps import blocking, end_session, owner
from .items import (
    Serials,
    bad,
    conversation_id,
    input_messages,
    message_items,
    page,
    parse_conversation_id,
    parse_item_id,
)
from .responses import walk
from .responses_model import Metadata
from .schemas import _Body
from .truncation import Places
from .wire import Conversation, ConversationPage, Deleted, Item, ItemPage

router = APIRouter()
T = TypeVar("T")


class NewConversation(_Body):
    items: list[JSON] | None = Field(default=None, max_length=MAX_MESSAGES)
    metadata: Metadata | None = None


class ConversationUpdate(_Body):
    metadata: Metadata


class NewItems(_Body):
    items: list[JSON] = Field(min_length=1, max_length=20)


def view(sid: str, state: SessionState) -> Conversation:
    return {"id": conversation_id(sid), "object": "conversation", "created_at": state.created_at,
            "metadata": state.metadata}


def _sid(cid: str) -> str:
    sid = parse_conversation_id(cid)
    if sid is None:
        raise chains.not_found("conversation", cid, "conversation_id")
    return sid


def _checked(history: list[Message], new: list[Message], param: str) -> None:
    """New items validated after what precedes them (a tool result answers a call before it)."""
    try:
        validate_messages(history, normalize_messages(new), start=len(history))
    except InvalidMessages as exc:
        where = f"{param}[{exc.index - len(history)}]" if exc.index is not None else param
        raise bad(where, str(exc), "invalid_messages") from None


def _conversation(v: View, cid: str) -> SessionState:
    state = state_of(v)
    if state is None or state.kind != "conversation":
        raise chains.not_found("conversation", cid, "conversation_id")
    return state


def _count(v: View, state: SessionState) -> int:
    """How many items the conversation has: the session's messages after its head and those dropped, then the
    queue."""
    return Places(v, state).count


def _tail(v: View, state: SessionState) -> list[Message]:
    """The messages from the session's last answer on, then the queue: what new items follow."""
    i = v.messages
    while i > state.head and v.slice(i - 1, i)[0]["role"] != "assistant":
        i -= 1
    return v.slice(max(i - 1, 0)) + list(state.queue)


def _call(fn: Callable[..., T], sid: str, *args: object) -> T:
    """``fn(sid, *args)``, a missing session (or another key's) answering as a missing conversation."""
    try:
        return fn(sid, *args)
    except SessionNotFound:
        raise chains.not_found("conversation", conversation_id(sid), "conversation_id") from None


@router.post("/v1/conversations")
async def create_conversation(request: Request, body: NewConversation = Body(default_factory=NewConversation),
                              who: str | None = Depends(owner)) -> JSONResponse:
    mgr: SessionManager = request.app.state.manager
    messages = input_messages(body.items or [], "items")
    _checked([], messages, "items")
    system = None
    if messages and messages[0]["role"] == "system":  # the conversation's own system message: an item
        system, messages = messages[0]["content"], messages[1:]
    head = system is None and mgr.default_template.default_system is not None
    state = SessionState("conversation", system_head=head, queue=tuple(messages), created_at=int(time.time()),
                         metadata=body.metadata or {})
    sid = await blocking(mgr.create, chains.new_sid(), who, system=system, extra=state.to_json())
    return JSONResponse(view(sid, state))


def _listed(mgr: SessionManager, who: str | None, limit: int) -> tuple[list[Conversation], bool]:
    """The caller's conversations, most recently changed first: the store lists sessions newest first, each is
    read for its kind (chains and chat sessions are no conversations), a session gone meanwhile is left out."""
    found: list[Conversation] = []
    infos = mgr.list(who, limit)
    for info in infos:
        try:
            state = mgr.inspect(info.id, state_of, who)
        except (SessionNotFound, StoreCorrupt, SnapshotError):  # deleted since, or unreadable: not listed
            continue
        if state is not None and state.kind == "conversation":
            found.append({**view(info.id, state), "updated_at": int(info.updated_at)})
    return found, len(infos) == limit


@router.get("/v1/conversations", response_model=None)
async def list_conversations(request: Request, limit: int = Query(20, ge=1, le=100),
                             who: str | None = Depends(owner)) -> ConversationPage:
    """lmchat's own (OpenAI's API lists no conversations): the caller's, most recently changed first. ``limit``
    counts the caller's sessions read, so a page may hold fewer conversations when chains are among them."""
    data, more = await blocking(_listed, request.app.state.manager, who, limit)
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": more}


@router.get("/v1/conversations/{cid}")
async def get_conversation(cid: str, request: Request, who: str | None = Depends(owner)) -> JSONResponse:
    sid = _sid(cid)
    mgr: SessionManager = request.app.state.manager
    state = await blocking(_call, mgr.inspect, sid, lambda v: _conversation(v, cid), who)
    return JSONResponse(view(sid, state))


@router.post("/v1/conversations/{cid}")
async def update_conversation(cid: str, body: ConversationUpdate, request: Request,
                              who: str | None = Depends(owner)) -> JSONResponse:
    sid = _sid(cid)
    mgr: SessionManager = request.app.state.manager
    result: list[SessionState] = []

    def change(v: View) -> tuple[None, JSONObject]:
        result[:] = [attrs.evolve(_conversation(v, cid), metadata=body.metadata)]
        return None, result[0].to_json()

    await blocking(_call, mgr.update, sid, change, who)
    return JSONResponse(view(sid, result[0]))


@router.delete("/v1/conversations/{cid}", response_model=None)
async def delete_conversation(cid: str, request: Request, who: str | None = Depends(owner)) -> Deleted:
    sid = _sid(cid)
    mgr: SessionManager = request.app.state.manager

    def delete(sid: str) -> None:
        try:
            mgr.end(sid, who, "conversation")  # checked on the session it deletes, in the same claim
        except SessionKindMismatch:  # a chain's session, or chat's: no conversation of this id
            raise chains.not_found("conversation", cid, "conversation_id") from None
        except (StoreCorrupt, SnapshotError):  # nothing of it can be read, its kind neither: it goes all the same
            end_session(mgr, sid, who)

    await blocking(_call, delete, sid)
    return {"id": cid, "object": "conversation.deleted", "deleted": True}


@router.get("/v1/conversations/{cid}/items")
async def list_items(cid: str, request: Request, limit: int = Query(20, ge=1, le=100),
                     order: str = Query("desc", pattern="^(asc|desc)$"), after: str | None = None,
                     who: str | None = Depends(owner)) -> JSONResponse:
    sid = _sid(cid)
    mgr: SessionManager = request.app.state.manager

    def read(v: View) -> ItemPage:
        state = _conversation(v, cid)
        return page(walk(v, sid, 0, _count(v, state), order == "desc", after), limit, after)

    return JSONResponse(await blocking(_call, mgr.inspect, sid, read, who))


@router.post("/v1/conversations/{cid}/items")
async def add_items(cid: str, body: NewItems, request: Request, who: str | None = Depends(owner)) -> JSONResponse:
    sid = _sid(cid)
    mgr: SessionManager = request.app.state.manager
    messages = input_messages(body.items, "items")
    added: list[Item] = []

    def change(v: View) -> tuple[None, JSONObject]:
        state = _conversation(v, cid)
        count, serials = _count(v, state), Serials(state.deleted_items)
        if count + len(messages) > MAX_MESSAGES:
            raise bad("items", f"the conversation holds {count} items: at most {MAX_MESSAGES} in all, as many as "
                               "a response's input")
        _checked(_tail(v, state), messages, "items")
        for j, message in enumerate(messages):
            added.extend(message_items(sid, serials.serial(count + j), message, v.session.template, v.session.tools))
        return None, attrs.evolve(state, queue=(*state.queue, *messages)).to_json()

    await blocking(_call, mgr.update, sid, change, who)
    return JSONResponse(page(iter(added), len(added), None))


def _find(v: View, sid: str, cid: str, item_id: str) -> tuple[int, int] | None:
    """(item index, serial) of an item of this conversation, or None."""
    state = _conversation(v, cid)
    found = parse_item_id(item_id)
    if found is None or found[0] != sid:
        return None
    index = Serials(state.deleted_items).index(found[1])
    if index is None or index >= _count(v, state):
        return None
    if not any(item["id"] == item_id for item in walk(v, sid, index, index + 1, False, None)):
        return None
    return index, found[1]


@router.get("/v1/conversations/{cid}/items/{item_id}")
async def get_item(cid: str, item_id: str, request: Request, who: str | None = Depends(owner)) -> JSONResponse:
    sid = _sid(cid)
    mgr: SessionManager = request.app.state.manager

    def read(v: View) -> Item:
        at = _find(v, sid, cid, item_id)
        if at is None:
            raise chains.not_found("item", item_id, "item_id")
        return next(i for i in walk(v, sid, at[0], at[0] + 1, False, None) if i["id"] == item_id)

    return JSONResponse(await blocking(_call, mgr.inspect, sid, read, who))


@router.delete("/v1/conversations/{cid}/items/{item_id}")
async def delete_item(cid: str, item_id: str, request: Request, who: str | None = Depends(owner)) -> JSONResponse:
    sid = _sid(cid)
    mgr: SessionManager = request.app.state.manager
    result: list[SessionState] = []

    def change(v: View) -> tuple[Session | None, JSONObject]:
        at = _find(v, sid, cid, item_id)
        if at is None:
            raise chains.not_found("item", item_id, "item_id")
        (index, serial), state = at, _conversation(v, cid)
        result[:] = [state]
        places = Places(v, state)
        state = attrs.evolve(state, deleted_items=tuple(sorted((*state.deleted_items, serial))))
        position = places.held_at(index)
        if position is None:  # not seen by the model now (queued, or dropped): only the state changes
            queued = index - places.held - places.dropped
            queue = [m for j, m in enumerate(state.queue) if j != queued]
            return None, attrs.evolve(state, queue=tuple(queue)).to_json()
        data = v.session.to_dict()
        messages = messages_of(data)
        del messages[position]
        _checked([], messages, "item_id")
        template = v.session.template
        template.render(template.make_chat(messages, tools=v.session.tools, **v.session.template_kwargs))
        state = attrs.evolve(state, cuts=(*state.cuts, Cut(len(v.notes), serial)))
        return restored(data, mgr.tokenizer, f"item {item_id} was deleted from the conversation"), state.to_json()

    await blocking(_call, mgr.update, sid, change, who)
    return JSONResponse(view(sid, result[0]))
