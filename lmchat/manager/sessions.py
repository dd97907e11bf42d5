"""The manager's sessions between memory and the store: look-up, claim, save, discard.

The store is the source of truth; the in-memory copy (an :class:`~.table.Entry`)
never runs ahead of it. A session is claimed (``running``) for a turn or a
delete, checked fresh against the store's version first (a replica may have
saved it since), saved as a patch of the turn when the store appends, and
discarded (to reload) when a turn fails.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

from ..backends.base import Backend
from ..errors import (
    EngineMismatch,
    LmchatError,
    SessionBusy,
    SessionExists,
    SessionMoved,
    SessionNotFound,
    StoreConflict,
)
from ..jsontypes import JSONObject
from ..session import Session
from ..session.vocab import Tokenizer
from ..stores import AsyncStore, SessionStore, Summary, version_of
from ..templates.base import BaseTemplate
from ..turns.result import KeyedRecord, stored_record
from .ids import dump, store_key
from .metrics import Metrics
from .request import Edit
from .table import Entry, Table, View, view

T = TypeVar("T")


class NewSession(Protocol):
    """Makes a session with the manager's defaults (:meth:`SessionManager.new_session`)."""

    def __call__(self, session_id: str | None = None, system: str | None = None,
                 tools: list[JSONObject] | None = None, template: str | BaseTemplate | None = None) -> Session: ...


class StoredSessions:
    """A manager's sessions: the in-memory table over the store, and the claims turns and edits take on them.

    ``new_session(session_id, tools, template)`` makes a session with the manager's defaults (a turn that
    creates its session calls it); an evicted session's cache is dropped from ``backend``.
    """

    def __init__(self, store: SessionStore, backend: Backend, tokenizer: Tokenizer | None, engine: str | None,
                 new_session: NewSession, metrics: Metrics, max_sessions: int, idle_ttl: float | None):
        self.store, self.backend, self.tokenizer, self.engine = store, backend, tokenizer, engine
        self.new_session, self.metrics = new_session, metrics
        self.table = Table(max_sessions, idle_ttl, self._evicted)
        #: the store's writes awaited on an event loop, when it has them (turns on the loop need them)
        self.async_store = store if isinstance(store, AsyncStore) else None

    def add(self, session: Session, owner: str, extra: dict[str, object] | None = None) -> str:
        key = self._new_key(session, owner)
        try:
            version = self.store.save(dump(session, key, owner, self.engine, extra), expected_version=0)
        except StoreConflict:
            raise SessionExists(session.session_id) from None
        return self._added(key, session, version, owner, extra)

    async def awarm(self, session_id: str, owner: str, create: bool = False) -> int | None:
        """Load a session that is not in memory, or that another replica saved since, in a worker thread, for a
        turn on the event loop: the store's read, the fold of its records and the restore are O(session), and
        the loop serves other turns meanwhile. Returns the version the entry is known to hold as stored (the
        turn's :meth:`acquire` then skips its own check), or None. What fails here fails again, and is
        reported, when the turn looks the session up. ``create``: a session the store does not hold has nothing
        to load (its turn creates it)."""
        key = store_key(session_id, owner)
        entry = self.table.get(key)
        with contextlib.suppress(LmchatError):
            if entry is None:
                if not create or self.store.version(key) != 0:
                    await asyncio.to_thread(self.lookup, session_id, owner)
                return None
            version = self.store.version(key)
            if version == entry.version:
                return version
            with entry.lock:
                if entry.running or entry.evicted:
                    return None
                entry.running = True  # claimed while it reloads, freed by the worker (the turn may be cancelled)
            await asyncio.to_thread(self._refresh, entry, version, session_id, owner)
        return None

    def _refresh(self, entry: Entry, version: int, session_id: str, owner: str) -> None:
        try:
            self._freshen(entry, version, session_id, owner)
        finally:
            with entry.lock:
                entry.running = False

    def _new_key(self, session: Session, owner: str) -> str:
        key = store_key(session.session_id, owner)
        if self.table.get(key) is not None:
            raise SessionExists(session.session_id)
        return key

    def _added(self, key: str, session: Session, version: int, owner: str, extra: dict[str, object] | None) -> str:
        session.mark_saved()
        self.table.add(Entry(key, session, version, owner, extra=dict(extra or {})))
        return session.session_id

    def inspect(self, session_id: str, read: Callable[[View], T], owner: str) -> T:
        """``SessionManager.inspect`` (``owner``: an owner key)."""
        entry = self.lookup(session_id, owner)
        with entry.lock:
            idle = not entry.running and not entry.evicted
            if idle:
                result, version = read(view(entry)), entry.version
        if idle and self.store.version(entry.key) == version:
            return result
        return read(view(self._entry(entry.key, self._load(entry.key, session_id, owner), session_id, owner)))

    def update(self, session_id: str, change: Edit, owner: str, expect: int | None = None) -> int:
        """``SessionManager.update`` (``owner``: an owner key)."""
        entry = self.acquire(session_id, owner, False, None)
        try:
            if expect is not None and entry.version != expect:
                raise SessionMoved(session_id, expected=expect, actual=entry.version)
            outcome = change(view(entry))
            if outcome is not None:
                session, extra = outcome
                if session is not None:
                    entry.session, entry.digests = session, []
                if extra is not None:
                    entry.extra = extra
                try:
                    self.save(entry, entry.last_turn)
                except BaseException:
                    self.discard(entry, drop_backend=session is not None)
                    raise
            return entry.version
        finally:
            with entry.lock:
                entry.running = False
            self.table.touch(entry)

    def snapshot(self, session_id: str, owner: str) -> Session:
        entry = self.lookup(session_id, owner)
        with entry.lock:  # an idle session is not mutated while this copies it
            idle = not entry.running and not entry.evicted
            data, version = (entry.session.to_dict(), entry.version) if idle else (None, 0)
        if data is not None and self.store.version(entry.key) == version:
            return Session.from_dict(data, tokenizer=self.tokenizer)
        data = self._load(entry.key, session_id, owner)  # mid-turn or stale: the store has the last commit
        return self._restore(data, session_id)

    def _load(self, key: str, session_id: str, owner: str) -> JSONObject:
        data = self.store.load(key)
        if data is None or (data.get("owner") or "") != owner:
            raise SessionNotFound(session_id)
        return data

    def lookup(self, session_id: str, owner: str) -> Entry:
        key = store_key(session_id, owner)
        entry = self.table.get(key)
        if entry is None:
            data = self._load(key, session_id, owner)
            self.metrics.add(sessions_loaded_total=1)
            entry = self.table.add(self._entry(key, data, session_id, owner))
        if entry.owner != owner:
            raise SessionNotFound(session_id)
        return entry

    def _entry(self, key: str, data: JSONObject, session_id: str, owner: str) -> Entry:
        session = self._restore(data, session_id)
        session.mark_saved()
        extra, notes = data.get("extra"), data.get("notes")  # what this module saved (dump): a dict, a list
        return Entry(key, session, version_of(data), owner, last_turn=stored_record(data.get("last_turn")),
                     extra=extra if isinstance(extra, dict) else {}, notes=notes if isinstance(notes, list) else [])

    def acquire(self, session_id: str, owner: str, create: bool, tools: list[JSONObject] | None,
                 fresh: int | None = None) -> Entry:
        """The session's entry, claimed (``running``) and fresh from the store; created when asked (see
        :meth:`claim_new`). ``fresh``: the stored version :meth:`awarm` just read (no other read when the entry
        still holds it)."""
        key = store_key(session_id, owner)
        while True:
            if create and self.table.get(key) is None and self.store.version(key) == 0:
                entry = self.claim_new(key, session_id, owner, tools)
                if entry is not None:
                    return entry
            try:
                entry = self.lookup(session_id, owner)
            except SessionNotFound:
                if create and self.store.version(key) == 0:
                    continue  # a session created by a turn that failed, gone since the check: create it anew
                raise
            with entry.lock:
                if entry.evicted:
                    continue  # evicted since the lookup: look it up again (it reloads)
                if entry.running:
                    raise SessionBusy(session_id)
                entry.running = True
            break
        try:
            if fresh is None or fresh != entry.version:
                self._freshen(entry, self.store.version(key), session_id, owner)
        except BaseException:
            with entry.lock:
                entry.running = False
            raise
        return entry

    def claim_new(self, key: str, session_id: str, owner: str, tools: list[JSONObject] | None) -> Entry | None:
        """A session that its first turn creates, claimed for that turn; None when another request added one
        first.

        It is held in memory only, at version 0 (nothing stored), until the turn saves it: that save is its
        whole snapshot with compare-and-set on "not stored yet" (a replica that created the id first makes it a
        ``StoreConflict``), so a new session costs its first turn one write, not two (on SQLite, one ``fsync``).
        A turn that ends without saving leaves nothing: the entry is dropped when the turn releases it
        (:meth:`unclaim`).
        """
        entry = Entry(key, self.new_session(session_id, tools=tools), 0, owner, running=True)
        return entry if self.table.add(entry) is entry else None

    def _freshen(self, entry: Entry, version: int, session_id: str, owner: str) -> None:
        """Reload a claimed entry whose stored ``version`` differs from its own: another replica saved (or
        deleted) it since."""
        if version == entry.version:
            return
        data = self.store.load(entry.key)
        if data is None or (data.get("owner") or "") != owner:
            self.table.remove(entry)
            raise SessionNotFound(session_id)
        self.metrics.add(sessions_loaded_total=1)
        fresh = self._entry(entry.key, data, session_id, owner)
        entry.session, entry.version, entry.last_turn, entry.digests = (
            fresh.session, fresh.version, fresh.last_turn, [])
        entry.extra, entry.notes = fresh.extra, fresh.notes

    def unclaim(self, entry: Entry) -> None:
        """Free the session; one its turn created but never saved is forgotten (it never existed)."""
        with entry.lock:
            entry.running = entry.cancel_requested = False
            never_saved = entry.version == 0
            if never_saved:
                entry.evicted = True  # a request that looked it up meanwhile looks again (and may create it)
        if never_saved:
            self.table.remove(entry)
        else:
            self.table.touch(entry)

    def stop(self, entry: Entry) -> bool:
        """Ask the turn holding ``entry`` to stop, the one way every caller does (``cancel``, ``close``, a
        consumer gone from a pool worker's turn): flagged, which the turn reads between chunks and
        :meth:`SessionManager.await_stopped` waits on, and the engine told at once. False when no turn runs."""
        if not entry.running:
            return False
        entry.cancel_requested = True
        self.backend.cancel(entry.key)
        return True

    def save(self, entry: Entry, record: KeyedRecord | None = None, note: dict[str, object] | None = None) -> None:
        """Save the entry's session after a turn: its patch when the store appends, else a whole snapshot.

        ``note`` is appended to the entry's notes in the same save; the entry's ``extra`` is written too.
        """
        is_patch, data, token = self._writes(entry, record, note)
        if not is_patch:
            entry.version = self.store.save(data, expected_version=entry.version, token=token)
        else:
            entry.version = self.store.append(entry.key, data, expected_version=entry.version,
                                              summary=Summary.of_session(entry.session, entry.owner), token=token)
        entry.session.mark_saved()

    async def asave(self, entry: Entry, record: KeyedRecord | None = None,
                    note: dict[str, object] | None = None) -> None:
        """:meth:`save` on the event loop: the store's write is awaited (``aappend``, ``asave``)."""
        store = self.async_store
        if store is None:
            raise TypeError(f"{type(self.store).__name__} has no writes to await (aappend, asave)")
        is_patch, data, token = self._writes(entry, record, note)
        if not is_patch:
            entry.version = await store.asave(data, expected_version=entry.version, token=token)
        else:
            entry.version = await store.aappend(entry.key, data, expected_version=entry.version,
                                                summary=Summary.of_session(entry.session, entry.owner), token=token)
        entry.session.mark_saved()

    def _writes(self, entry: Entry, record: KeyedRecord | None, note: dict[str, object] | None
                ) -> tuple[bool, Mapping[str, object], str | None]:
        """What saving the entry writes: whether it is the turn's patch (else a whole snapshot), the patch or
        the snapshot, and the turn's Idempotency-Key (a retried write is recognised by it)."""
        session = entry.session
        patch = session.changes()
        token = record.get("key") if record else None
        entry.last_turn = record
        if note is not None:
            entry.notes.append(note)
        if patch is None:
            data = dump(session, entry.key, entry.owner, self.engine, entry.extra, entry.notes)
            data["last_turn"] = record
            return False, data, token
        patch["set"]["last_turn"] = record
        if entry.extra:
            patch["set"]["extra"] = entry.extra
        if note is not None:
            patch["lists"]["notes"] = [len(entry.notes) - 1, [note]]
        return True, patch, token

    def discard(self, entry: Entry, *, drop_backend: bool) -> None:
        """Forget the in-memory copy (the caller's turn owns it): the next use reloads the last commit."""
        self.table.remove(entry)
        if drop_backend:
            self.backend.drop(entry.key)

    def _evicted(self, entries: list[Entry]) -> None:
        self.metrics.add(sessions_evicted_total=len(entries))
        for entry in entries:
            self.backend.drop(entry.key)  # an idle session's cache is freed with it

    def _restore(self, data: Mapping[str, object], session_id: str) -> Session:
        stored = data.get("engine")
        if stored and self.engine and stored != self.engine:
            raise EngineMismatch(session_id, stored=str(stored), current=self.engine)
        return Session.from_dict({**data, "session_id": session_id}, tokenizer=self.tokenizer)
