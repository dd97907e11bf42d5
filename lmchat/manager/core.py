"""The session manager: many sessions, one backend, one store, for servers.

The store is the source of truth. Every committed turn is saved with
compare-and-set on the version the manager last saw (as a patch of the
turn: O(turn), see :mod:`lmchat.session.patches`), and the in-memory copy
never runs ahead of it: a failed turn or save discards the copy, which then
reloads from the store. Before each turn the manager compares the stored
version with its own (one cheap read), so replicas sharing a store (Redis)
continue each other's sessions; two replicas racing on one session both
generate, but only the first save lands and the other gets
:class:`StoreConflict`, so a turn is never appended twice.

Owners: ``owner`` (e.g. an API key) is stored only as a hash, and session ids
live in their owner's namespace: two owners may use the same id, and neither
can learn that the other's exists. ``None`` is its own owner.

One-offs (:meth:`SessionManager.oneoff`, :mod:`.oneoff`): a session for one
turn that the store never sees, for requests that name no session.
"""
from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping
from typing import Any, TypeVar, cast

import attrs

from ..backends.base import (
    AsyncGenerates,
    Backend,
    Chunk,
    GenerationRequest,
    PrefixCache,
    SamplingParams,
    model_sampling,
)
from ..errors import ConfigError, SessionNotFound
from ..jsontypes import JSONObject
from ..registry import as_template
from ..session import Session, SessionPolicy
from ..session.edits import restored
from ..session.snapshot import messages_of
from ..session.state import Held
from ..session.vocab import Tokenizer
from ..stores import AsyncStore, Expiring, MemoryStore, SessionInfo, SessionStore
from ..templates.base import BaseTemplate
from ..turns.bridge import Done, Pump
from ..turns.result import TurnResult
from ..validation import check_tools_supported
from .capacity import Capacity
from .ids import checked_id, oneoff_key, owner_key, public_id, store_key
from .metrics import Metrics
from .oneoff import OneOff
from .request import ANY_KIND, AnyKind, Edit, Target, TurnRequest, check_kind
from .sessions import StoredSessions
from .table import Entry, View
from .turn_calls import AsyncTurns, LoopTurns, PoolTurns, TurnCalls, TurnStream

T = TypeVar("T")


@attrs.frozen
class ManagerLimits:
    """How many sessions a manager holds and for how long. ``max_sessions``: kept in memory (past it the least
    recently used idle ones leave, still stored); ``max_active``: turns at once (one more raises
    ``CapacityExceeded``); ``idle_ttl``: seconds idle before a session leaves memory (None: never);
    ``store_ttl``: seconds after its last save before the store forgets a session (None: never; a store that
    can expire them, RedisStore, only)."""

    max_sessions: int = 10_000
    max_active: int = 64
    idle_ttl: float | None = None
    store_ttl: float | None = None


class SessionManager:
    """See ``docs/manager.md``. Thread-safe; the ``a*`` methods serve asyncio callers."""

    def __init__(
        self, backend: Backend, template: str | BaseTemplate = "smollm2", store: SessionStore | None = None,
        tokenizer: Tokenizer | None = None, limits: ManagerLimits | None = None,
        session_defaults: SessionPolicy | None = None,
        engine: str | None = None, on_loop: bool | None = None, sampling: Mapping[str, object] | None = None,
    ):
        self.backend = backend
        #: what generates the answers (e.g. ``embedded:SmolLM2-135M-Instruct.gguf``); stored with each session,
        #: which another engine then refuses to continue (None: not checked)
        self.engine = engine
        self.template = template
        self.store: SessionStore = MemoryStore() if store is None else store
        self.limits = limits = limits or ManagerLimits()
        if limits.store_ttl is not None:
            if not isinstance(self.store, Expiring):
                raise ConfigError(f"{type(self.store).__name__} cannot expire sessions (RedisStore can)",
                                  field="store_ttl")
            self.store.ttl = limits.store_ttl
        self.tokenizer = tokenizer if tokenizer is not None else backend.tokenizer
        #: the limits and policies of every session this manager makes (a stored one keeps its own)
        self.session_defaults = session_defaults or SessionPolicy()
        Session(template, policy=self.session_defaults)  # a bad template fails here, not on the first request
        able = isinstance(backend, AsyncGenerates) and isinstance(self.store, AsyncStore) and self.store.loop_safe
        if on_loop and not able:
            raise ConfigError(f"turns run on the event loop only with a backend that has agenerate() and a store "
                              f"whose reads are local ({type(backend).__name__}, {type(self.store).__name__})",
                              field="on_loop")
        #: asyncio callers' turns run on their event loop, without a worker thread (decided here, once)
        self.on_loop = able if on_loop is None else on_loop
        self._metrics = Metrics()
        self._sessions = StoredSessions(self.store, backend, self.tokenizer, engine, self.new_session, self._metrics,
                                        limits.max_sessions, limits.idle_ttl)
        self._capacity = Capacity(limits.max_active)
        #: sampling values over the templates' (``lmchat serve --temperature``...): a turn's are the template's, the
        #: model's (:func:`~lmchat.backends.base.model_sampling`), these, then the request's
        self.sampling: JSONObject = dict(sampling or {})
        self._turns = TurnCalls(self._sessions, self._capacity, {**model_sampling(backend), **self.sampling},
                                self.cancel)
        self._async_turns: AsyncTurns = LoopTurns(self._turns) if self.on_loop else PoolTurns(self._turns)

    # ------------------------------------------------------------------ turns
    def stream_turn(self, request: TurnRequest) -> Iterator[Chunk]:
        """Run one turn (see :class:`TurnRequest`): its answer's chunks; the generator returns the
        :class:`TurnResult` once the turn is committed and saved. Errors that stop the turn from starting
        (``SessionNotFound``, ``SessionBusy``, ``CapacityExceeded``, ``InvalidMessages``,
        ``SessionLengthExceeded``...) raise here, before the iterator is returned, and leave the stored session
        as it was. Closing the iterator early cancels the turn; its partial answer is committed and saved."""
        stream = self._turns.stream(request)
        next(stream)  # how the answer reads: a caller in a thread has it parsed in the result
        return cast(Iterator[Chunk], stream)

    def run_turn(self, request: TurnRequest) -> TurnResult:
        """:meth:`stream_turn`, collected."""
        stream = self.stream_turn(request)
        while True:
            try:
                next(stream)
            except StopIteration as done:
                result: TurnResult = done.value
                return result

    def astream_turn(self, request: TurnRequest) -> TurnStream:
        """:meth:`stream_turn` for an asyncio caller: ``async for chunk in mgr.astream_turn(request)``, then the
        stream's ``result`` (``await stream.start()`` first: what stops the turn from starting raises there). On
        the event loop when :attr:`on_loop`, else in a pool worker."""
        return TurnStream(self._async_turns.items(request))

    async def arun_turn(self, request: TurnRequest) -> TurnResult:
        """:meth:`astream_turn`, collected (in a pool worker, only the result crosses to the loop)."""
        async with contextlib.aclosing(self._async_turns.items(request, result_only=True)) as items:
            async for item in items:
                if isinstance(item, Done):
                    result: TurnResult = item.value
                    return result
        raise AssertionError("a turn ends with Done")

    async def agenerate(self, request: GenerationRequest) -> AsyncGenerator[Chunk, None]:
        """A raw generation (no template, no session: ``/v1/completions``), for an asyncio caller: counted
        against ``max_active`` like a turn, in a worker of the pool; leaving early cancels it, and the backend
        forgets ``request.session_id`` either way."""
        self._turns.reserve()
        backend = self.backend

        def produce() -> Iterator[Chunk]:
            try:
                yield from backend.generate(request)
            finally:
                backend.drop(request.session_id)
                self._capacity.release()

        items = Pump(produce, self._capacity.pool, on_abandon=lambda: backend.cancel(request.session_id),
                     loop=asyncio.get_running_loop())
        async for item in items.items():
            if not isinstance(item, Done):
                yield item

    # ------------------------------------------------------------------ sessions
    def new_session(self, session_id: str | None = None, system: str | None = None,
                    tools: list[JSONObject] | None = None, template: str | BaseTemplate | None = None) -> Session:
        """A session with this manager's defaults (not stored: :meth:`create` stores one)."""
        session = Session(template or self.template, system=system, tools=tools, session_id=checked_id(session_id),
                          tokenizer=self.tokenizer, policy=self.session_defaults)
        check_tools_supported(session.template, tools)  # a template without tool syntax would ignore them
        return session

    def create(self, session_id: str | None = None, owner: str | None = None, system: str | None = None,
               tools: list[JSONObject] | None = None, template: str | BaseTemplate | None = None,
               extra: dict[str, object] | None = None) -> str:
        """A new, saved session; returns its id (``SessionExists`` when the owner has one by that id).
        ``extra``: JSON the manager keeps beside the session (see :meth:`update`)."""
        with self._metrics.counting():
            return self._sessions.add(self.new_session(session_id, system, tools, template), owner_key(owner), extra)

    def get(self, session_id: str, owner: str | None = None) -> Session:
        """A copy of the session as last committed (mid-turn: the state before the turn)."""
        with self._metrics.counting():
            return self._sessions.snapshot(session_id, owner_key(owner))

    @property
    def default_template(self) -> BaseTemplate:
        """The template a new session renders with: ``template`` itself, or an instance of the name it gives."""
        return as_template(self.template)

    def default_sampling(self) -> SamplingParams:
        """What a turn of a new session samples with when its request gives no value: the default template's
        bundled values, the model's, :attr:`sampling`, the session defaults' answer budget."""
        return SamplingParams.from_template(self.default_template, **self._turns.model,
                                            max_new_tokens=self.session_defaults.max_new_tokens or None)

    @property
    def session_len(self) -> int | None:
        """The most a new session may hold (``session_defaults``, else the default template's): what ``/v1/models``
        gives as the model's context length."""
        return self.session_defaults.session_len or self.default_template.session_len

    def template_of(self, session_id: str, owner: str | None = None) -> BaseTemplate:
        """The template the session renders with (the manager's for a session not created yet)."""
        try:
            return self._sessions.lookup(session_id, owner_key(owner)).session.template
        except SessionNotFound:
            return self.default_template

    def find(self, session_id: str, owner: str | None = None) -> Session | None:
        """Like :meth:`get`, but None when there is no such session (a miss is not an error)."""
        try:
            return self._sessions.snapshot(session_id, owner_key(owner))
        except SessionNotFound:
            return None

    def end(self, session_id: str, owner: str | None = None, kind: str | None | AnyKind = ANY_KIND) -> None:
        """Delete the session from memory and the store; the backend forgets it. ``kind``: as a turn's
        (:attr:`TurnRequest.kind`), checked on the session as stored: a session of another API raises
        ``SessionKindMismatch`` and stays."""
        with self._metrics.counting():
            # claimed like a turn (no turn starts while the session is deleted), and as stored (another replica
            # may have saved it since)
            entry = self._sessions.acquire(session_id, owner_key(owner), False, None)
            try:
                check_kind(session_id, entry.extra, kind)
                self.store.delete(entry.key)
                self._sessions.table.remove(entry)
            finally:
                with entry.lock:
                    entry.running = False
            self.backend.drop(entry.key)

    def fork(self, session_id: str, new_id: str | None = None, owner: str | None = None, at: int | None = None,
             extra: dict[str, object] | None = None) -> str:
        """The conversation as last committed, under a new id (its first delta resets); ``at``: only its
        first ``at`` messages (a branch from an earlier turn); ``extra`` as in :meth:`create` (the
        parent's extra and notes are not copied)."""
        with self._metrics.counting():
            return self._sessions.add(self._forked(session_id, new_id, owner_key(owner), at), owner_key(owner), extra)

    def oneoff(self, owner: str | None = None, system: str | None = None, tools: list[JSONObject] | None = None,
               template: str | BaseTemplate | None = None, extra: dict[str, object] | None = None,
               parent: str | None = None, at: int | None = None) -> OneOff:
        """A session for one turn, held in this manager's memory only: pass it to a turn method (and to
        :meth:`cancel`) in place of a session id. The store never writes, reads or deletes anything of it, no
        look-up or list finds it, and once its turn ends, however it ends, it is forgotten and the backend
        drops it. A new session (``system``, ``tools``, ``template`` as in :meth:`create`), or with ``parent``
        a copy of that stored session as :meth:`fork` makes it (``at`` too), which is only read. ``extra``: as
        in :meth:`create`, for the turn's ``edit``. See :mod:`lmchat.manager.oneoff`."""
        with self._metrics.counting():
            okey = owner_key(owner)
            if parent is None:
                session = self.new_session(None, system, tools, template)
            elif system is not None or tools is not None or template is not None:
                raise ConfigError("a copy of a session keeps its system prompt, tools and template", field="parent")
            else:
                session = self._forked(parent, None, okey, at)
            return OneOff(Entry(oneoff_key(session.session_id, okey), session, 0, okey, extra=dict(extra or {})))

    def _forked(self, session_id: str, new_id: str | None, owner: str, at: int | None) -> Session:
        """The session as last committed, under ``new_id`` (None: a random one), cut at ``at`` (see :meth:`fork`)."""
        data = self._sessions.snapshot(session_id, owner).to_dict()
        reason = f"forked from session {session_id}"
        if at is not None:
            messages = messages_of(data)
            if not 0 <= at <= len(messages):
                raise ConfigError(f"cannot fork at message {at} of {len(messages)}", field="at")
            data["messages"] = messages[:at]
            data.update(Held().to_dict(with_ids=data.get("context_ids") is not None))  # holds nothing yet
            reason += f" at message {at}"
        data["session_id"] = checked_id(new_id)
        return restored(data, self.tokenizer, reason)

    def inspect(self, session_id: str, read: Callable[[View], T], owner: str | None = None) -> T:
        """``read(view)`` on the session as last committed, with its ``extra`` and notes (see :class:`View`).

        An idle session in memory is read in place, under its lock (``read`` must be quick and change
        nothing: O(what it reads), not a copy of the history); one mid-turn, or saved since by another
        replica, is read from a copy loaded from the store.
        """
        return self._sessions.inspect(session_id, read, owner_key(owner))

    def update(self, session_id: str, change: Edit, owner: str | None = None, expect: int | None = None) -> int:
        """Change a session between turns: ``change(view)`` returns replacements of the session and its
        ``extra`` (either one None to keep it), or None to change nothing.

        Claimed like a turn (``SessionBusy`` while one runs), fresh from the store, saved with
        compare-and-set (``expect`` as in :class:`TurnRequest`); a failed save leaves the session as it
        was stored. A replaced session is saved whole and its first delta should reset (make it with
        :func:`lmchat.session.edits.restored`); ``extra`` alone is a patch where the store appends.
        Returns the session's version afterwards.
        """
        return self._sessions.update(session_id, change, owner_key(owner), expect)

    def list(self, owner: str | None = None, limit: int = 100) -> list[SessionInfo]:
        """The owner's sessions in the store, most recently saved first."""
        with self._metrics.counting():
            infos = self.store.list(limit, owner=owner_key(owner))
            return [SessionInfo(public_id(i.id), i.title, i.turns, i.updated_at, i.template, i.version, i.owner)
                    for i in infos]

    def cancel(self, session_id: Target, owner: str | None = None, kind: str | None | AnyKind = ANY_KIND
               ) -> bool:
        """Stop the turn running on this replica for the session (or the one-off); False when none runs here.
        ``kind``: as in :meth:`end` (another API's turn is not stopped)."""
        with self._metrics.counting():
            okey = owner_key(owner)
            if isinstance(session_id, OneOff):
                entry = session_id.entry_for(okey)
            else:
                entry = self._sessions.lookup(session_id, okey)
                check_kind(session_id, entry.extra, kind)  # a session's kind is set when it is made, never changed
            return self._sessions.stop(entry)

    async def await_stopped(self, session_id: Target, owner: str | None = None, timeout: float = 5.0,
                            grace: float = 0.1) -> bool:
        """Wait while a turn asked to stop (:meth:`cancel`, or its consumer left) still holds the session: it
        commits and saves its partial answer first. True once nothing holds the session; False when the turn
        holding it is not asked to stop within ``grace`` seconds (a server notices a client that left a few
        milliseconds late), or still holds it after ``timeout``. A server calls it when a turn finds the session
        busy: a client that left a turn and sends the next one at once then waits for the partial answer
        instead of getting ``SessionBusy``."""
        entry: Entry | None
        if isinstance(session_id, OneOff):
            entry = session_id.entry_for(owner_key(owner))
        else:
            entry = self._sessions.table.get(store_key(session_id, owner_key(owner)))
        begun = time.monotonic()
        while entry is not None and entry.running:
            waited = time.monotonic() - begun
            if waited >= timeout or (waited >= grace and not entry.cancel_requested):
                return False
            await asyncio.sleep(0.005)
        return True

    # ------------------------------------------------------------------ service
    def occupancy(self) -> dict[str, int]:
        """The sessions held in memory and those running a turn: the manager's own counts, which ``/health``
        reports without waiting for the engine (whose stats are read between two of its steps)."""
        self._sessions.table.sweep()
        return {"sessions_in_memory": len(self._sessions.table), "sessions_active": self._capacity.active}

    # Any: the engine's stats (PrefixCache.stats), JSON read by name
    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.occupancy(), **self._metrics.snapshot()}
        if isinstance(self.backend, PrefixCache):
            out["kv"] = self.backend.stats()
        return out

    def close(self, grace: float = 5.0) -> None:
        """Cancel running turns, give them ``grace`` seconds to save, then close the store and the backend."""
        for entry in self._sessions.table.entries():
            self._sessions.stop(entry)
        deadline = time.monotonic() + grace
        while self._capacity.active and time.monotonic() < deadline:
            time.sleep(0.01)
        self._capacity.close()
        self.store.close()
        self.backend.close()

