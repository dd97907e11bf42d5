"""One-off sessions: a session for one turn, held only in the manager's memory.

A stateless client (no session id, or a Responses request with ``store: false``)
sends its whole conversation each time, and nobody can ever name the session
its request ran on again. Storing it would cost three writes per request (its
creation, the turn's save, its deletion: three ``fsync`` on SQLite, three round
trips on Redis) for nothing. A :class:`OneOff` is that session without the
store: the store never writes, reads or deletes anything of it. It lives in no
table either: no look-up finds it, nothing lists it, it counts against no
bound of the in-memory table (it evicts no stored session and is never evicted
mid-turn). It still counts against ``max_active`` like any turn, and when its
turn ends, however it ends (answered, cancelled, abandoned by its client,
refused, failed), it is forgotten and the engine is told to drop it, as an
ended session is (the llama.cpp engine keeps what it computed as a prefix for
the client's next request).

It is two things, each where it is used: :class:`OneOff`, the caller's handle
(what :meth:`SessionManager.oneoff` returns, a :class:`~.request.TurnRequest`'s
``session`` and what ``cancel`` names: a turn's target), and
:class:`OneOffClaim`, its turn's hold on it (the turn protocol's owner, made
when the turn begins).
"""
from __future__ import annotations

import attrs

from ..errors import SessionBusy, SessionNotFound
from ..turns.result import TurnRecord
from .capacity import Capacity
from .claims import Claim
from .sessions import StoredSessions
from .table import Entry


@attrs.frozen(eq=False)
class OneOff:
    """A session that lives for one turn, in its manager's memory only (see :meth:`SessionManager.oneoff`).

    Pass it as a :class:`~.request.TurnRequest`'s ``session`` and to ``cancel`` in place of a session id. It
    runs one turn, for its creator's owner only (anybody else's is ``SessionNotFound``); the turn saves nothing
    and ends it however it ends, refused or failed too; a later turn gets ``SessionNotFound``. Made and never
    run (or refused for capacity before its turn began), it holds nothing and needs no clean-up.
    """

    #: the session with what the manager keeps beside it (the manager's own: only it changes it)
    entry: Entry

    @property
    def session_id(self) -> str:
        """Its random id (a Responses request names its response with it); it names nothing once the turn ends."""
        return self.entry.session.session_id

    def entry_for(self, owner: str) -> Entry:
        """Its entry, for its owner only (``owner``: an owner key; anybody else's is ``SessionNotFound``, as for
        another owner's session)."""
        if owner != self.entry.owner:
            raise SessionNotFound(self.session_id)
        return self.entry


class OneOffClaim(Claim):
    """A one-off's turn as the turn protocol's owner: it saves nothing, and ends the session with the turn."""

    @classmethod
    def begin(cls, oneoff: OneOff, owner: str, sessions: StoredSessions, capacity: Capacity) -> OneOffClaim:
        """Its turn begins: the session is ``owner``'s (an owner key) until :meth:`release`; a one-off whose turn
        is over (the session is gone) is ``SessionNotFound``, one whose turn runs ``SessionBusy``."""
        entry = oneoff.entry_for(owner)
        with entry.lock:
            if entry.evicted:
                raise SessionNotFound(oneoff.session_id)
            if entry.running:
                raise SessionBusy(oneoff.session_id)
            entry.running = True
        sessions.table.hold(entry)  # SessionManager.close cancels its turn too
        return cls(sessions, capacity, entry)

    def save(self, record: TurnRecord) -> None:
        """Nothing to save: the session ends with its turn."""

    async def asave(self, record: TurnRecord) -> None:
        """Nothing to save: the session ends with its turn."""

    def discard(self, *, sent: bool) -> None:
        """Nothing to go back to: the session ends with its turn, and :meth:`release` drops it from the engine."""

    def unclaim(self) -> None:
        """The session is gone: its turn is over, or never started."""
        entry = self.entry
        with entry.lock:
            entry.running = entry.cancel_requested = False
            entry.evicted = True
        self.sessions.table.let_go(entry)

    def release(self) -> None:
        """The turn is over: the session is gone, its capacity freed, and the engine drops what it holds of it."""
        super().release()
        self.sessions.backend.drop(self.entry.key)
