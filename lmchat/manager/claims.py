"""A manager's turn on a claimed session: what to append, the shared turn protocol, the release.

The turn itself (delta, stream, commit, save, restore on failure) is
:class:`lmchat.turns.Turn`, the REPL's too; this module decides what the
turn appends (the messages given, or what a resent history adds, or the
whole history replacing the session), answers a retried request from the
turn it already ran, and frees the session and the capacity at the end.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, Callable, Generator, Iterator, Mapping
from typing import cast

import attrs

from ..backends.base import Backend, Chunk, SamplingParams
from ..errors import ConfigError, SessionMoved
from ..jsontypes import JSONObject
from ..messages import Message, normalize_messages
from ..session import Delta, Session
from ..turns.bridge import Done
from ..turns.result import KeyedRecord, Reading, TurnRecord, TurnResult, reading_of, result_of
from ..turns.turn import AsyncTurn, Turn
from ..validation import check_tools_supported, validate_messages, validate_tools
from . import history as hist
from .capacity import Capacity
from .request import TurnRequest, check_kind
from .sessions import StoredSessions
from .table import Entry, view


class Claim:
    """A claimed entry as the turn protocol's owner: the turn's saves go to the store, its end frees the session
    and the capacity (:class:`~.oneoff.OneOffClaim`: a one-off's, whose turn saves nothing and ends it)."""

    def __init__(self, sessions: StoredSessions, capacity: Capacity, entry: Entry):
        self.sessions, self.capacity, self.entry = sessions, capacity, entry
        self.idempotency_key: str | None = None  # the turn's (TurnRequest.idempotency_key), saved with it
        self.note: dict[str, object] | None = None  # what the turn notes with its counts (TurnRequest.note)

    @property
    def session(self) -> Session:
        return self.entry.session

    @property
    def backend(self) -> Backend:
        return self.sessions.backend

    def save(self, record: TurnRecord) -> None:
        self.sessions.save(self.entry, *self._keyed(record))

    async def asave(self, record: TurnRecord) -> None:
        await self.sessions.asave(self.entry, *self._keyed(record))

    def _keyed(self, record: TurnRecord) -> tuple[KeyedRecord, dict[str, object] | None]:
        """The record with the turn's key, and the note that goes with it."""
        note = None
        if self.note is not None:  # the counts, and the answer's length instead of its text (the session has it)
            turn = {k: v for k, v in record.items() if k not in ("text", "prompt_opened") and v is not None}
            note = {**self.note, "turn": {**turn, "chars": len(record["text"])}}
        keyed: KeyedRecord = {**record, "key": self.idempotency_key}
        return keyed, note

    def discard(self, *, sent: bool) -> None:
        self.sessions.discard(self.entry, drop_backend=sent)

    def unclaim(self) -> None:
        """Free the session (its turn is over, or never started)."""
        self.sessions.unclaim(self.entry)

    def release(self) -> None:
        """The turn is over (committed or not): free the session and the capacity."""
        self.unclaim()
        self.capacity.release()

    def cancel_requested(self) -> bool:
        return self.entry.cancel_requested

    def failed(self, error: BaseException) -> None:
        self.sessions.metrics.error(error)


def sampling(session: Session, request: TurnRequest, model: Mapping[str, object]) -> SamplingParams:
    """The turn's sampling: the template's values, the model's (``model``), the session's budget, then the
    request's."""
    params = request.params
    if isinstance(params, SamplingParams):
        base = params
    else:
        given = {k: v for k, v in (params or {}).items() if v is not None}
        overrides = {**model, "max_new_tokens": session.max_new_tokens or None, **given}
        try:
            base = SamplingParams.from_template(session.template, **overrides)
        except TypeError as exc:
            raise ConfigError(f"unknown sampling parameter: {exc}", field="params") from None
    if not request.stop and request.max_new_tokens is None:
        return base
    stop = tuple(dict.fromkeys(base.stop + request.stop)) if request.stop else base.stop
    budget = base.max_new_tokens if request.max_new_tokens is None else request.max_new_tokens
    return attrs.evolve(base, stop=stop, max_new_tokens=budget)  # evolve rebuilds and re-validates


@attrs.frozen
class _Fresh:
    """A turn to run: how it computes its delta, and its sampling."""

    start: Callable[[], Delta]
    params: SamplingParams


def start_turn(claim: Claim, request: TurnRequest, model: Mapping[str, object]) -> Iterator[Chunk | Reading]:
    """The primed stream of one turn on the claimed session (see :class:`~.request.TurnRequest`): the
    :class:`Reading` of its answer first (a server parses its stream so, as the turn parses what it commits),
    then its chunks, and the :class:`TurnResult` it returns."""
    with _starting(claim):
        plan = _plan(claim, request, model)
        if isinstance(plan, dict):
            stream = _replay(claim, plan)
        else:
            stream = _run(claim, Turn(claim, plan.start, plan.params, parse=True, key=claim.entry.key))
        next(stream)  # primed: closing or dropping it now always runs its cleanup
        return cast(Iterator[Chunk | Reading], stream)  # its one None is consumed


def astart_turn(claim: Claim, request: TurnRequest, model: Mapping[str, object], result_only: bool
                ) -> AsyncGenerator[Chunk | Reading | Done | None, None]:
    """:func:`start_turn` on the event loop: an async iterator to prime at once (``await anext``), its last item
    :class:`Done` (``result_only``: the answer's chunks before it are left out)."""
    with _starting(claim):
        plan = _plan(claim, request, model)
        if isinstance(plan, dict):
            return _areplay(claim, plan)
        return _arun(claim, AsyncTurn(claim, plan.start, plan.params, parse=True, key=claim.entry.key), result_only)


@contextlib.contextmanager
def _starting(claim: Claim) -> Iterator[None]:
    """What a turn that fails to start undoes: an edit it would have started from, a prompt appended, the claim."""
    entry = claim.entry
    before = (entry.session, entry.extra)
    try:
        yield
    except BaseException:
        if entry.session is not before[0] or entry.extra is not before[1]:  # an edit the turn did not start from
            entry.session, entry.extra = before
            entry.digests = []
        if entry.session.pending:  # extend() succeeded, what followed did not: drop the prompt
            claim.discard(sent=False)
        claim.release()  # a failed extend() leaves the session as it was
        raise


def _plan(claim: Claim, request: TurnRequest, model: Mapping[str, object]) -> KeyedRecord | _Fresh:
    """The turn's checks, then what it runs: the record of the turn a retry names, or a fresh turn."""
    entry = claim.entry
    claim.idempotency_key, claim.note = request.idempotency_key, request.note
    check_kind(entry.session.session_id, entry.extra, request.kind)  # another API's records describe it
    if request.expect is not None and entry.version != request.expect:
        raise SessionMoved(entry.key, expected=request.expect, actual=entry.version)
    last = entry.last_turn
    if request.idempotency_key is not None and last and last.get("key") == request.idempotency_key:
        return last
    if request.edit is not None:  # replaced only if the turn starts (restored by _starting otherwise)
        session, extra = request.edit(view(entry)) or (None, None)
        entry.session = entry.session if session is None else session
        entry.extra = entry.extra if extra is None else extra
        if session is not None:
            entry.digests = []
    history, tools, messages = request.history, request.tools, request.messages
    sent = _validated(history, tools, entry.session) if history is not None else None
    params = sampling(entry.session, request, model)
    budget = params.max_new_tokens

    def start() -> Delta:
        if sent is not None:
            delta = _from_history(claim.sessions, entry, sent, tools, budget)
        else:
            delta = entry.session.extend(messages or (), max_new_tokens=budget)
        if delta.removed and request.on_drop is not None:  # restored by _starting if the turn does not start
            extra, note = request.on_drop(view(entry), delta)
            entry.extra = entry.extra if extra is None else extra
            claim.note = claim.note if note is None else note
        return delta

    return _Fresh(start, params)


@contextlib.contextmanager
def _held(claim: Claim, turn: Turn | AsyncTurn) -> Iterator[None]:
    """The claim's side of a running turn, one rule for both twins: a turn that finishes is counted, one that
    fails is counted as an error (raised to its consumer), and the session and the capacity are freed when the
    turn is over: at once, or, for a turn that goes on without its consumer (:attr:`~AsyncTurn.going_on`), by the
    turn once it has saved, its entry marked as stopping meanwhile (see :meth:`SessionManager.await_stopped`)."""
    try:
        yield
        _finished(claim, turn)
    except Exception as exc:
        claim.failed(exc)
        raise
    finally:
        if turn.going_on:  # its task started when the consumer left and did not yield since: still this turn's
            claim.entry.cancel_requested = True
        else:
            claim.release()


def _run(claim: Claim, turn: Turn) -> Generator[Chunk | Reading | None, None, TurnResult]:
    with _held(claim, turn):
        inner = turn.run()
        yield next(inner)  # primed
        yield turn.reading
        result = yield from inner
    return result


async def _arun(claim: Claim, turn: AsyncTurn, result_only: bool
               ) -> AsyncGenerator[Chunk | Reading | Done | None, None]:
    """:func:`_run` on the event loop: None (primed), the :class:`Reading`, the chunks, then :class:`Done` once
    the session is released."""
    turn.when_finished = claim.release  # an abandoned turn frees the session once it is saved
    items = turn.run(chunks=not result_only)
    with _held(claim, turn):
        try:
            yield await items.__anext__()  # primed
            if not result_only:
                yield turn.reading
            async for item in items:
                if isinstance(item, Done):
                    done = item
                else:
                    yield item
        finally:
            await items.aclose()
    yield done


def _finished(claim: Claim, turn: Turn | AsyncTurn) -> None:
    final = turn.final
    assert final is not None  # a finished turn has its last chunk
    claim.sessions.metrics.turn(time.monotonic() - turn.started, final.prefilled, final.reused)
    if turn.delta.reset or turn.delta.dropped:
        claim.entry.digests.clear()  # the session's messages are not the ones digested any more


def _replay(claim: Claim, record: TurnRecord) -> Generator[Chunk | Reading | None, None, TurnResult]:
    """A retried request: the turn it names is already committed; its result, again, read as the turn read it."""
    try:
        yield None
        session = claim.session
        reading = reading_of(record, session.template, session.tools)
        yield reading
        result = result_of(record, reading)
        yield Chunk(text=result.text)
        yield Chunk(finish_reason=result.finish_reason, stop=result.stop, prefilled=result.prefilled,
                    reused=result.reused, cached_from=result.cached_from,
                    cache_miss_reason=result.cache_miss_reason)
        return result
    finally:
        claim.release()


async def _areplay(claim: Claim, record: TurnRecord
                   ) -> AsyncGenerator[Chunk | Reading | Done | None, None]:
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


def _validated(history: list[Mapping[str, object]], tools: list[JSONObject] | None, session: Session
               ) -> list[Message]:
    """The resent conversation, normalised and checked before anything is touched."""
    validate_tools(tools)
    check_tools_supported(session.template, tools)
    sent = hist.from_openai(normalize_messages(history))
    validate_messages([], sent, start=0, max_chars=session.max_message_chars)
    return sent


def _from_history(sessions: StoredSessions, entry: Entry, sent: list[Message],
                  tools: list[JSONObject] | None, budget: int) -> Delta:
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
    fresh = sessions.new_session(session.session_id, tools=tools, template=session.template)
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
