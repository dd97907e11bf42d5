"""Running one manager turn for an HTTP request, streamed or collected, and what a client that leaves does to it.

Errors that stop a turn from starting (unknown or busy session, overflow,
bad messages, capacity) must become an HTTP status, which is only possible
before the first byte of the response: :func:`start_stream` waits for the
first chunk before the response starts. A request that names no session
passes a one-off (``SessionManager.oneoff``) in place of a session id: it
saves nothing and is gone when its turn ends, however it ends.

The server's part of stopping a turn (docs/architecture.md, "Stopping a
turn"), all here: a client that disconnects stops its turn, through the
manager (:func:`stop_on_disconnect`, or its streamed response's task being
cancelled, which leaves the stream); a turn that finds its session busy with
a turn that is stopping waits for it to save (:func:`patient`), unless its
own client left meanwhile.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

from starlette.types import Receive

from ..errors import LmchatError, SessionBusy
from ..manager import SessionManager, TurnRequest, TurnResult, TurnStream
from ..tools.events import ParsedResponse
from .deps import cancel_on_disconnect

T = TypeVar("T")


#: seconds a turn waits for the one before it on its session to stop and save, once asked to (its client left or
#: cancelled it): a client that retries at once gets its answer, not a 409
STOPPING_SECONDS = 5.0


async def patient(mgr: SessionManager, request: TurnRequest, receive: Receive,
                  start: Callable[[], Awaitable[T]]) -> T:
    """``start()``; when the session is busy with a turn that is stopping, again once that turn has saved,
    unless the client (``receive``: the request's) left during the wait: nobody would read the answer."""
    try:
        return await start()
    except SessionBusy:
        async with cancel_on_disconnect(receive, lambda: None) as watch:
            stopped = await mgr.await_stopped(request.session, request.owner, STOPPING_SECONDS)
        if not stopped or watch.left:
            raise
    return await start()


async def start_stream(mgr: SessionManager, request: TurnRequest, receive: Receive
                       ) -> TurnStream:
    """The turn's stream, once its first chunk is there (so the turn has started, and what stopped it from
    starting is still an HTTP error); ``receive``: the request's. A disconnect cancels the response task, which
    leaves the stream: the manager cancels the turn and commits its partial answer."""
    return await patient(mgr, request, receive, lambda: mgr.astream_turn(request).start())


async def run(mgr: SessionManager, request: TurnRequest, receive: Receive) -> TurnResult:
    """The whole turn; the client leaving mid-way (``receive``: the request's) cancels it (the partial
    answer is committed)."""
    async with stop_on_disconnect(mgr, request, receive):
        return await patient(mgr, request, receive, lambda: mgr.arun_turn(request))


def stop_on_disconnect(mgr: SessionManager, request: TurnRequest, receive: Receive
                       ) -> AbstractAsyncContextManager[object]:
    """``async with stop_on_disconnect(...)``: the turn of ``request`` is stopped through the manager (its
    partial answer committed) if the client goes away meanwhile (a response sent by the route itself, not by a
    task that the disconnect cancels)."""
    return cancel_on_disconnect(receive, lambda: mgr.cancel(request.session, request.owner))


def parsed_of(result: TurnResult) -> ParsedResponse:
    """The turn's answer parsed (content, reasoning, tool calls): the manager's turns always parse."""
    if result.parsed is None:
        raise AssertionError("a manager turn without its parsed answer")
    return result.parsed


def count(tokenizer: object, n_chars: int, n_ids: int) -> int:
    """Generated tokens; characters without a tokenizer (the unit of a session's ``step``)."""
    return n_ids if tokenizer is not None else n_chars


def end_soon(mgr: SessionManager, session_id: str, owner: str | None, patience: float = 60.0) -> None:
    """End a session once no turn holds it, from a thread: an abandoned stream's turn commits in
    the background, and a cancelled response task cannot await anything."""

    def work() -> None:
        deadline = time.monotonic() + patience
        while True:
            try:
                mgr.end(session_id, owner)
                return
            except SessionBusy:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.01)
            except LmchatError:  # already gone, or the store is down: nothing left to do here
                return

    threading.Thread(target=work, name="lmchat-end", daemon=True).start()
