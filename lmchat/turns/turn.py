"""One turn, end to end, for the REPL and the session manager alike: delta, stream, commit, save.

A :class:`Turn` is built once its caller owns the session (the REPL always
does; the manager claims it first); building it computes the delta, so
overflow and bad input raise before anything reaches the engine or the
store. :meth:`Turn.run` is a generator, primed past its first ``yield`` by
whoever hands it on, so that closing or dropping it always runs its cleanup:

* never iterated: the prompt reached nobody; the owner restores the session
  as it was (``discard(sent=False)``);
* closed mid-stream (a client disconnect): the generation is cancelled and
  drained, and the partial answer is committed and saved;
* the backend or the save failed: what the engine holds is unknown; the owner
  restores the session as last saved and the backend forgets it
  (``discard(sent=True)``).

The last chunk (with ``finish_reason``) is yielded only once the turn is
saved: a client that saw it can rely on the turn being durable.
"""
from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import AsyncGenerator, Callable, Generator
from typing import Generic, Protocol, TypeVar

import attrs

from ..backends.base import (
    AsyncGenerates,
    Backend,
    Chunk,
    GenerationRequest,
    PrefixCache,
    SamplingParams,
    check_constraint,
)
from ..jsontypes import JSONObject
from ..messages import calls_as
from ..repetition import RepetitionGuard
from ..session import Delta, Session
from ..session.edits import Generation, commit_generation
from ..tools.registry import prompt_opened
from .bridge import Done
from .result import Reading, TurnRecord, TurnResult, record_of


class Holder(Protocol):
    """Whoever holds the session a turn runs on: the REPL's conversation, the manager's claim."""

    @property
    def session(self) -> Session: ...

    @property
    def backend(self) -> Backend: ...

    def discard(self, *, sent: bool) -> None:
        """The turn did not commit: go back to the session as last saved (``sent``: the engine got the delta)."""

    def cancel_requested(self) -> bool:
        """Whether someone asked to stop the turn (checked between chunks)."""

    def failed(self, error: BaseException) -> None:
        """A turn failed where nobody is left to tell (an abandoned stream): count it."""


class Owner(Holder, Protocol):
    """The holder of a :class:`Turn`'s session."""

    def save(self, record: TurnRecord) -> None:
        """Save the committed turn (compare-and-set); a failure raises. ``record`` sums the turn up
        (text, finish reason, counts) for an owner that replays retried turns."""


class AsyncOwner(Holder, Protocol):
    """The holder of an :class:`AsyncTurn`'s session."""

    async def asave(self, record: TurnRecord) -> None:
        """:meth:`Owner.save`, awaited on the event loop."""


#: the tasks finishing abandoned turns (:meth:`AsyncTurn.run`): collected mid-way, a turn would never free its session
_FINISHING: set[asyncio.Task[None]] = set()


H = TypeVar("H", bound=Holder)


class Stage(enum.Enum):
    """Where a running turn is: what ending there, unfinished, undoes (:meth:`_Turn._ended`)."""

    PRIMED = "primed"  # built, not iterated: the prompt reached nobody
    STREAMING = "streaming"  # the engine has the prompt: the answer streams, then is committed and saved
    ABANDONED = "abandoned"  # the consumer left: the rest is drained, committed and saved without it
    SAVED = "saved"  # committed and saved: only the last chunk is left to hand on


#: the consumer left a turn: its generator closed, or its task cancelled
LEFT = (GeneratorExit, asyncio.CancelledError)


class _Turn(Generic[H]):
    """What :class:`Turn` and :class:`AsyncTurn` share: built with its delta (once its owner holds the session),
    then ``run`` streams, commits and saves."""

    def __init__(self, owner: H, start: Callable[[], Delta], params: SamplingParams, *,
                 parse: bool = False, guard: RepetitionGuard | None = None, key: str | None = None,
                 progress: Callable[[int, int], None] | None = None):
        self.owner = owner
        check_constraint(owner.backend, params.constraint)  # before start() changes the session
        session = owner.session
        self.started = time.monotonic()
        self.history = session.step
        self.delta = start()
        session = owner.session  # start() may have replaced it (a resent history, an edit)
        self.prompt_tokens = session.step
        self.request = GenerationRequest.from_session(session, self.delta, params, key, progress)
        #: the delta ends with the prompt this answer follows (Gemma 4's may open its thought channel)
        self.reading = Reading(session.template, session.tools, prompt_opened(session.template, self.delta.text))
        self.parse, self.guard = parse, guard
        self.texts: list[str] = []
        self.ids: list[int] = []
        self.final: Chunk | None = None
        self.first_chunk: float | None = None  # when output began (generation speed)
        self.stage = Stage.PRIMED

    @property
    def session_id(self) -> str:
        return self.request.session_id

    def _take(self, chunk: Chunk) -> bool:
        """Record ``chunk``; whether it goes to the consumer now (the last one waits for the save)."""
        self._record(chunk)
        # repeated: the backend may have registered the generation late
        if self.owner.cancel_requested() or (self.guard is not None and self.guard.tripped):
            self.owner.backend.cancel(self.session_id)
        return chunk.finish_reason is None and bool(chunk.text or chunk.token_ids)

    @property
    def going_on(self) -> bool:
        """Whether the turn goes on without its consumer (an abandoned :class:`AsyncTurn`, finishing in its own
        task): its owner frees the session when it is saved, not when the consumer left."""
        return False

    def _abandon(self) -> None:
        """The consumer left mid-stream: the engine stops; what it generated is still committed and saved."""
        self.stage = Stage.ABANDONED
        self.owner.backend.cancel(self.session_id)

    def _ended(self, exc: BaseException) -> None:
        """The one rule of both twins for a turn that ends unfinished, by its stage: left before the engine got the
        prompt, the session goes back as it was; failed (the engine or the save), or left while saving (the save's
        outcome unknown), what the engine holds is unknown and memory must not run ahead of the store: both restart
        from the last saved turn; left mid-stream or after the save, nothing (the partial answer was committed)."""
        if isinstance(exc, LEFT):
            if self.stage is Stage.PRIMED:
                self.owner.discard(sent=False)
            elif self.stage is Stage.STREAMING:
                self.owner.discard(sent=True)
        else:
            self.owner.discard(sent=True)

    def _failed(self, exc: BaseException) -> None:
        """The engine or the store failed while an abandoned turn stopped: nobody is left to tell."""
        self.owner.discard(sent=True)
        self.owner.failed(exc)

    def _record(self, chunk: Chunk) -> None:
        if self.first_chunk is None and (chunk.text or chunk.token_ids):
            self.first_chunk = time.monotonic()
        self.texts.append(chunk.text)
        self.ids.extend(chunk.token_ids)
        if self.guard is not None and chunk.text:
            self.guard.feed(chunk.text)
        if chunk.finish_reason is not None:
            self.final = chunk

    def _commit(self) -> TurnResult:
        """Commit what the engine holds (an end marker only when the model emitted one); the owner saves it."""
        session, final = self.owner.session, self.final
        if final is None:  # a stream cut short (cancelled, or a backend that ended without its last chunk)
            final = Chunk(finish_reason="cancelled")
        if self.guard is not None and self.guard.tripped and final.finish_reason == "cancelled":
            final = attrs.evolve(final, finish_reason="repetition")
        finish_reason = final.finish_reason or "cancelled"  # self.final is a chunk with one
        text = "".join(self.texts)
        parsed = self.reading.parse(text) if self.parse else None
        fields: JSONObject = {}
        if parsed is not None and finish_reason == "stop" and parsed.tool_calls:
            # the conversation keeps the parsed calls, so tool results can answer their ids;
            # the context keeps the raw text, as the engine holds it
            fields = {"content": parsed.content,
                      "tool_calls": calls_as(parsed.tool_calls, session.template.call_arguments)}
            if parsed.reasoning_content is not None:
                fields["reasoning_content"] = parsed.reasoning_content
        commit_generation(session, Generation(text, tuple(self.ids), finish_reason, final.stop), **fields)
        after_commit(self.owner.backend, self.request.session_id, session, tools_called=bool(fields))
        reason = final.cache_miss_reason or self.delta.reason  # the engine's own reason is the more precise
        if reason is self.delta.reason and self.delta.reset and final.reused and final.cached_from not in (None,
                                                                                                      "session"):
            # the session held nothing of its own (a branch, a resumed session), but the engine found its prompt in
            # another sequence's cache, host memory or a KV file: nothing was missed
            reason = None
        if final.cache_miss_reason != reason:  # most turns miss nothing: no copy (evolve is slow)
            final = attrs.evolve(final, cache_miss_reason=reason)
        self.final = final
        result = TurnResult(
            text=text, token_ids=tuple(self.ids), finish_reason=finish_reason, stop=final.stop,
            prompt_tokens=self.prompt_tokens, prefilled=final.prefilled, reused=final.reused,
            history_tokens=self.history, parsed=parsed, cache_miss_reason=reason, cached_from=final.cached_from,
        )
        return result



class Turn(_Turn[Owner]):
    """One turn, for a caller in a thread (the REPL, a manager's synchronous callers, its pool workers)."""

    def run(self) -> Generator[Chunk | None, None, TurnResult]:
        """Yields None once (primed), then the answer's chunks; returns the :class:`TurnResult`."""
        backend = self.owner.backend
        try:
            yield None  # primed by the caller: everything before this raised eagerly
            self.stage = Stage.STREAMING
            chunks = iter(backend.generate(self.request))
            try:
                for chunk in chunks:
                    if self._take(chunk):
                        yield chunk
            except GeneratorExit:  # the consumer left: what the engine generates is still committed
                self._abandon()
                try:
                    for chunk in chunks:
                        self._record(chunk)
                    self.owner.save(record_of(self._commit(), self.reading))
                except Exception as exc:  # noqa: BLE001 - the engine or the store failed while stopping
                    self._failed(exc)
                raise
            result = self._commit()
            self.owner.save(record_of(result, self.reading))
            self.stage = Stage.SAVED
            yield self.final
            return result
        except BaseException as exc:
            self._ended(exc)
            raise


class AsyncTurn(_Turn[AsyncOwner]):
    """One turn on an event loop, over a backend that streams asynchronously (:class:`AsyncGenerates`)."""

    def __init__(self, owner: AsyncOwner, start: Callable[[], Delta], params: SamplingParams, *,
                 parse: bool = False, guard: RepetitionGuard | None = None, key: str | None = None):
        super().__init__(owner, start, params, parse=parse, guard=guard, key=key)
        #: the task finishing an abandoned turn (see :meth:`run`), and what it calls last
        self.finishing: asyncio.Task[None] | None = None
        self.when_finished: Callable[[], object] | None = None

    @property
    def going_on(self) -> bool:
        return self.finishing is not None

    async def run(self, chunks: bool = True) -> AsyncGenerator[Chunk | Done | None, None]:
        """:meth:`Turn.run` on an event loop, over the backend's ``agenerate`` and the owner's ``asave``:
        None once (primed), the answer's chunks (``chunks=False``: the last one only), then :class:`Done`
        with the result.

        The consumer leaving mid-stream (closing it, or its task cancelled) hands the rest of the turn
        to a task of its own, :attr:`finishing`: it drains the cancelled engine, commits and saves the
        partial answer, then calls :attr:`when_finished`. The caller's cancelled task could not wait
        for either: a cancelled anyio scope (Starlette's streamed responses) cancels every later await
        of the task that is in it.
        """
        backend = self.owner.backend
        if not isinstance(backend, AsyncGenerates):
            raise TypeError(f"{type(backend).__name__} cannot stream to an event loop (no agenerate)")
        try:
            yield None
            self.stage = Stage.STREAMING
            stream = backend.agenerate(self.request)
            try:
                async for chunk in stream:
                    if self._take(chunk) and chunks:
                        yield chunk
            except LEFT:
                self._abandon()
                self.finishing = asyncio.get_running_loop().create_task(self._finish_abandoned(stream))
                _FINISHING.add(self.finishing)  # the loop keeps only a weak reference to a task
                self.finishing.add_done_callback(_FINISHING.discard)
                raise
            finally:
                if self.finishing is None:
                    await stream.aclose()
            result = self._commit()
            await self.owner.asave(record_of(result, self.reading))
            self.stage = Stage.SAVED
            yield self.final
            yield Done(result)
        except BaseException as exc:
            self._ended(exc)
            raise

    async def _finish_abandoned(self, stream: AsyncGenerator[Chunk, None]) -> None:
        try:
            async for chunk in stream:  # an engine that was cancelled mid-await has ended already
                self._record(chunk)
            await self.owner.asave(record_of(self._commit(), self.reading))
        except BaseException as exc:  # noqa: BLE001 - the engine or the store failed while stopping
            self._failed(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            try:
                await stream.aclose()
            finally:
                if self.when_finished is not None:
                    self.when_finished()


def after_commit(backend: Backend, key: str, session: Session, tools_called: bool) -> None:
    """What a committed answer tells a backend that keeps a prefix cache (every turn calls it; so do the tests'
    helpers): its client is off running the tools it called (evict it last); its ids drifted from the canonical
    encoding (swap those in now, before any next prompt of the conversation arrives)."""
    if not isinstance(backend, PrefixCache):
        return
    if tools_called:
        backend.awaiting_tools(key)
    if (rewind := session.drift_rewind) is not None:
        backend.rewind(key, *rewind)
