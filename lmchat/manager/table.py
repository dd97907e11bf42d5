"""The sessions a manager keeps in memory: an LRU bounded in size, with idle expiry.

Eviction only forgets the in-memory copy: every committed turn is already in
the store, so an evicted session reloads on its next use. A session is only
evicted while idle: under the entry's ``lock`` the evictor checks that no turn
``running`` and marks it ``evicted``, which a turn that looked the entry up
just before checks under the same lock before it claims the session.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

import attrs

from ..messages import Message
from ..session import Session
from ..turns.result import KeyedRecord


@attrs.define(eq=False, slots=True)
class Entry:
    """One session in memory: its state, the store version it matches, and who may see it."""

    key: str  # the session's key in the store and the backend: its id, within its owner's namespace (a one-off's:
    # in the backend only, see ``oneoff_key``)
    session: Session
    version: int  # the store version this state was saved as (the next save's expected_version)
    owner: str  # the owner key ('' for none), see ``owner_key``
    # guards ``running``/``evicted`` and reads of an idle session; held briefly, never across a turn
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    running: bool = False  # a turn (or a delete) owns the session; others get SessionBusy
    evicted: bool = False
    cancel_requested: bool = False
    last_used: float = attrs.field(factory=time.monotonic)
    #: the last turn's idempotency key and result (a retried turn returns it instead of running again)
    last_turn: KeyedRecord | None = None
    #: a digest of each message as a client sees it, for matching resent histories (filled lazily)
    digests: list[str] = attrs.field(factory=list)
    #: the caller's JSON kept with the session (snapshot key ``extra``), see ``SessionManager.update``
    extra: dict[str, object] = attrs.field(factory=dict)
    #: one JSON note per noted turn (snapshot key ``notes``, appended with the turn), see ``TurnRequest.note``
    notes: list[object] = attrs.field(factory=list)


@attrs.frozen
class View:
    """A session with what the manager keeps beside it, as ``inspect``, ``update`` and turn edits see it.

    The objects are the manager's own (or a copy loaded from the store): read them, never change them.
    """

    session: Session
    extra: dict[str, object]
    notes: list[object]
    version: int  # the store version this state is

    @property
    def messages(self) -> int:
        """How many messages the session holds (O(1), where ``len(session.messages)`` copies them)."""
        return len(self.session._chat.messages)

    def slice(self, start: int, stop: int | None = None) -> list[Message]:
        """Copies of messages ``[start:stop]`` (O(stop - start), where ``session.messages`` copies them all)."""
        return [dict(m) for m in self.session._chat.messages[start:stop]]


def view(entry: Entry) -> View:
    return View(entry.session, entry.extra, entry.notes, entry.version)


class Table:
    """Thread-safe map of session key -> :class:`Entry`, least recently used first; and the one-offs whose turn
    is running (:class:`~.oneoff.OneOff`), apart: no look-up finds them, they count against no bound and are
    never evicted, and only :meth:`entries` (what ``SessionManager.close`` cancels) shows them."""

    def __init__(self, max_sessions: int, idle_ttl: float | None, on_evict: Callable[[list[Entry]], None]):
        self.max_sessions = max_sessions
        self.idle_ttl = idle_ttl
        self._on_evict = on_evict  # told outside the lock (it may call the backend)
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._oneoffs: set[Entry] = set()

    def __len__(self) -> int:
        """The stored sessions in memory (the one-offs running are not counted)."""
        return len(self._entries)

    def entries(self) -> list[Entry]:
        """Every entry, the running one-offs' too."""
        with self._lock:
            return [*self._entries.values(), *self._oneoffs]

    def hold(self, entry: Entry) -> None:
        """A one-off's turn began."""
        with self._lock:
            self._oneoffs.add(entry)

    def let_go(self, entry: Entry) -> None:
        """A one-off's turn is over (a no-op the second time)."""
        with self._lock:
            self._oneoffs.discard(entry)

    def get(self, session_id: str) -> Entry | None:
        self.sweep()
        with self._lock:
            entry = self._entries.get(session_id)
            if entry is not None:
                self._entries.move_to_end(session_id)
            return entry

    def add(self, entry: Entry) -> Entry:
        """Keep ``entry``, or return the one another thread added first for the same id."""
        with self._lock:
            sid = entry.key
            existing = self._entries.get(sid)
            if existing is not None:
                self._entries.move_to_end(sid)
                return existing
            self._entries[sid] = entry
            evicted = self._evict(lambda e, size: size > self.max_sessions)
        if evicted:
            self._on_evict(evicted)
        return entry

    def touch(self, entry: Entry) -> None:
        """A turn ended: the session is the most recently used."""
        with self._lock:
            entry.last_used = time.monotonic()
            if not entry.evicted:
                self._entries.move_to_end(entry.key)

    def remove(self, entry: Entry) -> None:
        """Forget ``entry`` (the caller owns it: ``running`` is its own)."""
        with self._lock:
            entry.evicted = True
            sid = entry.key
            if self._entries.get(sid) is entry:
                del self._entries[sid]

    def sweep(self) -> None:
        """Evict sessions idle for longer than ``idle_ttl``."""
        if self.idle_ttl is None:
            return
        cutoff = time.monotonic() - self.idle_ttl
        with self._lock:
            evicted = self._evict(lambda e, size: e.last_used < cutoff)
        if evicted:
            self._on_evict(evicted)

    def _evict(self, wanted: Callable[[Entry, int], bool]) -> list[Entry]:
        """Evict idle entries, least recently used first, while ``wanted(entry, size)`` (lock held).

        Entries are ordered by last use, so the first entry not wanted ends the
        scan: eviction costs O(evicted + busy entries skipped), not O(sessions).
        """
        victims: list[Entry] = []
        size = len(self._entries)
        for entry in self._entries.values():
            if not wanted(entry, size - len(victims)):
                break
            if not entry.lock.acquire(blocking=False):  # being read or claimed: not idle now
                continue
            if entry.running:  # never evicted mid-turn
                entry.lock.release()
            else:
                victims.append(entry)  # its lock is kept until it is marked and removed
        for entry in victims:
            entry.evicted = True
            del self._entries[entry.key]
            entry.lock.release()
        return victims
