"""``POST /v1/completions`` (a raw prompt, no template, no session) and ``GET /v1/models``.

A raw prompt goes to the backend as is, under a one-off backend session id
that is dropped afterwards: nothing is stored. Special tokens written in the
prompt are read as such (the caller wrote the template markup). A prompt of
token ids (a list of ints, or a list of one such list, as OpenAI's API takes
it) is fed as those ids, without a round trip through text: a client that
keeps the ids a previous answer came with (RL rollouts, agents replaying a
trajectory) gets the engine's prefix cache on exactly them. These
requests count against the manager's ``max_active`` like turns, and run in
its worker pool (``SessionManager.agenerate``). A prompt that does not fit with its ``max_tokens`` in the
context a session may hold is refused before the engine sees it, as a chat
turn is (400 ``context_length_exceeded``), not left to fail in the engine.
"""
from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from typing import cast

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from ..backends.base import Chunk, GenerationRequest, Prompt, SamplingParams
from ..constraints import Constraint
from ..errors import SessionLengthExceeded
from ..jsontypes import JSONObject
from ..manager import SessionManager
from ..manager.ids import oneoff_key
from ..session import Delta
from ..templates.base import BaseTemplate
from .deps import cancel_on_disconnect, check_n, model_named, new_id, owner
from .errors import ApiError
from .formats import chat_constraint
from .request_turns import count
from .schemas import CompletionRequest
from .sse import Meta, completion_events, usage

router = APIRouter()


@router.get("/v1/models", response_model=None)
async def models(request: Request, who: str | None = Depends(owner)) -> JSONObject:
    state = request.app.state
    mgr: SessionManager = state.manager
    # the context a session may hold, as vLLM names it (tokens; characters on a backend without a tokenizer)
    return {"object": "list",
            "data": [{"id": state.model_name, "object": "model", "created": state.started, "owned_by": "lmchat",
                      "max_model_len": mgr.session_len}]}


@router.post("/v1/completions", response_model=None)
async def completions(body: CompletionRequest, request: Request, who: str | None = Depends(owner)
                      ) -> JSONObject | StreamingResponse:
    check_n(body.n)
    if body.echo:
        raise ApiError(400, "echo is not supported", param="echo", code="unsupported_value")
    given = body.prompt
    # the schema's types: a text, texts, token ids or lists of token ids; one text or one list of ids is a prompt
    prompt = cast("str | list[int]", given)
    if isinstance(given, list) and (not given or not isinstance(given[0], int)):
        if len(given) != 1:
            raise ApiError(400, f"{len(given)} prompts: send one prompt per request", param="prompt")
        prompt = cast("str | list[int]", given[0])
    state = request.app.state
    mgr: SessionManager = state.manager
    constraint = await chat_constraint(body.response_format, mgr.backend, body.max_tokens)
    generation = _request(mgr, prompt, body, constraint)
    meta = Meta(new_id("cmpl"), "text_completion", int(time.time()), model_named(state, body.model))

    def counter(chars: int, ids: int) -> int:
        return count(mgr.backend.tokenizer, chars, ids)

    chunks = mgr.agenerate(generation)
    if body.stream:
        chunks = await primed(chunks)
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        return StreamingResponse(completion_events(chunks, meta, include_usage=include_usage, count=counter),
                                 media_type="text/event-stream")
    texts: list[str] = []
    ids, last = 0, Chunk()
    async with cancel_on_disconnect(request.receive, lambda: mgr.backend.cancel(generation.session_id)):
        async for chunk in chunks:
            texts.append(chunk.text)
            ids += len(chunk.token_ids)
            last = chunk
    text = "".join(texts)
    return {"id": meta.id, "object": meta.object, "created": meta.created, "model": meta.model,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": last.finish_reason}],
            "usage": usage(last, counter(len(text), ids))}


def _request(mgr: SessionManager, prompt: str | list[int], body: CompletionRequest, constraint: Constraint | None
             ) -> GenerationRequest:
    template = mgr.default_template
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    # the template's sampling defaults (same model) and the server's (its command line), but only the request's
    # stop words: a raw prompt need not be a chat
    asked = {k: v for k, v in body.sampling().items() if v is not None}
    params = SamplingParams.from_template(template, **{**mgr.sampling, **asked}, stop=stop,
                                          max_new_tokens=body.max_tokens, constraint=constraint)
    ids = None
    if mgr.backend.tokenizer is not None:
        from ..session.tokens import codec_for

        codec = codec_for(mgr.backend.tokenizer)
        if isinstance(prompt, list):
            ids = tuple(_checked_ids(prompt, codec.vocab.n_tokens))
            prompt = codec.decode(ids)
        else:
            ids = tuple(codec.encode(prompt, codec.special_spans(prompt))[0])
    elif isinstance(prompt, list):
        raise ApiError(400, "a prompt of token ids needs a backend that knows the model's tokenizer (this one "
                            "takes text)", param="prompt", code="unsupported_value")
    _fits(mgr, template, prompt, ids, body.max_tokens)
    delta = Delta(prompt, sequence_start=True, token_ids=None if ids is None else list(ids))
    # a backend key no stored session can have (as a chat one-off's)
    return GenerationRequest(session_id=oneoff_key(new_id("completion"), ""), delta=delta, params=params,
                             source=lambda: Prompt(prompt, ids))


def _fits(mgr: SessionManager, template: BaseTemplate, prompt: str, ids: tuple[int, ...] | None, max_tokens: int
          ) -> None:
    """Refuse a prompt that does not fit, by the rule a session applies to a turn: with token ids, prompt and
    answer within ``session_len`` (the server's, else the template's); without, the prompt's characters within
    a ``session_len`` the server was given (an answer's size in characters is unknown)."""
    limit = mgr.session_defaults.session_len
    if ids is not None:
        limit = limit or template.session_len
        if limit and len(ids) + max_tokens > limit:
            raise SessionLengthExceeded(used=0, new=len(ids), max_new_tokens=max_tokens, limit=limit, field="prompt")
    elif limit and len(prompt) > limit:
        raise SessionLengthExceeded(used=0, new=len(prompt), max_new_tokens=0, limit=limit, unit="characters",
                                    field="prompt")


def _checked_ids(ids: list[int], n_tokens: int) -> list[int]:
    if not ids:
        raise ApiError(400, "an empty prompt: give at least one token id", param="prompt")
    bad = next((i for i, t in enumerate(ids) if not 0 <= t < n_tokens), None)
    if bad is not None:
        raise ApiError(400, f"prompt[{bad}] = {ids[bad]} is not a token id of this model (0 to {n_tokens - 1})",
                       param="prompt", code="invalid_value")
    return ids


async def primed(chunks: AsyncGenerator[Chunk, None]) -> AsyncGenerator[Chunk, None]:
    """``chunks`` once its first chunk has come: what fails before it (capacity, the engine refusing the
    prompt) is still an HTTP error. A disconnect cancels the response task: closing ``chunks`` cancels the
    generation."""
    try:
        first = await chunks.__anext__()
    except BaseException:
        await chunks.aclose()
        raise

    async def stream() -> AsyncGenerator[Chunk, None]:
        try:
            yield first
            async for chunk in chunks:
                yield chunk
        finally:
            await chunks.aclose()

    return stream()
