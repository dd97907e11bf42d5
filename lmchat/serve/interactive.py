"""``POST /v1/chat/interactive``: LMDeploy's stateful protocol (docs/server.md).

The server keeps the conversation; each request sends only the new prompt.
``interactive_mode=true`` keeps the session after the answer; ``false`` ends
it after answering, and with an empty prompt only ends it. A request of
``session_id=-1`` (no session) with ``interactive_mode=false`` runs on a
one-off session, in memory for its turn only: nothing is stored. ``cancel=true``
stops the turn running on the session. Streams are JSON lines, one per chunk.

Counts never go negative (LMDeploy #388): ``input_tokens`` is what the engine
computed for this turn, ``history_tokens`` what it served from its cache,
``tokens`` what it generated. A turn that does not fit in ``session_len`` is
refused with ``finish_reason: 'session_len'`` and an error saying by how
much, never confused with ``'length'`` (``request_output_len`` reached).
Errors name the request's own field: ``prompt`` (``prompt[k]`` for a list).

The route is a plain ASGI app (:mod:`.asgi`): it is the hottest one, and
FastAPI's layers cost more CPU than a turn.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import uuid
from collections.abc import AsyncIterator

from starlette.datastructures import State
from starlette.types import Message, Receive, Scope, Send

from ..backends.base import Chunk
from ..errors import InvalidMessages, LmchatError, SessionLengthExceeded
from ..jsontypes import JSONObject
from ..manager import OneOff, SessionManager, TurnRequest
from . import asgi
from .deps import blocking
from .errors import ApiError, api_error, as_sent
from .request_turns import count, end_soon, run, start_stream, stop_on_disconnect
from .schemas import InteractiveRequest

PATH = "/v1/chat/interactive"


class Interactive:
    """``POST /v1/chat/interactive`` for the app whose state is ``state`` (its manager and API keys)."""

    def __init__(self, state: State) -> None:
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            who = asgi.owner(scope, self.state.api_keys)
            body = asgi.parse(InteractiveRequest, await asgi.read_body(receive))
            await self.turn(body, who, receive, watched_send, asgi.header(scope, b"idempotency-key"))
        except Exception as exc:  # noqa: BLE001 - every failure is an OpenAI-shaped response
            if started:  # a stream's status line is out: nothing to answer with any more
                raise
            await asgi.send_error(send, exc)

    async def turn(self, body: InteractiveRequest, who: str | None, receive: Receive, send: Send,
                   key: str | None = None) -> None:
        mgr: SessionManager = self.state.manager
        sid = None if body.session_id in (-1, "-1") else str(body.session_id)
        # kind None everywhere: a session of the Responses or Conversations API is refused (409), its records
        # would break; ending or cancelling it is a change like a turn
        if body.cancel or body.stop is True:
            if sid is None:
                raise ApiError(400, "cancel needs the session_id of the running turn", param="session_id")
            cancelled = await blocking(mgr.cancel, sid, who, None)
            return await asgi.send_json(send, reply(sid, "", 0, Chunk(), finish_reason=None, cancelled=cancelled))
        if body.ignore_eos:
            raise ApiError(400, "ignore_eos is not supported: the answer ends at the model's end-of-turn marker",
                           param="ignore_eos", code="unsupported_value")
        sent = [{"role": "user", "content": body.prompt}] if isinstance(body.prompt, str) else body.prompt
        kept = [i for i, m in enumerate(sent) if m.get("content") != ""]  # where each message is in the prompt
        messages = [sent[i] for i in kept]
        end = not body.interactive_mode
        if not messages:
            if not end:
                raise ApiError(400, "empty prompt: nothing to answer (an empty prompt with interactive_mode=false "
                                    "ends the session)", param="prompt")
            if sid is None:
                raise ApiError(400, "session_id -1 names no session to end", param="session_id")
            await blocking(mgr.end, sid, who, None)
            return await asgi.send_json(send, reply(sid, "", 0, Chunk(), finish_reason="stop", ended=True))
        session: str | OneOff
        if sid is None and end:  # a one-off: the store never sees it, and it is gone with its turn
            oneoff = mgr.oneoff(who)
            session, sid = oneoff, oneoff.session_id
        else:  # session_id -1 keeping its session: a new one, which the turn creates (a refused turn leaves none)
            session = sid = sid if sid is not None else new_sid(key, who)
        stop = None if isinstance(body.stop, bool) else body.stop
        turn = TurnRequest(session, messages, params=body.sampling(), stop=stop, owner=who, create=True,
                           max_new_tokens=body.request_output_len, idempotency_key=key, kind=None)
        # a stored turn with a key: its retry waits for it, then is answered the saved turn (a one-off saves nothing)
        release = await self.state.inflight.hold(who, None if isinstance(session, OneOff) else key)
        try:  # a stored session that interactive_mode=false ends once its turn is committed
            await self._answer(mgr, turn, sid, body, end and not isinstance(session, OneOff), receive, send)
        except InvalidMessages as exc:  # named as the client sent it: prompt, or prompt[k] of a list
            raise as_sent(exc, len(messages), lambda k, field: _prompt_param(body.prompt, kept, k, field)) from None
        finally:
            release()

    async def _answer(self, mgr: SessionManager, turn: TurnRequest, sid: str, body: InteractiveRequest, to_end: bool,
                      receive: Receive, send: Send) -> None:
        """The turn, answered; ``to_end``: the session ends once the turn is committed (streamed: once the
        stream is over, however it ends but by an error; cancelled: once its partial answer is). A turn that
        fails, refused (4xx) or not (5xx), ends nothing: a refusal changes nothing."""
        who = turn.owner
        try:
            if body.stream:
                chunks = await start_stream(mgr, turn, receive)
            else:
                result = await run(mgr, turn, receive)
        except SessionLengthExceeded as exc:
            return await _overflow(send, sid, exc)
        except asyncio.CancelledError:  # the response task: its turn commits what it generated, then it ends
            if to_end:
                end_soon(mgr, sid, who)
            raise
        if body.stream:  # the session ends (interactive_mode=false) when the stream does
            # a client that leaves closes the stream: the turn is cancelled and its partial answer saved
            async with contextlib.aclosing(chunks), stop_on_disconnect(mgr, turn, receive):
                return await asgi.send_lines(send, _lines(mgr, sid, who, chunks, to_end), b"application/x-ndjson")
        if to_end:
            with contextlib.suppress(LmchatError):
                await blocking(mgr.end, sid, who)
        last = Chunk(prefilled=result.prefilled, reused=result.reused, cached_from=result.cached_from,
                     cache_miss_reason=result.cache_miss_reason)
        generated = count(mgr.tokenizer, len(result.text), len(result.token_ids))
        await asgi.send_json(send, reply(sid, result.text, generated, last, result.finish_reason,
                                         ended=not body.interactive_mode or None))


def new_sid(key: str | None, who: str | None) -> str:
    """The id of the session a ``session_id=-1`` request keeps: random, or derived from its Idempotency-Key and
    its owner, so that a retry finds the session (and the turn) its first attempt made."""
    if key is None:
        return uuid.uuid4().hex
    seed = f"interactive\0{who or ''}\0{key}"
    return hashlib.sha256(seed.encode("utf-8", "surrogatepass")).hexdigest()[:32]


async def _lines(mgr: SessionManager, sid: str, who: str | None, chunks: AsyncIterator[Chunk], end: bool
                 ) -> AsyncIterator[str]:
    chars = ids = 0
    try:
        async for chunk in chunks:
            chars += len(chunk.text)
            ids += len(chunk.token_ids)
            generated = count(mgr.tokenizer, chars, ids)
            yield json.dumps(reply(sid, chunk.text, generated, chunk, chunk.finish_reason), ensure_ascii=False) + "\n"
    except Exception as exc:  # any (an engine's own too): the status line is sent, the error is the last line
        end = False  # the turn failed: nothing of it was committed, and the session stays as it was
        yield json.dumps({**api_error(exc).body(), "finish_reason": "error", "session_id": sid}) + "\n"
    finally:
        if end:  # a client that left: its partial answer is committed, then the session ends
            end_soon(mgr, sid, who)


def reply(sid: str, text: str, tokens: int, last: Chunk, finish_reason: str | None, **extra: object) -> JSONObject:
    """LMDeploy's response fields; ``input_tokens``/``history_tokens`` are final on the last chunk."""
    body = {"text": text, "tokens": tokens, "input_tokens": last.prefilled, "history_tokens": last.reused,
            "finish_reason": finish_reason, "session_id": sid}
    if last.cached_from:
        body["cached_from"] = last.cached_from
    if last.cache_miss_reason:
        body["cache_miss_reason"] = last.cache_miss_reason
    body.update((k, v) for k, v in extra.items() if v is not None)
    return body


def _prompt_param(prompt: str | list[JSONObject], kept: list[int], k: int | None, field: str | None) -> str:
    if k is None or isinstance(prompt, str):
        return "prompt"
    return f"prompt[{kept[k]}].{field}" if field else f"prompt[{kept[k]}]"


async def _overflow(send: Send, sid: str, exc: SessionLengthExceeded) -> None:
    error = api_error(exc).naming("prompt")
    body = {**error.body(), "text": "", "tokens": 0, "input_tokens": exc.new, "history_tokens": exc.used,
            "finish_reason": "session_len", "session_id": sid}
    await asgi.send_json(send, body, error.status)
