"""OpenAI's streaming format: server-sent events of ``chat.completion.chunk`` / ``text_completion``.

Tool calls stream as OpenAI deltas: a call's first delta carries its index,
id and whole name (names are never split), later ones pieces of its
arguments. Usage comes as a last chunk with no choices when the client asked
with ``stream_options.include_usage``. A failure after the response started
(the status line is gone) is sent as an ``error`` event, which the ``openai``
client raises as an exception.
"""
from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable

import attrs

from ..backends.base import Chunk
from ..jsontypes import JSON, JSONObject
from ..tools import ContentDelta, ReasoningDelta, ResponseStream, ToolCallArgumentsDelta, ToolCallStart
from ..tools.events import Event
from .errors import api_error

DONE = "data: [DONE]\n\n"


@attrs.frozen
class Meta:
    """What every chunk of one response repeats."""

    id: str
    object: str
    created: int
    model: str

    def event(self, choices: list[JSONObject], **extra: JSON) -> str:
        payload: JSONObject = {"id": self.id, "object": self.object, "created": self.created, "model": self.model,
                   "choices": choices, **extra}
        return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


def usage(last: Chunk, completion_tokens: int) -> JSONObject:
    """OpenAI usage from the backend's counts: the prompt is what it prefilled plus what it reused;
    lmchat's own ``cached_from`` says where the cached tokens came from (session, resident, host, disk) and
    ``cache_miss_reason`` why the engine could not reuse all it held, if it could not."""
    prompt = last.prefilled + last.reused
    details = {"cached_tokens": last.reused, "cached_from": last.cached_from,
               "cache_miss_reason": last.cache_miss_reason}
    return {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens, "prompt_tokens_details": details}


def finish_reason(reason: str, has_calls: bool) -> str:
    return "tool_calls" if has_calls and reason == "stop" else reason


async def chat_events(chunks: AsyncIterator[Chunk], meta: Meta, *, parser: ResponseStream | None,
                      include_usage: bool, count: Callable[[int, int], int]) -> AsyncGenerator[str, None]:
    """``parser``: the turn's (``TurnStream.reading``), so the stream reads as the stored answer; None: the text
    as it is. ``count(n_chars, n_ids)``: how many tokens were generated (see :func:`turns.count`)."""

    def choice(delta: JSONObject, finish: str | None = None) -> str:
        return meta.event([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}])

    chars = ids = 0
    has_calls = False
    try:
        yield choice({"role": "assistant", "content": ""})
        async for chunk in chunks:
            chars += len(chunk.text)
            ids += len(chunk.token_ids)
            deltas: list[JSONObject]
            if parser is None:
                deltas = [{"content": chunk.text}] if chunk.text else []
            else:
                events = parser.feed(chunk.text) + (parser.finish() if chunk.finish_reason else [])
                deltas = [d for d in map(_delta, events) if d]
            for delta in deltas:
                has_calls = has_calls or "tool_calls" in delta
                yield choice(delta)
            if chunk.finish_reason:
                yield choice({}, finish_reason(chunk.finish_reason, has_calls))
                if include_usage:
                    yield meta.event([], usage=usage(chunk, count(chars, ids)))
        yield DONE
    except Exception as exc:  # any: the status line is sent, the error is the stream's last line
        yield f"data: {json.dumps(api_error(exc).body())}\n\n"


def _delta(event: Event) -> JSONObject | None:
    if isinstance(event, ContentDelta):
        return {"content": event.text} if event.text else None
    if isinstance(event, ReasoningDelta):
        return {"reasoning_content": event.text} if event.text else None
    if isinstance(event, ToolCallStart):
        call = {"index": event.index, "id": event.id, "type": "function",
                "function": {"name": event.name, "arguments": ""}}
        return {"tool_calls": [call]}
    if isinstance(event, ToolCallArgumentsDelta):
        return {"tool_calls": [{"index": event.index, "function": {"arguments": event.text}}]}
    return None  # a ParseError: the text it concerns comes back as content, the note is not for clients


async def completion_events(chunks: AsyncIterator[Chunk], meta: Meta, *, include_usage: bool,
                            count: Callable[[int, int], int]) -> AsyncGenerator[str, None]:
    chars = ids = 0
    try:
        async for chunk in chunks:
            chars += len(chunk.text)
            ids += len(chunk.token_ids)
            if chunk.text or chunk.finish_reason:
                yield meta.event([{"index": 0, "text": chunk.text, "logprobs": None,
                                   "finish_reason": chunk.finish_reason}])
            if chunk.finish_reason and include_usage:
                yield meta.event([], usage=usage(chunk, count(chars, ids)))
        yield DONE
    except Exception as exc:  # any: the status line is sent, the error is the stream's last line
        yield f"data: {json.dumps(api_error(exc).body())}\n\n"
