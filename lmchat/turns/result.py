"""What a turn gives and how it is kept: how its answer reads (:class:`Reading`, decided once when the turn starts),
the finished turn (:class:`TurnResult`), and the JSON a turn is saved as, so that a retried request is answered the
turn that already ran (:func:`record_of`, :func:`reading_of`, :func:`result_of`)."""
from __future__ import annotations

from typing import TypedDict, cast

import attrs

from ..jsontypes import JSONObject
from ..tools import ParsedResponse, ResponseStream, parse_response
from ..tools.registry import TemplateLike


@attrs.frozen
class Reading:
    """How a turn's answer reads, decided once when the turn starts (its delta known): the same for the answer
    as it streams (:meth:`stream`, a server's events), as committed (:meth:`parse`) and as a retry replays it.

    ``prompt_opened``: whether the delta (the prompt the answer follows) opened the format's reasoning channel
    (Gemma 4's after tool results with thinking on: the answer begins inside it); None where the template
    decides (:func:`~lmchat.tools.registry.prompt_opened`).
    """

    template: TemplateLike
    tools: list[JSONObject] | None
    prompt_opened: bool | None = None

    def stream(self) -> ResponseStream:
        return ResponseStream(self.template, tools=self.tools, prompt_opened=self.prompt_opened)

    def parse(self, text: str) -> ParsedResponse:
        return parse_response(self.template, text, tools=self.tools, prompt_opened=self.prompt_opened)


@attrs.frozen
class TurnResult:
    """A finished turn. Counts are tokens with a tokenizer, else characters.

    ``history_tokens``: what the engine held before the turn; ``prompt_tokens``:
    the whole prompt of this turn (history + delta); ``prefilled``/``reused``:
    how the backend served it, ``cached_from`` where the reused tokens came
    from (``session``, ``resident``, ``host``, ``disk``: see
    :class:`~lmchat.backends.Chunk`); ``cache_miss_reason``: why it could not
    reuse all it held (a KV file that failed its checks, a reset, a drift
    rewind, an overflow; None when it could).
    ``parsed`` splits ``text`` into content, reasoning and tool calls
    (:func:`lmchat.parse_response`), when the turn was asked to parse.
    """

    text: str
    token_ids: tuple[int, ...]
    finish_reason: str
    stop: str | None
    prompt_tokens: int
    prefilled: int
    reused: int
    history_tokens: int
    parsed: ParsedResponse | None = None
    cache_miss_reason: str | None = None
    cached_from: str | None = None


class TurnRecord(TypedDict):
    """A finished turn as JSON (:func:`record_of`): what a retried request is answered from."""

    text: str
    prompt_opened: bool | None
    finish_reason: str
    stop: str | None
    prompt_tokens: int
    prefilled: int
    reused: int
    history_tokens: int
    generated: int
    cache_miss_reason: str | None
    cached_from: str | None


class KeyedRecord(TurnRecord, total=False):
    """A :class:`TurnRecord` as the manager saves it: with the request's Idempotency-Key (None: it had none)."""

    key: str | None


def stored_record(value: object) -> KeyedRecord | None:
    """A saved record as a store gives it back (None: none saved)."""
    # a store gives back the JSON record_of wrote (one saved before a field existed lacks it: read with .get)
    return cast(KeyedRecord, value) if isinstance(value, dict) else None


def record_of(result: TurnResult, reading: Reading) -> TurnRecord:
    """A turn's result as JSON, without its ids and parse (:func:`result_of` rebuilds them, reading the text as
    the turn did)."""
    return {"text": result.text, "prompt_opened": reading.prompt_opened, "finish_reason": result.finish_reason,
            "stop": result.stop,
            "prompt_tokens": result.prompt_tokens, "prefilled": result.prefilled, "reused": result.reused,
            "history_tokens": result.history_tokens, "generated": len(result.token_ids),
            "cache_miss_reason": result.cache_miss_reason, "cached_from": result.cached_from}


def reading_of(record: TurnRecord, template: TemplateLike, tools: list[JSONObject] | None) -> Reading:
    """How the turn of a :func:`record_of` read its answer (a record saved before it said: as the template
    decides)."""
    return Reading(template, tools, record.get("prompt_opened"))


def result_of(record: TurnRecord, reading: Reading) -> TurnResult:
    """The result of a turn that already ran, from its :func:`record_of` (a retried request)."""
    return TurnResult(
        text=record["text"], token_ids=(), finish_reason=record["finish_reason"], stop=record.get("stop"),
        prompt_tokens=record["prompt_tokens"], prefilled=record["prefilled"], reused=record["reused"],
        history_tokens=record["history_tokens"], parsed=reading.parse(record["text"]),
        cache_miss_reason=record.get("cache_miss_reason"), cached_from=record.get("cached_from"),
    )
