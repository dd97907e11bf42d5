"""What routes share: the API key check (who owns a session) and the manager's blocking calls."""
from __future__ import annotations

import asyncio
import contextlib
import hmac
import uuid
from collections.abc import Callable, Iterable
from typing import TypeVar

from fastapi import Request
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import State
from starlette.types import Receive
from typing_extensions import ParamSpec

from ..errors import LmchatError, SnapshotError, StoreCorrupt
from ..manager import SessionManager
from ..manager.ids import owner_key, store_key
from .errors import ApiError

P = ParamSpec("P")
R = TypeVar("R")


async def owner(request: Request) -> str | None:
    """The caller's API key, which owns the sessions it creates; None when the server has no keys.

    ``async`` although it never awaits: FastAPI runs plain functions in its thread pool.
    """
    keys = request.app.state.api_keys
    return bearer_owner(request.headers.get("authorization", ""), keys) if keys else None


def bearer_owner(header: str, keys: Iterable[str]) -> str:
    """The Bearer token of an ``Authorization`` header if it is one of ``keys``, else a 401."""
    if not bearer_ok(header, keys):
        raise ApiError(401, "missing or invalid API key: send 'Authorization: Bearer KEY'",
                       type="authentication_error", code="invalid_api_key")
    return header.partition(" ")[2]


async def authorized(request: Request, keys: Iterable[str]) -> bool:
    """Whether the request carries one of ``keys`` as a Bearer token."""
    return bearer_ok(request.headers.get("authorization", ""), keys)


def bearer_ok(header: str, keys: Iterable[str]) -> bool:
    scheme, _, token = header.partition(" ")
    # compare every key in constant time: no timing hint about which prefix matched
    return scheme.lower() == "bearer" and any([hmac.compare_digest(token.encode(), k.encode()) for k in keys])


def model_named(state: State, name: str | None) -> str:
    """The model a response names: the request's ``model``, else the served one. A server given its model's name
    (``--model-name``) refuses any other, as OpenAI and vLLM do (404 ``model_not_found``); otherwise any name is
    answered by the one model served, as llama-server does (clients send names of their own: "gpt-4o", "m")."""
    served: str = state.model_name
    if name is None:
        return served
    if state.strict_model and name != served:
        raise ApiError(404, f"the model {name!r} does not exist: this server serves {served!r} (GET /v1/models)",
                       param="model", code="model_not_found")
    return name


async def blocking(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """A manager call that may touch the store (disk, network): off the event loop."""
    return await run_in_threadpool(fn, *args, **kwargs)


def end_session(mgr: SessionManager, session_id: str, who: str | None) -> None:
    """``mgr.end`` (blocking), and a damaged session deleted all the same: one whose stored records or snapshot
    cannot be read (``StoreCorrupt``, ``SnapshotError``), which the manager cannot load to end, is deleted by its
    key, which holds the caller's owner hash (another key's session has another key: it stays)."""
    try:
        mgr.end(session_id, who)
    except (StoreCorrupt, SnapshotError):
        key = store_key(session_id, owner_key(who))
        mgr.store.delete(key)
        mgr.backend.drop(key)


def check_n(n: int) -> None:
    if n != 1:
        raise ApiError(400, f"n={n}: only n=1 is supported (one answer per turn of a session)", param="n",
                       code="unsupported_value")


def text_limit(mgr: SessionManager) -> int | None:
    """The most characters a text that becomes a message may have here (the sessions' ``max_message_chars``):
    a system prompt or Responses ``instructions`` as much as a message's content."""
    return mgr.session_defaults.max_message_chars


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


#: seconds a block runs before its client is watched: most turns of a busy server end sooner, and a task
#: per request (started, then cancelled) costs more than the rest of the watch
WATCH_AFTER = 0.02


def cancel_on_disconnect(receive: Receive, cancel: Callable[[], object]) -> _Watch:
    """``async with cancel_on_disconnect(receive, cancel):`` calls ``cancel`` if the client goes away while
    an answer is being generated.

    ``receive``: the request's ASGI receive. The body has been read, so the next
    message is the disconnect (uvicorn also sends it once the response is
    complete: the watcher stops before that). The watch starts after
    ``WATCH_AFTER`` seconds: a client that left earlier is noticed then.
    ``async with ... as watch``: ``watch.left`` says whether the client went away.
    """
    return _Watch(receive, cancel)


class _Watch:
    """The context manager of :func:`cancel_on_disconnect` (a class: every request enters one)."""

    __slots__ = ("receive", "cancel", "timer", "task", "left")

    def __init__(self, receive: Receive, cancel: Callable[[], object]) -> None:
        self.receive, self.cancel = receive, cancel
        self.timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None
        self.left = False  # the client went away (seen by the watch)

    async def __aenter__(self) -> _Watch:
        self.timer = asyncio.get_running_loop().call_later(WATCH_AFTER, self._start)
        return self

    def _start(self) -> None:
        self.task = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        self.left = True
        with contextlib.suppress(LmchatError):  # the turn may have just ended
            self.cancel()

    async def __aexit__(self, *exc_info: object) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.task is not None:
            self.task.cancel()
