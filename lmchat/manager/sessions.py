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
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import (CapacityExceeded, EngineMismatch, LmchatError, SessionBusy, SessionExists, SessionMoved,
                      SessionNotFound, StoreConflict)
from ..session import Session
from ..stores import VERSION_KEY, Summary
from .ids import dump, owner_key, store_key
from .table import Entry, View, view


class Sessions:
    """What :class:`~.core.SessionManager` builds on (it sets the attributes used here)."""

    backend: Any
    store: Any
    engine: str | None
    tokenizer: Any
    max_active: int
    _table: Any
    _metrics: Any
    _lock: threading.Lock
    _active: int

    def new_session(self, session_id: str | None = None, **kwargs: Any) -> Session:
        raise NotImplementedError  # the manager's, with its defaults

    def reserve(self) -> None:
        """Count one more turn (or one-off generation) running; ``CapacityExceeded`` at ``max_active``."""
        with self._lock:
            if self._active >= self.max_active:
                raise CapacityExceeded(self.max_active)
            self._active += 1

    def unreserve(self) -> None:
        with self._lock:
            self._active -= 1

    def _add(self, session: Session, owner: str, extra: dict | None = None) -> str:
        key = self._new_key(session, owner)
        try:
            version = self.store.save(dump(session, key, owner, self.engine, extra), expected_version=0)
        except StoreConflict:
            raise SessionExists(session.session_id) from None
        return self._added(key, session, version, owner, extra)

    async def _awarm(self, session_id: str, owner: str, create: bool = False) -> int | None:
        """Load a session that is not in memory, or that another replica saved since, in a worker thread, for a
        turn on the event loop: the store's read, the fold of its records and the restore are O(session), and
        the loop serves other turns meanwhile. Returns the version the entry is known to hold as stored (the
        turn's :meth:`_acquire` then skips its own check), or None. What fails here fails again, and is
        reported, when the turn looks the session up. ``create``: a session the store does not hold has nothing
        to load (its turn creates it)."""
        key = store_key(session_id, owner)
        entry = self._table.get(key)
        with contextlib.suppress(LmchatError):
            if entry is None:
                if not create or self.store.version(key) != 0:
                    await asyncio.to_thread(self._lookup, session_id, owner)
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
        if self._table.get(key) is not None:
            raise SessionExists(session.session_id)
        return key

    def _added(self, key: str, session: Session, version: int, owner: str, extra: dict | None) -> str:
        session.mark_saved()
        self._table.add(Entry(key, session, version, owner, extra=dict(extra or {})))
        return session.session_id

    def inspect(self, session_id: str, read: Callable[[View], Any], owner: str | None = None) -> Any:
        """``read(view)`` on the session as last committed, with its ``extra`` and notes (see :class:`View`).

        An idle session in memory is read in place, under its lock (``read`` must be quick and change
        nothing: O(what it reads), not a copy of the history); one mid-turn, or saved since by another
        replica, is read from a copy loaded from the store.
        """
        owner = owner_key(owner)
        entry = self._lookup(session_id, owner)
        with entry.lock:
            idle = not entry.running and not entry.evicted
            result = read(view(entry)) if idle else None
            version = entry.version
        if idle and self.store.version(entry.key) == version:
            return result
        return read(view(self._entry(entry.key, self._load(entry.key, session_id, owner), session_id, owner)))

    def update(self, session_id: str, change: Callable[[View], tuple[Session | None, dict | None] | None],
               owner: str | None = None, expect: int | None = None) -> int:
        """Change a session between turns: ``change(view)`` returns replacements of the session and its
        ``extra`` (either one None to keep it), or None to change nothing.

        Claimed like a turn (``SessionBusy`` while one runs), fresh from the store, saved with
        compare-and-set (``expect`` as in :meth:`stream_turn`); a failed save leaves the session as it
        was stored. A replaced session is saved whole and its first delta should reset (make it with
        :func:`lmchat.session.edits.restored`); ``extra`` alone is a patch where the store appends.
        Returns the session's version afterwards.
        """
        entry = self._acquire(session_id, owner_key(owner), False, None)
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
            self._table.touch(entry)

    def _snapshot(self, session_id: str, owner: str) -> Session:
        entry = self._lookup(session_id, owner)
        with entry.lock:  # an idle session is not mutated while this copies it
            idle = not entry.running and not entry.evicted
            data, version = (entry.session.to_dict(), entry.version) if idle else (None, 0)
        if data is not None and self.store.version(entry.key) == version:
            return Session.from_dict(data, tokenizer=self.tokenizer)
        data = self._load(entry.key, session_id, owner)  # mid-turn or stale: the store has the last commit
        return self._restore(data, session_id)

    def _load(self, key: str, session_id: str, owner: str) -> dict:
        data = self.store.load(key)
        if data is None or (data.get("owner") or "") != owner:
            raise SessionNotFound(session_id)
        return data

    def _lookup(self, session_id: str, owner: str) -> Entry:
        key = store_key(session_id, owner)
        entry = self._table.get(key)
        if entry is None:
            data = self._load(key, session_id, owner)
            self._metrics.add(sessions_loaded_total=1)
            entry = self._table.add(self._entry(key, data, session_id, owner))
        if entry.owner != owner:
            raise SessionNotFound(session_id)
        return entry

    def _entry(self, key: str, data: dict, session_id: str, owner: str) -> Entry:
        session = self._restore(data, session_id)
        session.mark_saved()
        return Entry(key, session, data[VERSION_KEY], owner, last_turn=data.get("last_turn"),
                     extra=data.get("extra") or {}, notes=data.get("notes") or [])

    def _acquire(self, session_id: str, owner: str, create: bool, tools: list[dict] | None,
                 fresh: int | None = None) -> Entry:
        """The session's entry, claimed (``running``) and fresh from the store; created when asked (see
        :meth:`_claim_new`). ``fresh``: the stored version :meth:`_awarm` just read (no other read when the entry
        still holds it)."""
        key = store_key(session_id, owner)
        while True:
            if create and self._table.get(key) is None and self.store.version(key) == 0:
                entry = self._claim_new(key, session_id, owner, tools)
                if entry is not None:
                    return entry
            try:
                entry = self._lookup(session_id, owner)
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

    def _claim_new(self, key: str, session_id: str, owner: str, tools: list[dict] | None) -> Entry | None:
        """A session that its first turn creates, claimed for that turn; None when another request added one
        first.

        It is held in memory only, at version 0 (nothing stored), until the turn saves it: that save is its
        whole snapshot with compare-and-set on "not stored yet" (a replica that created the id first makes it a
        ``StoreConflict``), so a new session costs its first turn one write, not two (on SQLite, one ``fsync``).
        A turn that ends without saving leaves nothing: the entry is dropped when the turn releases it
        (:meth:`unclaim`).
        """
        entry = Entry(key, self.new_session(session_id, tools=tools), 0, owner, running=True)
        return entry if self._table.add(entry) is entry else None

    def _freshen(self, entry: Entry, version: int, session_id: str, owner: str) -> None:
        """Reload a claimed entry whose stored ``version`` differs from its own: another replica saved (or
        deleted) it since."""
        if version == entry.version:
            return
        data = self.store.load(entry.key)
        if data is None or (data.get("owner") or "") != owner:
            self._table.remove(entry)
            raise SessionNotFound(session_id)
        self._metrics.add(sessions_loaded_total=1)
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
            self._table.remove(entry)
        else:
            self._table.touch(entry)

    def save(self, entry: Entry, record: dict | None = None, note: dict | None = None) -> None:
        """Save the entry's session after a turn: its patch when the store appends, else a whole snapshot.

        ``note`` is appended to the entry's notes in the same save; the entry's ``extra`` is written too.
        """
        snapshot, patch, token = self._writes(entry, record, note)
        if patch is None:
            entry.version = self.store.save(snapshot, expected_version=entry.version, token=token)
        else:
            entry.version = self.store.append(entry.key, patch, expected_version=entry.version,
                                              summary=Summary.of_session(entry.session, entry.owner), token=token)
        entry.session.mark_saved()

    async def asave(self, entry: Entry, record: dict | None = None, note: dict | None = None) -> None:
        """:meth:`save` on the event loop: the store's write is awaited (``aappend``, ``asave``)."""
        snapshot, patch, token = self._writes(entry, record, note)
        if patch is None:
            entry.version = await self.store.asave(snapshot, expected_version=entry.version, token=token)
        else:
            entry.version = await self.store.aappend(entry.key, patch, expected_version=entry.version,
                                                     summary=Summary.of_session(entry.session, entry.owner),
                                                     token=token)
        entry.session.mark_saved()

    def _writes(self, entry: Entry, record: dict | None, note: dict | None) -> tuple[dict | None, dict | None,
                                                                                      str | None]:
        """What saving the entry writes: (a whole snapshot, None) or (None, the turn's patch), and the turn's
        Idempotency-Key (a retried write is recognised by it)."""
        session = entry.session
        patch = session.changes()
        token = (record or {}).get("key")
        entry.last_turn = record
        if note is not None:
            entry.notes.append(note)
        if patch is None:
            data = dump(session, entry.key, entry.owner, self.engine, entry.extra, entry.notes)
            data["last_turn"] = record
            return data, None, token
        patch["set"]["last_turn"] = record
        if entry.extra:
            patch["set"]["extra"] = entry.extra
        if note is not None:
            patch["lists"]["notes"] = [len(entry.notes) - 1, [note]]
        return None, patch, token

    def discard(self, entry: Entry, *, drop_backend: bool) -> None:
        """Forget the in-memory copy (the caller's turn owns it): the next use reloads the last commit."""
        self._table.remove(entry)
        if drop_backend:
            self.backend.drop(entry.key)

    def _evicted(self, entries: list[Entry]) -> None:
        self._metrics.add(sessions_evicted_total=len(entries))
        for entry in entries:
            self.backend.drop(entry.key)  # an idle session's cache is freed with it

    def _restore(self, data: Mapping[str, Any], session_id: str) -> Session:
        stored = data.get("engine")
        if stored and self.engine and stored != self.engine:
            raise EngineMismatch(session_id, stored=stored, current=self.engine)
        return Session.from_dict({**data, "session_id": session_id}, tokenizer=self.tokenizer)
