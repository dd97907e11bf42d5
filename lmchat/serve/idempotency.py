"""Requests with an ``Idempotency-Key`` that are being answered: a retry waits for its first attempt.

A turn saved with a key is answered again from the store to a retry with that key (``chains.replayed`` for
Responses, the session's last turn for chat and the interactive API). A retry that arrives while its first
attempt still runs finds nothing stored yet: run, it would answer a second turn (a branch of the chain, or
``session_busy``). So a request with a key holds it (per API key) from before it reads the store until its
turn is saved, streamed or not; another request with the same key waits for it to let go, up to
:data:`WAIT_SECONDS` (``$LMCHAT_IDEMPOTENCY_WAIT``), then reads what the first stored (its answer, or nothing
when it failed: then the retry runs). Waiting longer is ``RequestInProgress`` (409 ``request_in_progress``
with ``Retry-After``). The keys are held in this process: replicas sharing a store each hold their own.
"""
from __future__ import annotations

import asyncio
import math
import os
import time
import weakref
from collections.abc import AsyncGenerator, Callable
from typing import TypeVar

from ..errors import RequestInProgress

#: how long a retry waits for the first attempt of its request (seconds) before it answers 409
WAIT_SECONDS = 30.0
WAIT_ENV = "LMCHAT_IDEMPOTENCY_WAIT"


def wait_seconds() -> float:
    """``$LMCHAT_IDEMPOTENCY_WAIT``, else :data:`WAIT_SECONDS`."""
    try:
        return max(0.0, float(os.environ.get(WAIT_ENV, WAIT_SECONDS)))
    except ValueError:
        return WAIT_SECONDS


class Inflight:
    """The keys held by requests being answered (on one event loop)."""

    def __init__(self, wait: float | None = None):
        self.wait = wait_seconds() if wait is None else wait
        self._held: dict[tuple[str, str], asyncio.Event] = {}

    async def hold(self, who: str | None, key: str | None) -> Callable[[], None]:
        """Hold ``key`` for ``who``'s request, once no other request holds it (waiting up to :attr:`wait`);
        returns the release (call it once the turn is saved, or did not run; a second call does nothing).
        No key: nothing to hold."""
        if not key:
            return _nothing
        name = (who or "", key)
        deadline = time.monotonic() + self.wait
        while (busy := self._held.get(name)) is not None:
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise TimeoutError
                await asyncio.wait_for(asyncio.shield(busy.wait()), left)
            except TimeoutError:
                raise RequestInProgress(key, retry_after=max(1, math.ceil(min(self.wait, 5.0)))) from None
        mine = self._held[name] = asyncio.Event()

        def release() -> None:
            if self._held.get(name) is mine:
                del self._held[name]
            mine.set()

        return release


T = TypeVar("T")


def _nothing() -> None:
    return None


def releasing(events: AsyncGenerator[T, None], release: Callable[[], None]) -> AsyncGenerator[T, None]:
    """``events`` (a streamed answer's), then ``release()``, however the stream ends (never iterated: once it is
    collected)."""
    stream = _releasing(events, release)
    weakref.finalize(stream, release)
    return stream


async def _releasing(events: AsyncGenerator[T, None], release: Callable[[], None]) -> AsyncGenerator[T, None]:
    try:
        async for event in events:
            yield event
    finally:
        try:
            await events.aclose()
        finally:
            release()
