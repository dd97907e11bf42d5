"""Running a turn's generator in a worker thread and handing its items to a consumer.

One bridge for every caller that runs a turn in a thread: the REPL waits on
it with Ctrl-C turned into a flag, the server's asyncio routes await it when
the turn cannot run on their loop (an engine in this process, a Redis store:
see ``SessionManager.turn_items``). Workers come from a bounded
pool (the session manager's has ``max_active`` threads, reserved before
work is submitted, so nothing ever queues behind a busy pool). The worker
owns the generator: when the consumer goes away (:meth:`Pump.abandon`: a
client disconnected) the worker is told, ``on_abandon`` runs at once (it
cancels the generation), and the worker closes the generator, which then
commits and saves the partial answer.

Crossing to an asyncio loop costs a wake-up of the loop (a write to its
self-pipe, then a thread switch under the GIL); a pump therefore wakes its
loop once per batch, not once per item: the worker appends to a deque and
schedules a wake-up only when none is pending, and the consumer takes
everything there when it wakes. A consumer that wants only the result
(``result_only``) gets :class:`Done` alone: one crossing per turn.
"""
from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

import attrs

Y = TypeVar("Y")  # what the generator yields
A = TypeVar("A")


class Submits(Protocol):
    """Where a :class:`Pump` runs its producer: ``submit(fn, arg)`` (a ``concurrent.futures`` executor, or the
    REPL's daemon threads)."""

    def submit(self, fn: Callable[[A], None], arg: A, /) -> object: ...


@attrs.frozen
class Done:
    """The generator returned ``value``: the last item of a pump."""

    # Any: what a generator returns is no part of an Iterator's type (StopIteration.value); each caller knows it
    # (a TurnResult) and annotates it where it reads it
    value: Any


@attrs.frozen
class _Raised:
    error: BaseException


class Pump(Generic[Y]):
    """``produce()`` (it returns an iterator) runs in a worker; its items, then :class:`Done`, cross over.

    ``loop``: deliver to an asyncio consumer on that loop (iterate with
    ``async for``); None: to a thread, with :meth:`get`. ``result_only``: the
    items are produced (and dropped) in the worker; only :class:`Done` (or the
    error) crosses.
    """

    def __init__(self, produce: Callable[[], Iterator[Y]], executor: Submits, *,
                 on_abandon: Callable[[], object] | None = None, loop: asyncio.AbstractEventLoop | None = None,
                 result_only: bool = False):
        self._loop = loop
        self._queue: queue.SimpleQueue[Y | Done | _Raised] = queue.SimpleQueue()  # a thread consumer's
        # an asyncio consumer's items (deque appends are thread-safe)
        self._pending: deque[Y | Done | _Raised] = deque()
        self._wake_lock = threading.Lock()
        self._wake_scheduled = False
        self._ready = asyncio.Event()  # an asyncio consumer's (bound to a loop only once awaited)
        self._result_only = result_only
        self._on_abandon = on_abandon
        # flags one thread sets and the other reads (never waited on: plain attributes, atomic under the GIL)
        self._abandoned = False
        self._started = False  # the iterator exists: from here on abandoning must cancel it
        self._ended = False
        self.finished = False  # the consumer has seen Done or an error
        executor.submit(self._work, produce)

    # ------------------------------------------------------------------ worker side
    def _put(self, item: Y | Done | _Raised) -> None:
        if self._loop is None:
            self._queue.put(item)
            return
        self._pending.append(item)
        with self._wake_lock:
            if self._wake_scheduled:
                return  # the consumer has not woken yet: it takes this item with the others
            self._wake_scheduled = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is listening any more
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:  # on the loop
        with self._wake_lock:
            self._wake_scheduled = False
        self._ready.set()

    def _work(self, produce: Callable[[], Iterator[Y]]) -> None:
        try:
            iterator = produce()
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which raises it
            self._put(_Raised(exc))
            return
        self._started = True
        try:
            while not self._abandoned:
                try:
                    item = next(iterator)
                except StopIteration as stop:
                    self._ended = True
                    self._put(Done(stop.value))
                    return
                if not self._result_only:
                    self._put(item)
        except BaseException as exc:  # noqa: BLE001
            self._ended = True
            self._put(_Raised(exc))
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()  # after abandonment: the generator cancels, drains, commits and saves

    # ------------------------------------------------------------------ consumer side
    def _take(self, item: Y | Done | _Raised) -> Y | Done:
        if isinstance(item, _Raised):
            self.finished = True
            raise item.error
        if isinstance(item, Done):
            self.finished = True
        return item

    def get(self, timeout: float) -> Y | Done:
        """The next item (a thread consumer); ``queue.Empty`` after ``timeout`` seconds without one."""
        return self._take(self._queue.get(timeout=timeout))

    async def items(self) -> AsyncGenerator[Y | Done, None]:
        """Every item, :class:`Done` last (an asyncio consumer); leaving early abandons the pump."""
        try:
            while not self.finished:
                yield await self._next()
        finally:
            if not self.finished:
                self.abandon()

    async def _next(self) -> Y | Done:
        while not self._pending:
            self._ready.clear()
            if self._pending:  # appended before the clear, its wake-up already consumed
                break
            await self._ready.wait()
        return self._take(self._pending.popleft())

    def abandon(self) -> None:
        """The consumer is gone: stop the worker (the generator is closed, its cleanup runs)."""
        self._abandoned = True
        if self._on_abandon is not None and self._started and not self._ended:
            self._on_abandon()  # at once: the worker only sees the flag between items
