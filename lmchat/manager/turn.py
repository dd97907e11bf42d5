"""One turn, end to end: delta, backend stream, commit, compare-and-set save.

A :class:`Turn` is built once the turn owns the session (``running``); building it
computes the delta, so overflow and bad input raise before anything reaches
the engine or the store. :meth:`Turn.run` is the generator
:meth:`SessionManager.stream_turn` returns, already started (primed past its
first ``yield``) so that closing it or dropping it always runs its cleanup:

* never iterated: the prompt reached nobody; the in-memory session, which
  holds the pending prompt, is discarded (the store has the last commit);
* closed mid-stream (a client disconnect): the generation is cancelled and
  drained, and the partial answer is committed and saved;
* the backend or the save failed: the in-memory session is discarded and
  the backend told to forget the session, so both restart from the store.

The last chunk (with ``finish_reason``) is yielded only once the turn is
saved: a client that saw it can rely on the turn being durable.
"""
from __future__ import annotations

import json

import time
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

import attrs

from ..backends.base import Chunk, GenerationRequest, SamplingParams
from ..errors import LmchatError, ConfigError
from ..session.edits import Generation, commit_generation
from ..tools import ParsedResponse, parse_response
from .table import Entry

if TYPE_CHECKING:
    from .core import SessionManager


@attrs.frozen
class TurnResult:
    """A finished turn. Counts are tokens with a tokenizer, else characters.

    ``history_tokens``: what the engine held before the turn; ``prompt_tokens``:
    the whole prompt of this turn (history + delta); ``prefilled``/``reused``:
    how the backend served it; ``cache_miss_reason``: why it could not reuse
    all it held (a reset, a drift rewind, an overflow; None when it could).
    ``parsed`` splits ``text`` into content, reasoning and tool calls
    (:func:`lmchat.parse_response`).
    """

    text: str
    token_ids: tuple[int, ...]
    finish_reason: str
    stop: str | None
    prompt_tokens: int
    prefilled: int
    reused: int
    history_tokens: int
    parsed: ParsedResponse
    cache_miss_reason: str | None = None


def sampling(session, params: SamplingParams | Mapping[str, Any] | None, stop, max_new_tokens) -> SamplingParams:
    """The turn's sampling: the template's values, the session's budget, then the request's."""
    if isinstance(params, SamplingParams):
        base = params
    else:
        overrides = {"max_new_tokens": session.max_new_tokens or None, **(params or {})}
        try:
            base = SamplingParams.from_template(session.template, **overrides)
        except TypeError as exc:
            raise ConfigError(f"unknown sampling parameter: {exc}", field="params") from None
    changes: dict[str, Any] = {}
    if stop:
        extra = (stop,) if isinstance(stop, str) else tuple(stop)
        changes["stop"] = tuple(dict.fromkeys(base.stop + extra))
    if max_new_tokens is not None:
        changes["max_new_tokens"] = max_new_tokens
    return attrs.evolve(base, **changes)


class Turn:
    """One turn on a claimed session: built with its delta, then :meth:`run` streams, commits and saves it."""

    def __init__(self, mgr: SessionManager, entry: Entry, messages: Iterable[Mapping[str, Any]], params: SamplingParams):
        self.mgr, self.entry = mgr, entry
        session = entry.session
        self.started = time.monotonic()
        self.history = session.step
        self.delta = delta = session.extend(messages, max_new_tokens=params.max_new_tokens)
        self.prompt_tokens = session.step
        self.request = GenerationRequest.from_session(session, delta, params)
        self.texts: list[str] = []
        self.ids: list[int] = []
        self.final: Chunk | None = None

    def run(self) -> Iterator[Chunk | None]:
        backend, sid = self.mgr.backend, self.entry.session.session_id
        stage = "primed"
        try:
            yield None  # primed by stream_turn: everything before this raised eagerly
            stage = "streaming"
            chunks = iter(backend.generate(self.request))
            try:
                for chunk in chunks:
                    self._record(chunk)
                    if chunk.finish_reason is None and (chunk.text or chunk.token_ids):
                        yield chunk
                    if self.entry.cancel_requested:  # repeated: the backend may have registered the turn late
                        backend.cancel(sid)
            except GeneratorExit:  # the consumer left: what the engine generates is still committed
                stage = "abandoned"
                backend.cancel(sid)
                try:
                    for chunk in chunks:
                        self._record(chunk)
                except Exception as exc:  # the engine failed while stopping: what it holds is unknown
                    stage = "failed"
                    self.mgr._discard(self.entry, drop_backend=True)
                    self.mgr._metrics.error(exc)
                raise
            result = self._commit_and_save()
            stage = "saved"
            yield self.final
            return result
        except GeneratorExit:
            if stage == "primed":
                self.mgr._discard(self.entry, drop_backend=False)  # nothing reached the engine
            elif stage == "abandoned":
                try:
                    self._commit_and_save()
                except LmchatError as exc:  # nobody is left to tell but the metrics
                    self.mgr._discard(self.entry, drop_backend=True)
                    self.mgr._metrics.error(exc)
            raise
        except BaseException as exc:
            # a failed generation or save: what the engine holds is unknown, and memory
            # must not run ahead of the store; both restart from the last saved turn
            self.mgr._discard(self.entry, drop_backend=True)
            self.mgr._metrics.error(exc)
            raise
        finally:
            self.mgr._release(self.entry)

    def _record(self, chunk: Chunk) -> None:
        self.texts.append(chunk.text)
        self.ids.extend(chunk.token_ids)
        if chunk.finish_reason is not None:
            self.final = chunk

    def _commit_and_save(self) -> TurnResult:
        """Commit what the engine holds (an end marker only when the model emitted one), then save it."""
        session, final = self.entry.session, self.final
        if final is None:  # a stream cut short (cancelled, or a backend that ended without its last chunk)
            final = self.final = Chunk(finish_reason="cancelled")
        text = "".join(self.texts)
        parsed = parse_response(session.template, text, tools=session.tools)
        fields: dict[str, Any] = {}
        if final.finish_reason == "stop" and parsed.tool_calls:
            # the conversation keeps the parsed calls, so tool results can answer their ids;
            # the context keeps the raw text, as the engine holds it
            fields = {"content": parsed.content, "tool_calls": _argument_objects(parsed.tool_calls)}
            if parsed.reasoning_content is not None:
                fields["reasoning_content"] = parsed.reasoning_content
        commit_generation(session, Generation(text, tuple(self.ids), final.finish_reason, final.stop), **fields)
        self.mgr._save(self.entry)
        self.final = final = attrs.evolve(final, cache_miss_reason=self.delta.reason)
        self.mgr._metrics.turn(time.monotonic() - self.started, final.prefilled, final.reused)
        return TurnResult(
            text=text, token_ids=tuple(self.ids), finish_reason=final.finish_reason, stop=final.stop,
            prompt_tokens=self.prompt_tokens, prefilled=final.prefilled, reused=final.reused,
            history_tokens=self.history, parsed=parsed, cache_miss_reason=self.delta.reason,
        )


def _argument_objects(calls: list[dict]) -> list[dict]:
    """OpenAI calls with JSON-object arguments: templates render objects as the model wrote them,
    while a JSON string would render escaped and reset the next turn."""
    out = []
    for call in calls:
        fn = dict(call["function"])
        try:
            fn["arguments"] = json.loads(fn["arguments"])
        except (TypeError, ValueError):
            pass  # not JSON: keep what the model wrote
        out.append({**call, "function": fn})
    return out
