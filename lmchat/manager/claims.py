"""A manager's turn on a claimed session: what to append, the shared turn protocol, the release.

The turn itself (delta, stream, commit, save, restore on failure) is
:class:`lmchat.turns.Turn`, the REPL's too; this module decides what the
turn appends (the messages given, or what a resent history adds, or the
whole history replacing the session), answers a retried request from the
turn it already ran, and frees the session and the capacity at the end.
"""
from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ..backends.base import Backend, Chunk, SamplingParams, model_sampling
from ..errors import ConfigError, SessionKindMismatch, SessionMoved
from ..messages import normalize_messages
from ..session import Delta, Session
from ..turns.bridge import Done
from ..turns.turn import Turn, result_of
from ..validation import check_tools_supported, validate_messages, validate_tools
from . import history as hist
from .table import Entry, view

if TYPE_CHECKING:
    from .core import SessionManager


class Claim:
    """A claimed entry as the turn protocol's owner: the turn's saves go to the store, its end frees the session
    (:class:`~.oneoff.OneOff` is a session whose turn saves nothing and ends it)."""

    def __init__(self, mgr: SessionManager, entry: Entry, idempotency_key: str | None = None):
        self.mgr, self.entry, self.idempotency_key = mgr, entry, idempotency_key
        self.note: dict | None = None  # what the turn notes with its counts (stream_turn(note=))

    @property
    def session(self) -> Session:
        return self.entry.session

    @property
    def backend(self) -> Backend:
        return self.mgr.backend

    def save(self, record: dict) -> None:
        self.mgr.save(self.entry, *self._keyed(record))

    async def asave(self, record: dict) -> None:
        await self.mgr.asave(self.entry, *self._keyed(record))

    def _keyed(self, record: dict) -> tuple[dict, dict | None]:
        """The record with the turn's key, and the note that goes with it."""
        note = None
        if self.note is not None:  # the counts, and the answer's length instead of its text (the session has it)
            turn = {k: v for k, v in record.items() if k != "text" and v is not None}
            note = {**self.note, "turn": {**turn, "chars": len(record["text"])}}
        return {**record, "key": self.idempotency_key}, note

    def discard(self, *, sent: bool) -> None:
        self.mgr.discard(self.entry, drop_backend=sent)

    def unclaim(self) -> None:
        """Free the session (its turn is over, or never started)."""
        self.mgr.unclaim(self.entry)

    def release(self) -> None:
        """The turn is over (committed or not): free the session and the capacity."""
        self.unclaim()
        self.mgr.unreserve()

    def cancel_requested(self) -> bool:
        return self.entry.cancel_requested

    def failed(self, error: BaseException) -> None:
        self.mgr._metrics.error(error)


def sampling(session: Session, params, stop, max_new_tokens, model: dict | None = None) -> SamplingParams:
    """The turn's sampling: the template's values, the model's (``model``), the session's budget, then the
    request's."""
    if isinstance(params, SamplingParams):
        base = params
    else:
        given = {k: v for k, v in (params or {}).items() if v is not None}
        overrides = {**(model or {}), "max_new_tokens": session.max_new_tokens or None, **given}
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
    return attrs.evolve(base, **changes) if changes else base  # evolve rebuilds and re-validates


def start_turn(claim: Claim, messages: Iterable[Mapping[str, Any]] | None, params, stop, max_new_tokens,
             history: list[Mapping[str, Any]] | None, tools: list[dict] | None,
             idempotency_key: str | None, expect: int | None = None, edit: Callable | None = None,
             note: dict | None = None, on_loop: bool = False, result_only: bool = False, kind: Any = ...
             ) -> Iterator[Chunk] | AsyncIterator[Any]:
    """The primed stream of one turn on the claimed session (see :meth:`SessionManager.stream_turn`);
    ``on_loop``: an async iterator to prime at once (``await anext``), its last item :class:`Done`
    (``result_only``: the answer's chunks before it are left out)."""
    mgr, entry = claim.mgr, claim.entry
    claim.idempotency_key, claim.note = idempotency_key, note
    before = (entry.session, entry.extra)
    try:
        last = entry.last_turn
        held = (entry.extra or {}).get("kind")
        if kind is not ... and held != kind:  # another API's records describe this session: it must not change
            raise SessionKindMismatch(entry.session.session_id, kind=held, wanted=kind)
        if expect is not None and entry.version != expect:
            raise SessionMoved(entry.key, expected=expect, actual=entry.version)
        if idempotency_key is not None and last and last.get("key") == idempotency_key:
            if on_loop:
                return _areplay(claim, last)
            stream = _replay(claim, last)
        else:
            if edit is not None:  # replaced only if the turn starts (restored below otherwise)
                session, extra = edit(view(entry)) or (None, None)
                entry.session = entry.session if session is None else session
                entry.extra = entry.extra if extra is None else extra
                if session is not None:
                    entry.digests = []
            sent = _validated(history, tools, entry.session) if history is not None else None
            turn_params = sampling(entry.session, params, stop, max_new_tokens, model_sampling(mgr.backend))
            budget = turn_params.max_new_tokens

            def start() -> Delta:
                if sent is not None:
                    return _from_history(mgr, entry, sent, tools, budget)
                return entry.session.extend(messages or (), max_new_tokens=budget)

            turn = Turn(claim, start, turn_params, parse=True, key=entry.key)
            if on_loop:
                return _arun(claim, turn, result_only)
            stream = _run(claim, turn)
        next(stream)  # primed: closing or dropping it now always runs its cleanup
        return stream
    except BaseException:
        if entry.session is not before[0] or entry.extra is not before[1]:  # an edit the turn did not start from
            entry.session, entry.extra = before
            entry.digests = []
        if entry.session.pending:  # extend() succeeded, what followed did not: drop the prompt
            claim.discard(sent=False)
        claim.release()  # a failed extend() leaves the session as it was
        raise


def _run(claim: Claim, turn: Turn) -> Iterator[Chunk | None]:
    try:
        inner = turn.run()
        yield next(inner)  # primed
        result = yield from inner
        _finished(claim, turn)
        return result
    except Exception as exc:  # a failed generation or save, raised to the consumer: counted here
        claim.failed(exc)
        raise
    finally:
        claim.release()


async def _arun(claim: Claim, turn: Turn, result_only: bool) -> AsyncIterator[Any]:
    """:func:`_run` on the event loop: None (primed), the chunks, then :class:`Done` once the session is
    released."""
    turn.when_finished = claim.release  # an abandoned turn frees the session once it is saved
    items = turn.arun(chunks=not result_only)
    try:
        async for item in items:
            if isinstance(item, Done):
                done = item
            else:
                yield item
        _finished(claim, turn)
    except Exception as exc:
        claim.failed(exc)
        raise
    finally:
        try:
            await items.aclose()
        finally:
            if turn.finishing is None:
                claim.release()
            else:  # the consumer left: the turn stops and saves on its own (see SessionManager.await_stopped);
                # its task started in aclose(), which did not yield since, so the session is still this turn's
                claim.entry.cancel_requested = True
    yield done


def _finished(claim: Claim, turn: Turn) -> None:
    final = turn.final
    claim.mgr._metrics.turn(time.monotonic() - turn.started, final.prefilled, final.reused)
    if turn.delta.reset or turn.delta.dropped:
        claim.entry.digests.clear()  # the session's messages are not the ones digested any more


def _replay(claim: Claim, record: dict) -> Iterator[Chunk | None]:
    """A retried request: the turn it names is already committed; its result, again."""
    try:
        yield None
        session = claim.session
        result = result_of(record, session.template, session.tools)
        yield Chunk(text=result.text)
        yield Chunk(finish_reason=result.finish_reason, stop=result.stop, prefilled=result.prefilled,
                    reused=result.reused, cached_from=result.cached_from,
                    cache_miss_reason=result.cache_miss_reason)
        return result
    finally:
        claim.release()


async def _areplay(claim: Claim, record: dict) -> AsyncIterator[Any]:
    """:func:`_replay` on the event loop."""
    replay = _replay(claim, record)
    try:
        while True:
            try:
                item = next(replay)
            except StopIteration as stop:
                result = stop.value
                break
            yield item
    finally:
        replay.close()
    yield Done(result)


def _validated(history: list[Mapping[str, Any]], tools: list[dict] | None, session: Session) -> list[dict]:
    """The resent conversation, normalised and checked before anything is touched."""
    validate_tools(tools)
    check_tools_supported(session.template, tools)
    sent = hist.object_arguments(normalize_messages(history))
    validate_messages([], sent, start=0, max_chars=session.max_message_chars)
    return sent


def _from_history(mgr: SessionManager, entry: Entry, sent: list[dict], tools: list[dict] | None,
                  budget: int) -> Delta:
    """The delta for a resent conversation: what the session lacks, or the conversation replacing it."""
    session = entry.session
    held = _digests(entry)
    skip = 1 if _default_system(session) and sent[0].get("role") != "system" else 0
    sent_digests = [hist.digest(m) for m in sent]
    k = None
    if hist.tools_digest(session.tools) == hist.tools_digest(tools):
        k = hist.new_messages(held[skip:], sent_digests)
    if k is not None:
        return session.extend(sent[k:], max_new_tokens=budget)
    # another conversation under this id (edited, regenerated, new tools): it replaces the session
    fresh = mgr.new_session(session.session_id, tools=tools, template=session.template)
    delta = fresh.extend(sent, max_new_tokens=budget)  # may raise: the session stays as it was
    entry.session = fresh
    entry.digests = []
    # the engine may hold the old conversation under this key: it must drop it first
    return attrs.evolve(delta, reset=True, reason="the client sent another conversation under this session id")


def _digests(entry: Entry) -> list[str]:
    """The digests of the session's messages, computing only those not digested yet."""
    session, digests = entry.session, entry.digests
    missing = session.messages_since(len(digests))
    digests.extend(hist.digest(m, session.template, session.tools) for m in missing)
    return digests


def _default_system(session: Session) -> bool:
    """The session opens with its template's default system prompt (which clients do not send)."""
    default = session.template.default_system
    return default is not None and session.first_message() == {"role": "system", "content": default}
