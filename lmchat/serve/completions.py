"""``POST /v1/completions`` (a raw prompt, no template, no session) and ``GET /v1/models``.

A raw prompt goes to the backend as is, under a one-off backend session id
that is dropped afterwards: nothing is stored. Special tokens written in the
prompt are read as such (the caller wrote the template markup). These
requests count against the manager's ``max_active`` separately from turns.
"""
from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import AsyncIterator

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from ..backends.base import Chunk, GenerationRequest, Prompt, SamplingParams
from ..errors import CapacityExceeded
from ..registry import get_template
from ..session import Delta
from .deps import cancel_on_disconnect, check_n, new_id, owner
from .errors import ApiError
from .schemas import CompletionRequest
from .sse import Meta, completion_events, usage
from .turns import count, primed

router = APIRouter()


@router.get("/v1/models")
async def models(request: Request, who: str | None = Depends(owner)):
    state = request.app.state
    return {"object": "list",
            "data": [{"id": state.model_name, "object": "model", "created": state.started, "owned_by": "lmchat"}]}


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request, who: str | None = Depends(owner)):
    check_n(body.n)
    if body.echo:
        raise ApiError(400, "echo is not supported", param="echo", code="unsupported_value")
    prompt = body.prompt
    if isinstance(prompt, list):
        if len(prompt) != 1:
            raise ApiError(400, f"{len(prompt)} prompts: send one prompt per request", param="prompt")
        prompt = prompt[0]
    state = request.app.state
    mgr = state.manager
    if state.oneoff_active >= mgr.max_active:
        raise CapacityExceeded(mgr.max_active)
    generation = _request(mgr, prompt, body)
    meta = Meta(new_id("cmpl"), "text_completion", int(time.time()), body.model or state.model_name)
    counter = lambda chars, ids: count(mgr.backend.tokenizer, chars, ids)  # noqa: E731
    chunks = _counted(state, generate(mgr.backend, generation))
    if body.stream:
        chunks = await primed(chunks)
        include_usage = bool((body.stream_options or {}).get("include_usage"))
        return StreamingResponse(completion_events(chunks, meta, include_usage=include_usage, count=counter),
                                 media_type="text/event-stream")
    texts, ids, last = [], 0, Chunk()
    async with cancel_on_disconnect(request, lambda: mgr.backend.cancel(generation.session_id)):
        async for chunk in chunks:
            texts.append(chunk.text)
            ids += len(chunk.token_ids)
            last = chunk
    text = "".join(texts)
    return {"id": meta.id, "object": meta.object, "created": meta.created, "model": meta.model,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": last.finish_reason}],
            "usage": usage(last, counter(len(text), ids))}


def _request(mgr, prompt: str, body: CompletionRequest) -> GenerationRequest:
    template = get_template(mgr.template) if isinstance(mgr.template, str) else mgr.template
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    # the template's sampling defaults (same model), but only the request's stop words: a raw prompt
    # need not be a chat
    params = SamplingParams.from_template(template, **body.sampling(), stop=stop, max_new_tokens=body.max_tokens)
    ids = None
    if mgr.backend.tokenizer is not None:
        from ..session.tokens import codec_for

        codec = codec_for(mgr.backend.tokenizer)
        ids = tuple(codec.encode(prompt, codec.special_spans(prompt))[0])
    delta = Delta(prompt, sequence_start=True, token_ids=None if ids is None else list(ids))
    return GenerationRequest(session_id=new_id("oneoff"), delta=delta, params=params,
                             source=lambda: Prompt(prompt, ids))


async def _counted(state, chunks: AsyncIterator[Chunk]) -> AsyncIterator[Chunk]:
    state.oneoff_active += 1  # only touched on the event loop: no lock needed
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        state.oneoff_active -= 1


async def generate(backend, request: GenerationRequest) -> AsyncIterator[Chunk]:
    """The backend's chunks, generated in a thread of their own; leaving early cancels the generation."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    def put(item) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is listening any more
            loop.call_soon_threadsafe(queue.put_nowait, item)

    def work() -> None:
        try:
            for chunk in backend.generate(request):
                put(chunk)
            put(None)
        except BaseException as exc:
            put(exc)
        finally:
            backend.drop(request.session_id)

    threading.Thread(target=work, name="lmchat-completion", daemon=True).start()
    finished = False
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, BaseException):
                finished = True
                raise item
            yield item
        finished = True
    finally:
        if not finished:
            backend.cancel(request.session_id)
