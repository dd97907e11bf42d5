"""``/v1/sessions`` (list, create, get, delete, fork, export), ``GET /health`` and ``GET /metrics``.

Every session route is scoped to the caller's API key: another key's session
answers 404, exactly like a session that does not exist.
"""
from __future__ import annotations

import asyncio

from fastapi import APIRouter, Body, Depends, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from ..backends.base import PromptFormat
from ..errors import StoreError
from ..jsontypes import JSONObject
from ..manager import SessionManager
from ..session import Session
from ..validation import check_text
from .deps import authorized, blocking, end_session, owner, text_limit
from .errors import ApiError, api_error
from .metrics import exposition
from .schemas import Fork, NewSession
from .wire import Deleted, SessionList, SessionSummary, SessionView

router = APIRouter()


def view(session: Session) -> SessionView:
    """A session as the API shows it; ``unit`` says what ``step`` and ``session_len`` count."""
    return {
        "id": session.session_id, "object": "session", "template": session.template.name,
        "step": session.step, "unit": "tokens" if session.counts_tokens else "characters",
        "session_len": session.session_len, "turns": session.turns, "messages": session.messages,
        "tools": session.tools,
    }


@router.get("/v1/sessions", response_model=None)
async def list_sessions(request: Request, limit: int = Query(100, ge=1, le=10_000),
                        who: str | None = Depends(owner)) -> SessionList:
    infos = await blocking(request.app.state.manager.list, who, limit)
    data: list[SessionSummary] = [{"id": i.id, "object": "session", "title": i.title, "turns": i.turns,
                                   "updated_at": i.updated_at, "template": i.template} for i in infos]
    return {"object": "list", "data": data}


@router.post("/v1/sessions", status_code=201, response_model=None)
async def create_session(request: Request, body: NewSession = Body(default_factory=NewSession),
                         who: str | None = Depends(owner)) -> SessionView:
    mgr: SessionManager = request.app.state.manager
    check_text(body.system, "system", text_limit(mgr))  # the limit a message's content has (and instructions)
    sid = await blocking(mgr.create, body.session_id, who, system=body.system, tools=body.tools,
                         template=body.template)
    return view(await blocking(mgr.get, sid, who))


@router.get("/v1/sessions/{session_id}", response_model=None)
async def get_session(session_id: str, request: Request, who: str | None = Depends(owner)) -> SessionView:
    return view(await blocking(request.app.state.manager.get, session_id, who))


@router.delete("/v1/sessions/{session_id}", response_model=None)
async def delete_session(session_id: str, request: Request, who: str | None = Depends(owner)) -> Deleted:
    await blocking(end_session, request.app.state.manager, session_id, who)
    return {"id": session_id, "object": "session.deleted", "deleted": True}


@router.post("/v1/sessions/{session_id}/fork", status_code=201, response_model=None)
async def fork_session(session_id: str, request: Request, body: Fork = Body(default_factory=Fork),
                       who: str | None = Depends(owner)) -> SessionView:
    mgr: SessionManager = request.app.state.manager
    new = await blocking(mgr.fork, session_id, body.session_id, who)
    return view(await blocking(mgr.get, new, who))


@router.get("/v1/sessions/{session_id}/export", response_model=None)
async def export_session(session_id: str, request: Request, who: str | None = Depends(owner)) -> JSONObject:
    """The session's JSON snapshot (``lmchat.Session.from_dict`` restores it; ``lmchat chat`` can load it)."""
    session: Session = await blocking(request.app.state.manager.get, session_id, who)
    return session.to_dict()


#: how long /health waits for the store: it answers a load balancer, never blocks on a stalled store
HEALTH_SECONDS = 1.0


@router.get("/health", response_model=None)
async def health(request: Request) -> JSONResponse | JSONObject:
    """200 when the store answers within a second; 503 otherwise (a load balancer takes the replica out).

    With API keys, an anonymous probe gets the status only; a key also gets the engine, the store and
    the load (nothing about any tenant's sessions).
    """
    state = request.app.state
    mgr: SessionManager = state.manager
    try:
        await asyncio.wait_for(blocking(mgr.store.version, "lmchat-health-check"), HEALTH_SECONDS)
    except (StoreError, asyncio.TimeoutError) as exc:
        error = api_error(exc) if isinstance(exc, StoreError) else ApiError(
            503, f"the store did not answer within {HEALTH_SECONDS:g} s", type="server_error", code="store_timeout")
        return JSONResponse({"status": "unavailable", **error.body()}, status_code=error.status)
    if state.api_keys and not await authorized(request, state.api_keys):
        return {"status": "ok"}
    held = await blocking(mgr.occupancy)  # not metrics(): the engine's stats wait for its current step
    body: JSONObject = {"status": "ok", "model": state.model_name, "backend": mgr.backend.name, "engine": mgr.engine,
            "store": mgr.store.spec, **held}
    if isinstance(mgr.backend, PromptFormat):  # remote: prompts go upstream as 'ids' or 'text' (no I/O here)
        body["prompt_format"] = mgr.backend.prompt_mode
    return body


@router.get("/metrics")
async def metrics(request: Request) -> PlainTextResponse:
    """Prometheus text; with ``--metrics-key`` (else the API keys, when there are any) a Bearer key is needed."""
    state = request.app.state
    keys = state.metrics_keys or state.api_keys
    if keys and not await authorized(request, keys):
        raise ApiError(401, "/metrics needs 'Authorization: Bearer KEY' (the metrics key, or an API key)",
                       type="authentication_error", code="invalid_api_key")
    text = await blocking(exposition, state.metrics)  # it reads the engine, which answers between two steps
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")
