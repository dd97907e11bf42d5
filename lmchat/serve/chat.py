"""``POST /v1/chat/completions``: OpenAI's chat API over sessions.

Without a session id each request runs on a one-off session, held in
memory for its turn only: nothing is stored (see :mod:`lmchat.manager.oneoff`).
With one (header ``X-Session-Id``, else body ``session_id``, else
``user``) the session persists, and a client resending its history only
costs the new messages (:mod:`lmchat.manager.history`). Tool calls are parsed from the
model's output in its template's syntax and returned as ``tool_calls``
(``tool_choice: "none"`` returns the raw text instead; ``"required"`` and a
named function force a call in the template's syntax, as a grammar, where the
engine constrains: :mod:`.formats`). An error in a message
names the request's ``messages[k]``, whatever the session held before.
"""
from __future__ import annotations

import time
from collections.abc import Mapping

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..backends.base import Chunk, special_tokens
from ..constraints import Constraint
from ..errors import InvalidMessages, SessionLengthExceeded
from ..manager import OneOff, SessionManager, TurnRequest
from ..manager.history import from_openai
from ..messages import Message
from ..tools.answer_constraint import for_answer
from ..validation import check_tool_choice, tool_names
from .deps import blocking, check_n, model_named, new_id, owner
from .errors import as_sent
from .formats import chat_constraint, tool_constraint
from .idempotency import releasing
from .request_turns import count, parsed_of, run, start_stream
from .schemas import ChatRequest
from .sse import Meta, chat_events, finish_reason, usage

router = APIRouter()


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatRequest, request: Request, who: str | None = Depends(owner)) -> Response:
    check_n(body.n)
    check_tool_choice(body.tool_choice, tool_names(body.tools))
    # before any session is read or made: a format the backend cannot enforce changes nothing
    budget = body.max_completion_tokens or body.max_tokens
    constraint = await chat_constraint(body.response_format, request.app.state.manager.backend, budget)
    try:
        return await _chat(body, request, who, constraint)
    except (InvalidMessages, SessionLengthExceeded) as exc:  # the client's messages[k], not the session's
        raise as_sent(exc, len(body.messages), _message_param) from None


def _message_param(k: int | None, field: str | None) -> str | None:
    if k is None:
        return None  # the session's own index, which a one-off or a resent history shares with the client
    return f"messages[{k}].{field}" if field else f"messages[{k}]"


async def _chat(body: ChatRequest, request: Request, who: str | None, constraint: Constraint | None) -> Response:
    mgr: SessionManager = request.app.state.manager
    sid = request.headers.get("x-session-id") or body.session_id or body.user
    tools = body.tools or None
    key = request.headers.get("idempotency-key")
    messages: list[Message] | None
    history: list[Mapping[str, object]] | None
    if sid is None:  # a one-off: in memory for this turn only, the store never sees it (nothing blocks here)
        session: str | OneOff = mgr.oneoff(who, tools=tools)
        headers: dict[str, str] = {}
        messages, history, template = from_openai(body.messages), None, mgr.default_template
    else:  # the manager matches the resent history with the session (validated before anything changes)
        session, headers = sid, {"X-Session-Id": sid}
        messages, history, template = None, list(body.messages), await blocking(mgr.template_of, sid, who)
    # a forced tool_choice is a grammar of the template's call syntax (400 where it has none, before the turn)
    forced = await tool_constraint(body.tool_choice, tools, template, mgr.backend, parallel=body.parallel_tool_calls,
                                   max_tokens=body.max_completion_tokens or body.max_tokens, response=constraint)
    answer = for_answer(forced or constraint, template, tokens=special_tokens(mgr.backend))  # reasoning: free
    # kind None: a session of the Responses or Conversations API is refused (its records would break)
    turn = TurnRequest(
        session, messages, history=history, tools=tools if history is not None else None,
        params={**body.sampling(), "constraint": answer},
        stop=body.stop, max_new_tokens=body.max_completion_tokens or body.max_tokens, owner=who,
        idempotency_key=key, kind=None)
    kind = "chat.completion.chunk" if body.stream else "chat.completion"
    meta = Meta(new_id("chatcmpl"), kind, int(time.time()), model_named(request.app.state, body.model))
    parse = body.tool_choice != "none"
    # a stored turn with a key: its retry waits for it, then is answered the saved turn (a one-off saves nothing)
    release = await request.app.state.inflight.hold(who, key if sid is not None else None)
    if body.stream:
        try:
            chunks = await start_stream(mgr, turn, request.receive)
        except BaseException:
            release()
            raise
        events = chat_events(
            chunks, meta, parser=chunks.reading.stream() if parse else None,
            include_usage=body.stream_options is not None and body.stream_options.include_usage,
            count=lambda chars, ids: count(mgr.tokenizer, chars, ids),
        )
        return StreamingResponse(releasing(events, release), media_type="text/event-stream", headers=headers)
    try:
        result = await run(mgr, turn, request.receive)
    finally:
        release()
    if parse:
        parsed = parsed_of(result)
        message: Message = {"role": "assistant",
                            "content": parsed.content if parsed.content or not parsed.tool_calls else None}
        if parsed.reasoning_content is not None:
            message["reasoning_content"] = parsed.reasoning_content
        if parsed.tool_calls:
            message["tool_calls"] = parsed.tool_calls
    else:
        message = {"role": "assistant", "content": result.text}
    last = Chunk(prefilled=result.prefilled, reused=result.reused, cached_from=result.cached_from,
                 cache_miss_reason=result.cache_miss_reason)
    body_out = {
        "id": meta.id, "object": meta.object, "created": meta.created, "model": meta.model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": finish_reason(result.finish_reason,
                                                    parse and bool(parsed_of(result).tool_calls))}],
        "usage": usage(last, count(mgr.tokenizer, len(result.text), len(result.token_ids))),
    }
    return JSONResponse(body_out, headers=headers)
