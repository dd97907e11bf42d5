"""asyncio access to turns: the blocking turn runs in its own thread, chunks cross over a queue.

A thread per turn (not the loop's default executor, which has a handful of
workers) so ``max_active`` turns really run at once and a refused turn is
refused at once instead of waiting for a worker. The worker owns the turn:
when the consumer goes away (its task cancelled on a client disconnect, or
the iterator dropped) the worker is told, the backend is cancelled at once,
and the worker closes the turn, which commits and saves the partial answer.
"""
from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any, AsyncIterator

import attrs

from ..backends.base import Chunk

if TYPE_CHECKING:
    from .core import SessionManager
    from .turn import TurnResult


@attrs.frozen
class _Done:
    result: TurnResult


async def _items(mgr: SessionManager, session_id: str, messages, kwargs: dict[str, Any]) -> AsyncIterator[Any]:
    """The turn's chunks, then a :class:`_Done` with its result; errors are re-raised here."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    abandoned = threading.Event()
    # between the two, the turn holds the session: cancelling the backend is ours to do
    started, ended = threading.Event(), threading.Event()

    def put(item: Any) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            pass

    def work() -> None:
        try:
            stream = mgr.stream_turn(session_id, messages, **kwargs)
        except BaseException as exc:
            put(exc)
            return
        started.set()
        try:
            while not abandoned.is_set():
                try:
                    chunk = next(stream)
                except StopIteration as done:
                    ended.set()
                    put(_Done(done.value))
                    return
                put(chunk)
        except BaseException as exc:
            ended.set()
            put(exc)
        finally:
            stream.close()  # after abandonment: cancels, drains, commits and saves the partial answer

    threading.Thread(target=work, name="lmchat-turn", daemon=True).start()
    finished = False
    try:
        while True:
            item = await queue.get()
            if isinstance(item, BaseException):
                finished = True
                raise item
            if isinstance(item, _Done):
                finished = True
            yield item
            if finished:
                return
    finally:
        if not finished:
            abandoned.set()
            if started.is_set() and not ended.is_set():
                mgr.backend.cancel(session_id)  # at once: the worker only sees the flag between chunks


async def chunks(mgr: SessionManager, session_id: str, messages, kwargs: dict[str, Any]) -> AsyncIterator[Chunk]:
    items = _items(mgr, session_id, messages, kwargs)
    try:
        async for item in items:
            if not isinstance(item, _Done):
                yield item
    finally:
        await items.aclose()


async def result(mgr: SessionManager, session_id: str, messages, kwargs: dict[str, Any]) -> TurnResult:
    items = _items(mgr, session_id, messages, kwargs)
    try:
        async for item in items:
            if isinstance(item, _Done):
                return item.result
    finally:
        await items.aclose()
    raise AssertionError("a turn's stream ended without its result")  # _items always ends with _Done or raises
