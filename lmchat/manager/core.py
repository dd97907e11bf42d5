"""The session manager: many sessions, one backend, one store, for servers.

The store is the source of truth. Every committed turn is saved with
compare-and-set on the version the manager last saw, and the in-memory copy
never runs ahead of it: a failed turn or save discards the copy, which then
reloads from the store. Before each turn the manager compares the stored
version with its own (one cheap read), so replicas sharing a store (Redis)
continue each other's sessions; two replicas racing on one session both
generate, but only the first save lands and the other gets
:class:`StoreConflict`, so a turn is never appended twice.

Owners: ``owner`` (e.g. an API key) is stored only as a hash; a session is
visible to exactly the owner that created it (``None`` is its own owner, the
unauthenticated one), others get :class:`SessionNotFound`.
"""
from __future__ import annotations

import contextlib
import copy
import threading
import time
from typing import Any, Iterable, Iterator, Mapping

from ..backends.base import Backend, Chunk, SamplingParams
from ..errors import (
    CapacityExceeded, EngineMismatch, SessionBusy, SessionExists, SessionNotFound, StoreConflict, ConfigError,
)
from ..session.edits import restored
from ..session import Session
from ..stores import VERSION_KEY, MemoryStore, SessionInfo, SessionStore
from ..templates.base import BaseTemplate
from . import aio
from .ids import checked_id, dump, owner_key
from .metrics import Metrics
from .table import Entry, Table
from .turn import Turn, TurnResult, sampling

#: Session keyword arguments a manager applies to all its sessions
SESSION_DEFAULTS = ("session_len", "overflow", "max_new_tokens", "injection", "max_message_chars", "drift")


class SessionManager:
    """See ``docs/manager.md``. Thread-safe; the ``a*`` methods serve asyncio callers."""

    def __init__(
        self, backend: Backend, template: str | BaseTemplate = "smollm2", store: SessionStore | None = None,
        tokenizer: Any = None, max_sessions: int = 10_000, max_active: int = 64, idle_ttl: float | None = None,
        store_ttl: float | None = None, session_defaults: Mapping[str, Any] | None = None,
        engine: str | None = None,
    ):
        self.backend = backend
        #: what generates the answers (e.g. ``embedded:SmolLM2-135M-Instruct.gguf``); stored with each session,
        #: which another engine then refuses to continue (None: not checked)
        self.engine = engine
        self.template = template
        self.store = MemoryStore() if store is None else store
        if store_ttl is not None:
            if not hasattr(self.store, "ttl"):
                raise ConfigError(
                    f"{type(self.store).__name__} cannot expire sessions (RedisStore can)", field="store_ttl"
                )
            self.store.ttl = store_ttl
        self.tokenizer = tokenizer if tokenizer is not None else getattr(backend, "tokenizer", None)
        self.session_defaults = dict(session_defaults or {})
        unknown = sorted(set(self.session_defaults) - set(SESSION_DEFAULTS))
        if unknown:
            raise ConfigError(f"unknown {unknown} (known: {', '.join(SESSION_DEFAULTS)})",
                                      field="session_defaults")
        Session(template, **self.session_defaults)  # bad defaults fail here, not on the first request
        self.max_active = max_active
        self._table = Table(max_sessions, idle_ttl, self._evicted)
        self._metrics = Metrics()
        self._lock = threading.Lock()
        self._active = 0

    # ------------------------------------------------------------------ sessions
    def create(self, session_id: str | None = None, owner: str | None = None, system: str | None = None,
               tools: list[dict] | None = None, template: str | BaseTemplate | None = None) -> str:
        """A new, saved session; returns its id (``SessionExists`` when taken)."""
        with self._metrics.counting():
            sid = checked_id(session_id)
            session = Session(template or self.template, system=system, tools=tools, session_id=sid,
                              tokenizer=self.tokenizer, **self.session_defaults)
            return self._add(session, owner_key(owner))

    def get(self, session_id: str, owner: str | None = None) -> Session:
        """A copy of the session as last committed (mid-turn: the state before the turn)."""
        with self._metrics.counting():
            return self._snapshot(session_id, owner_key(owner))

    def find(self, session_id: str, owner: str | None = None) -> Session | None:
        """Like :meth:`get`, but None when there is no such session (a miss is not an error)."""
        try:
            return self._snapshot(session_id, owner_key(owner))
        except SessionNotFound:
            return None

    def end(self, session_id: str, owner: str | None = None) -> None:
        """Delete the session from memory and the store; the backend forgets it."""
        with self._metrics.counting():
            entry = self._lookup(session_id, owner_key(owner))
            with entry.lock:
                if entry.running:
                    raise SessionBusy(session_id)
                entry.running = True  # no turn starts while the session is deleted
            try:
                self.store.delete(session_id)
                self._table.remove(entry)
            finally:
                with entry.lock:
                    entry.running = False
            self.backend.drop(session_id)

    def fork(self, session_id: str, new_id: str | None = None, owner: str | None = None) -> str:
        """The conversation as last committed, under a new id (its first delta resets)."""
        with self._metrics.counting():
            data = self._snapshot(session_id, owner_key(owner)).to_dict()
            data["session_id"] = checked_id(new_id)
            session = restored(data, self.tokenizer, f"forked from session {session_id}")
            return self._add(session, owner_key(owner))

    def list(self, owner: str | None = None, limit: int = 100) -> list[SessionInfo]:
        """The owner's sessions in the store, most recently saved first."""
        with self._metrics.counting():
            return self.store.list(limit, owner=owner_key(owner))

    def cancel(self, session_id: str, owner: str | None = None) -> bool:
        """Stop the turn running on this replica for the session; False when none runs here."""
        with self._metrics.counting():
            entry = self._lookup(session_id, owner_key(owner))
            if not entry.running:
                return False
            entry.cancel_requested = True
            self.backend.cancel(session_id)
            return True

    # ------------------------------------------------------------------ turns
    def stream_turn(self, session_id: str, messages: Iterable[Mapping[str, Any]],
                    params: SamplingParams | Mapping[str, Any] | None = None, owner: str | None = None,
                    stop: str | Iterable[str] | None = None, max_new_tokens: int | None = None,
                    create: bool = False) -> Iterator[Chunk]:
        """Run one turn: append ``messages``, stream the answer, commit and save it.

        Errors that stop the turn from starting (``SessionNotFound``,
        ``SessionBusy``, ``CapacityExceeded``, ``InvalidMessages``,
        ``SessionLengthExceeded``) raise here, before the iterator is returned.
        ``create``: a session id that names no session creates it (LMDeploy
        clients choose their ids), instead of ``SessionNotFound``.
        """
        with self._metrics.counting():
            if create and self._table.get(session_id) is None and self.store.version(session_id) == 0:
                with contextlib.suppress(SessionExists):  # another request created it first
                    self.create(session_id, owner)
            entry = self._acquire(session_id, owner_key(owner))
            try:
                turn = Turn(self, entry, messages, sampling(entry.session, params, stop, max_new_tokens))
            except BaseException:
                if entry.session.pending:  # extend() succeeded, what followed did not: drop the prompt
                    self._discard(entry, drop_backend=False)
                self._release(entry)  # a failed extend() leaves the session as it was
                raise
            stream = turn.run()
            next(stream)  # started: closing or dropping it now always runs its cleanup
            return stream

    def run_turn(self, session_id: str, messages: Iterable[Mapping[str, Any]], **kwargs: Any) -> TurnResult:
        """:meth:`stream_turn`, collected."""
        stream = self.stream_turn(session_id, messages, **kwargs)
        while True:
            try:
                next(stream)
            except StopIteration as done:
                return done.value

    def astream_turn(self, session_id: str, messages: Iterable[Mapping[str, Any]], **kwargs: Any):
        """``async for chunk in mgr.astream_turn(...)``: the turn runs in a worker thread."""
        return aio.chunks(self, session_id, messages, kwargs)

    async def arun_turn(self, session_id: str, messages: Iterable[Mapping[str, Any]], **kwargs: Any) -> TurnResult:
        return await aio.result(self, session_id, messages, kwargs)

    # ------------------------------------------------------------------ service
    def metrics(self) -> dict:
        self._table.sweep()
        with self._lock:
            active = self._active
        return {"sessions_in_memory": len(self._table), "sessions_active": active, **self._metrics.snapshot()}

    def close(self, grace: float = 5.0) -> None:
        """Cancel running turns, give them ``grace`` seconds to save, then close the store and the backend."""
        for entry in self._table.entries():
            if entry.running:
                entry.cancel_requested = True
                self.backend.cancel(entry.session.session_id)
        deadline = time.monotonic() + grace
        while self._active and time.monotonic() < deadline:
            time.sleep(0.01)
        self.store.close()
        self.backend.close()

    # ------------------------------------------------------------------ internals
    def _add(self, session: Session, owner: str) -> str:
        sid = session.session_id
        if self._table.get(sid) is not None:
            raise SessionExists(sid)
        try:
            version = self.store.save(dump(session, owner, self.engine), expected_version=0)
        except StoreConflict:
            raise SessionExists(sid) from None
        self._table.add(Entry(session, version, owner))
        return sid

    def _snapshot(self, session_id: str, owner: str) -> Session:
        entry = self._lookup(session_id, owner)
        with entry.lock:  # an idle session is not mutated while this copies it
            idle = not entry.running and not entry.evicted
            data, version = (copy.deepcopy(entry.session.to_dict()), entry.version) if idle else (None, 0)
        if data is not None and self.store.version(session_id) == version:
            return self._restore(data)
        data = self.store.load(session_id)  # mid-turn or stale: the store has the last commit
        if data is None or (data.get("owner") or "") != owner:
            raise SessionNotFound(session_id)
        return self._restore(data)

    def _lookup(self, session_id: str, owner: str) -> Entry:
        entry = self._table.get(session_id)
        if entry is None:
            data = self.store.load(session_id)
            if data is None or (data.get("owner") or "") != owner:
                raise SessionNotFound(session_id)
            self._metrics.add(sessions_loaded_total=1)
            entry = self._table.add(Entry(self._restore(data), data[VERSION_KEY], data.get("owner") or ""))
        if entry.owner != owner:
            raise SessionNotFound(session_id)
        return entry

    def _acquire(self, session_id: str, owner: str) -> Entry:
        """The session's entry, claimed (``running``), fresh from the store, counted as active."""
        while True:
            entry = self._lookup(session_id, owner)
            with entry.lock:
                if entry.evicted:
                    continue  # evicted since the lookup: look it up again (it reloads)
                if entry.running:
                    raise SessionBusy(session_id)
                entry.running = True
            break
        with self._lock:
            full = self._active >= self.max_active
            self._active += not full
        if full:
            with entry.lock:
                entry.running = False
            raise CapacityExceeded(self.max_active)
        try:
            version = self.store.version(session_id)
            if version != entry.version:  # another replica saved it (or deleted it) since
                data = self.store.load(session_id)
                if data is None or (data.get("owner") or "") != owner:
                    self._table.remove(entry)
                    raise SessionNotFound(session_id)
                self._metrics.add(sessions_loaded_total=1)
                entry.session, entry.version = self._restore(data), data[VERSION_KEY]
        except BaseException:
            self._release(entry)
            raise
        return entry

    def _release(self, entry: Entry) -> None:
        with entry.lock:
            entry.running = entry.cancel_requested = False
        self._table.touch(entry)
        with self._lock:
            self._active -= 1

    def _save(self, entry: Entry) -> None:
        entry.version = self.store.save(dump(entry.session, entry.owner, self.engine), expected_version=entry.version)

    def _discard(self, entry: Entry, *, drop_backend: bool) -> None:
        """Forget the in-memory copy (the caller's turn owns it): the next use reloads the last commit."""
        self._table.remove(entry)
        if drop_backend:
            self.backend.drop(entry.session.session_id)

    def _evicted(self, entries: list[Entry]) -> None:
        self._metrics.add(sessions_evicted_total=len(entries))
        for entry in entries:
            self.backend.drop(entry.session.session_id)  # an idle session's cache is freed with it

    def _restore(self, data: Mapping[str, Any]) -> Session:
        stored = data.get("engine")
        if stored and self.engine and stored != self.engine:
            raise EngineMismatch(data.get("session_id", "?"), stored=stored, current=self.engine)
        return Session.from_dict(data, tokenizer=self.tokenizer)
