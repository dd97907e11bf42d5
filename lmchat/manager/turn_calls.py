"""The session manager's turn calls: sync, on an asyncio loop, or in a pool worker for an asyncio caller.

Every variant ends in :meth:`TurnCalls._turn`: claim the session (or the one-off), reserve capacity, then
:func:`.claims.start_turn`. :class:`~.core.SessionManager` is the class to use.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import Any

from ..backends.base import Chunk, SamplingParams
from ..errors import CapacityExceeded, SessionNotFound
from ..session import Session
from ..turns.bridge import Done, Pump
from ..turns.turn import TurnResult
from .claims import Claim, start_turn
from .ids import owner_key
from .oneoff import OneOff
from .sessions import Sessions
from .table import Entry, View


class TurnCalls(Sessions):
    """:class:`~.core.SessionManager`'s turns (it sets ``pool``, ``on_loop`` and ``cancel``)."""

    pool: Any
    on_loop: bool

    def stream_turn(self, session_id: str | OneOff, messages: Iterable[Mapping[str, Any]] | None = None,
                    params: SamplingParams | Mapping[str, Any] | None = None, owner: str | None = None,
                    stop: str | Iterable[str] | None = None, max_new_tokens: int | None = None,
                    create: bool = False, history: list[Mapping[str, Any]] | None = None,
                    tools: list[dict] | None = None, idempotency_key: str | None = None,
                    reserved: bool = False, expect: int | None = None,
                    edit: Callable[[View], tuple[Session | None, dict | None] | None] | None = None,
                    note: dict | None = None, kind: Any = ...) -> Iterator[Chunk]:
        """Run one turn: append ``messages``, stream the answer, commit and save it.

        ``session_id``: a session's id, or a :class:`OneOff` (:meth:`oneoff`), whose turn saves nothing.
        ``history`` instead of ``messages``: the whole conversation as an OpenAI
        client resends it (with its ``tools``); the turn is what the session
        does not hold yet, or the session is replaced by it (see
        :mod:`.history`); a missing session is created. ``create``: a session
        id that names no session creates it (LMDeploy clients choose their
        ids). ``idempotency_key``: a retry of the turn that last committed
        with this key returns that turn's result instead of running again.
        ``expect``: run only on this store version of the session, else
        ``SessionMoved`` (a caller that read the session decides from a state
        that is still the session's). ``edit(view)``: the session (and
        ``extra``) the turn starts from, as replacements, either one None to
        keep it (e.g. a copy with another system prompt, made with
        :func:`lmchat.session.edits.restored`, so that its delta resets):
        they replace the session only if the turn starts, and are saved with
        it. ``note``: a JSON object appended to the session's notes when the
        turn is saved, in the same compare-and-set, with the turn's counts
        under ``"turn"`` (:func:`lmchat.turns.turn.record_of` with ``chars``, the
        answer's length, instead of its text). ``kind``: the session's
        ``extra["kind"]`` the turn requires (None: a session with no kind, as
        chat completions and the interactive API make); a session of another
        kind raises ``SessionKindMismatch`` and nothing changes (the default,
        ``...``: any session).
        Errors that stop the turn from starting (``SessionNotFound``,
        ``SessionBusy``, ``CapacityExceeded``, ``InvalidMessages``,
        ``SessionLengthExceeded``) raise here, before the iterator is
        returned, and leave the stored session as it was.
        """
        return self._turn(session_id, messages, params=params, owner=owner, stop=stop,
                          max_new_tokens=max_new_tokens, create=create, history=history, tools=tools,
                          idempotency_key=idempotency_key, reserved=reserved, expect=expect, edit=edit, note=note,
                          kind=kind)

    def _turn(self, session_id: str | OneOff, messages: Iterable[Mapping[str, Any]] | None, *, params=None,
              owner: str | None = None, stop=None, max_new_tokens: int | None = None, create: bool = False,
              history: list[Mapping[str, Any]] | None = None, tools: list[dict] | None = None,
              idempotency_key: str | None = None, reserved: bool = False, expect: int | None = None,
              edit: Callable | None = None, note: dict | None = None, on_loop: bool = False,
              result_only: bool = False, fresh: int | None = None, kind: Any = ...) -> Any:
        """:meth:`stream_turn`; ``on_loop``: the turn as an async iterator to prime at once (see
        :meth:`turn_items`; ``result_only``: without the answer's chunks; ``fresh``: see :meth:`_acquire`)."""
        with self._metrics.counting():
            try:
                claim = self._claim(session_id, owner_key(owner), create or history is not None, tools, fresh)
            except BaseException:
                if reserved:
                    self.unreserve()
                raise
            if not reserved:  # a busy session says so first; then capacity, before any work
                try:
                    self.reserve()
                except CapacityExceeded:
                    claim.unclaim()
                    raise
            return start_turn(claim, messages, params, stop, max_new_tokens, history, tools,
                            idempotency_key, expect, edit, note, on_loop, result_only, kind)

    def _claim(self, session_id: str | OneOff, owner: str, create: bool, tools: list[dict] | None,
               fresh: int | None) -> Claim:
        """The turn's hold on its session: the one-off itself, claimed, or the stored session's entry, claimed
        and fresh from the store (:meth:`_acquire`)."""
        if isinstance(session_id, OneOff):
            session_id.begin(owner)
            return session_id
        return Claim(self, self._acquire(session_id, owner, create, tools, fresh))

    def _entry_of(self, session_id: str | OneOff, owner: str) -> Entry:
        """The one-off's entry (its owner's only), or the stored session's (:meth:`_lookup`)."""
        if isinstance(session_id, OneOff):
            return session_id.entry_for(owner)
        return self._lookup(session_id, owner)

    def run_turn(self, session_id: str | OneOff, messages: Iterable[Mapping[str, Any]] | None = None,
                 **kwargs: Any) -> TurnResult:
        """:meth:`stream_turn`, collected."""
        stream = self.stream_turn(session_id, messages, **kwargs)
        while True:
            try:
                next(stream)
            except StopIteration as done:
                return done.value

    def turn_items(self, session_id: str | OneOff, messages: Iterable[Mapping[str, Any]] | None,
                   kwargs: dict[str, Any]) -> AsyncIterator[Any]:
        """A turn for an asyncio caller: its chunks, then :class:`Done` with its result (what stops the turn
        from starting raises at the first item). On the loop when :attr:`on_loop` (the backend streams
        asynchronously, ``agenerate``, and the store's reads are local, ``loop_safe``), else in a pool
        worker; leaving early cancels the turn, whose partial answer is committed."""
        if self.on_loop:
            return self._loop_items(session_id, messages, kwargs)
        return self.pump(session_id, messages, kwargs).items()

    async def _loop_items(self, session_id: str | OneOff, messages: Iterable[Mapping[str, Any]] | None,
                          kwargs: dict[str, Any], result_only: bool = False) -> AsyncIterator[Any]:
        owner = owner_key(kwargs.get("owner"))
        self.reserve()  # capacity first: a load is work
        fresh = None
        if not isinstance(session_id, OneOff):  # a one-off has nothing to load
            try:
                fresh = await self._awarm(session_id, owner,
                                          kwargs.get("create") or kwargs.get("history") is not None)
            except BaseException:  # cancelled while the session loaded
                self.unreserve()
                raise
        stream = self._turn(session_id, messages, reserved=True, on_loop=True, result_only=result_only, fresh=fresh,
                            **kwargs)
        try:
            await stream.__anext__()  # primed: from here on, closing it runs its cleanup
            async for item in stream:
                yield item
        finally:
            await stream.aclose()

    def pump(self, session_id: str | OneOff, messages: Iterable[Mapping[str, Any]] | None, kwargs: dict[str, Any],
             result_only: bool = False) -> Pump:
        """A turn running in a pool worker, for an asyncio caller (capacity is checked here, at once);
        ``result_only``: its chunks stay in the worker, only the result crosses to the loop."""
        self.reserve()
        owner = kwargs.get("owner")
        return Pump(lambda: self.stream_turn(session_id, messages, reserved=True, **kwargs), self.pool,
                    on_abandon=lambda: self._cancel_quietly(session_id, owner), loop=asyncio.get_running_loop(),
                    result_only=result_only)

    async def astream_turn(self, session_id: str | OneOff, messages: Iterable[Mapping[str, Any]] | None = None,
                           **kwargs: Any):
        """``async for chunk in mgr.astream_turn(...)`` (see :meth:`turn_items`)."""
        items = self.turn_items(session_id, messages, kwargs)
        try:
            async for item in items:
                if not isinstance(item, Done):
                    yield item
        finally:
            await items.aclose()

    async def arun_turn(self, session_id: str | OneOff, messages: Iterable[Mapping[str, Any]] | None = None,
                        **kwargs: Any) -> TurnResult:
        """:meth:`stream_turn`, collected (see :meth:`turn_items`; in a pool worker, only the result crosses
        to the loop)."""
        if not self.on_loop:
            return await self.pump(session_id, messages, kwargs, result_only=True).result()
        async with contextlib.aclosing(self._loop_items(session_id, messages, kwargs, result_only=True)) as items:
            async for item in items:
                if isinstance(item, Done):
                    return item.value
        raise AssertionError("a turn ends with Done")

    def _cancel_quietly(self, session_id: str | OneOff, owner: str | None) -> None:
        with contextlib.suppress(SessionNotFound):
            self.cancel(session_id, owner)
