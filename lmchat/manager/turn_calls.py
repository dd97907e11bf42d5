"""The session manager's turns: claimed, then run in the caller's thread, on its event loop, or in a pool worker.

A synchronous caller's turn runs in its thread (:meth:`TurnCalls.stream`). An asyncio caller's runs where the
manager decided once, when it was made, from what its backend and store declare: on the loop
(:class:`LoopTurns`) when the backend streams asynchronously (:class:`~lmchat.backends.AsyncGenerates`) and the
store's writes can be awaited and its reads are local (:class:`~lmchat.stores.AsyncStore`, ``loop_safe``);
else in a pool worker (:class:`PoolTurns`). Both give the same items: how the answer reads
(:class:`~lmchat.turns.result.Reading`), its chunks, then :class:`~lmchat.turns.Done` with the result.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping
from typing import Protocol

from ..backends.base import Chunk
from ..errors import CapacityExceeded, SessionNotFound
from ..turns.bridge import Done, Pump
from ..turns.result import Reading, TurnResult
from .capacity import Capacity
from .claims import Claim, astart_turn, start_turn
from .ids import owner_key
from .oneoff import OneOff, OneOffClaim
from .request import Target, TurnRequest
from .sessions import StoredSessions


class TurnCalls:
    """Claims a turn's session and capacity, then starts the turn (``model``: the backend's sampling values over
    the template's; ``cancel(session, owner)``: the manager's :meth:`~.core.SessionManager.cancel`)."""

    def __init__(self, sessions: StoredSessions, capacity: Capacity, model: Mapping[str, object],
                 cancel: Callable[[Target, str | None], bool]):
        self.sessions, self.capacity, self.model, self._cancel = sessions, capacity, model, cancel

    def stream(self, request: TurnRequest, *, reserved: bool = False) -> Iterator[Chunk | Reading]:
        """The turn, primed, in the caller's thread: how its answer reads, its chunks, and the :class:`TurnResult`
        it returns. What stops it from starting raises here. ``reserved``: its capacity is reserved already."""
        with self.sessions.metrics.counting():
            return start_turn(self.claim(request, reserved=reserved), request, self.model)

    def claim(self, request: TurnRequest, *, reserved: bool, fresh: int | None = None) -> Claim:
        """The turn's hold on its session, and its capacity (reserved here unless ``reserved``): a busy session
        says so first, then capacity, before any work. ``fresh``: see :meth:`StoredSessions.acquire`."""
        try:
            claim = self._hold(request, fresh)
        except BaseException:
            if reserved:
                self.capacity.release()
            raise
        if not reserved:
            try:
                self.capacity.reserve()
            except CapacityExceeded:
                claim.unclaim()
                raise
        return claim

    def _hold(self, request: TurnRequest, fresh: int | None) -> Claim:
        """The one-off's turn, begun, or the stored session's entry, claimed and fresh from the store."""
        owner = owner_key(request.owner)
        if isinstance(request.session, OneOff):
            return OneOffClaim.begin(request.session, owner, self.sessions, self.capacity)
        entry = self.sessions.acquire(request.session, owner, request.creates, request.tools, fresh)
        return Claim(self.sessions, self.capacity, entry)

    def reserve(self) -> None:
        """Capacity for an asyncio caller's turn, at once (a load from the store is work); a refusal is counted."""
        with self.sessions.metrics.counting():
            self.capacity.reserve()

    def cancel_quietly(self, request: TurnRequest) -> None:
        """Stop the turn whose consumer left (it may be over already)."""
        with contextlib.suppress(SessionNotFound):
            self._cancel(request.session, request.owner)


class AsyncTurns(Protocol):
    """Where an asyncio caller's turns run (:class:`LoopTurns` or :class:`PoolTurns`)."""

    def items(self, request: TurnRequest, result_only: bool = False
              ) -> AsyncGenerator[Chunk | Reading | Done, None]:
        """How the turn's answer reads (:class:`Reading`) and its chunks (neither when ``result_only``), then
        :class:`Done` with its :class:`TurnResult`; what stops it from starting raises at the first item; leaving
        early cancels the turn, whose partial answer is committed."""


class LoopTurns:
    """Turns on the caller's event loop: the store's loads in a worker thread, the rest awaited on the loop."""

    def __init__(self, calls: TurnCalls):
        self.calls = calls

    async def items(self, request: TurnRequest, result_only: bool = False
                    ) -> AsyncGenerator[Chunk | Reading | Done, None]:
        calls = self.calls
        calls.reserve()
        fresh = None
        if not isinstance(request.session, OneOff):  # a one-off has nothing to load
            try:
                fresh = await calls.sessions.awarm(request.session, owner_key(request.owner), request.creates)
            except BaseException:  # cancelled while the session loaded
                calls.capacity.release()
                raise
        with calls.sessions.metrics.counting():
            stream = astart_turn(calls.claim(request, reserved=True, fresh=fresh), request, calls.model,
                                 result_only)
        try:
            await stream.__anext__()  # primed: from here on, closing it runs its cleanup
            async for item in stream:
                if item is not None:
                    yield item
        finally:
            await stream.aclose()


class PoolTurns:
    """Turns in a worker of the manager's pool, for a backend or a store that would block the loop."""

    def __init__(self, calls: TurnCalls):
        self.calls = calls

    def items(self, request: TurnRequest, result_only: bool = False
              ) -> AsyncGenerator[Chunk | Reading | Done, None]:
        calls = self.calls
        calls.reserve()
        return Pump(lambda: calls.stream(request, reserved=True), calls.capacity.pool,
                    on_abandon=lambda: calls.cancel_quietly(request), loop=asyncio.get_running_loop(),
                    result_only=result_only).items()


class TurnStream:
    """An asyncio caller's turn (``SessionManager.astream_turn``): ``async for chunk in stream``, then
    :attr:`result`.

    :meth:`start` waits for the first chunk: what stops the turn from starting (an unknown or busy session,
    capacity, bad messages, overflow) raises there, while a server can still answer with an HTTP status. The
    last chunk (with ``finish_reason``) comes once the turn has saved and released its session: a client that
    sends its next turn on seeing it never finds the session busy. Leaving early (:meth:`aclose`, or the task
    being cancelled) cancels the turn; its partial answer is committed. Once started, :attr:`reading` says how
    its answer reads (a server parses the stream with it: the result is parsed so).
    """

    def __init__(self, items: AsyncGenerator[Chunk | Reading | Done, None]):
        self._items = items
        self._started = False
        self._first: Chunk | None = None
        self._result: TurnResult | None = None
        self._reading: Reading | None = None

    async def start(self) -> TurnStream:
        """Wait for the first chunk (once); returns the stream."""
        if not self._started:
            self._started = True
            try:
                self._first = await self._following()
            except BaseException:
                await self._items.aclose()
                raise
        return self

    @property
    def result(self) -> TurnResult:
        """The finished turn (once the stream is exhausted)."""
        if self._result is None:
            raise RuntimeError("the turn has not finished: iterate over its stream first")
        return self._result

    @property
    def reading(self) -> Reading:
        """How the turn reads its answer, decided when it started (once :meth:`start` returned)."""
        if self._reading is None:
            raise RuntimeError("the turn has not started: await its start() first")
        return self._reading

    def __aiter__(self) -> TurnStream:
        return self

    async def __anext__(self) -> Chunk:
        if not self._started:
            await self.start()
        chunk, self._first = self._first, None
        if chunk is None:
            chunk = await self._following()
        if chunk is None:
            raise StopAsyncIteration
        return chunk

    async def aclose(self) -> None:
        """Leave the turn (it is cancelled, and its partial answer committed, unless it has finished). A stream
        dropped without it is closed too, when collected."""
        await self._items.aclose()

    async def _following(self) -> Chunk | None:
        """The next chunk; None once the turn is done (its result kept)."""
        if self._result is not None:
            return None
        try:
            item = await self._items.__anext__()
            if isinstance(item, Reading):  # the turn's first item
                self._reading = item
                item = await self._items.__anext__()
        except StopAsyncIteration:
            return None
        if isinstance(item, Reading):
            raise AssertionError("a turn reads its answer one way")
        if isinstance(item, Done):
            self._result = item.value
            return None
        if item.finish_reason is not None:  # the last chunk: handed on once the turn has released the session
            done = await self._items.__anext__()
            assert isinstance(done, Done)  # every turn's items end so
            self._result = done.value
        return item
