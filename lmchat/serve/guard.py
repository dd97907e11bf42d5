"""The outermost layer of the app: a request body size limit and deadline, and per-route request metrics.

A plain ASGI middleware (not Starlette's ``BaseHTTPMiddleware``, which
buffers and re-wraps streaming responses): it only watches the messages
going by. A declared ``Content-Length`` over the limit is refused before a
byte of the body is read; a chunked body is counted as it arrives and cut
off at the limit, so a huge upload never sits in memory. The guard also
serves the routes given to it as plain ASGI apps (:mod:`.asgi`), before the
framework sees their requests.

Nothing a route raises gets past the guard once it is answered. Starlette's ``ServerErrorMiddleware`` answers an
unexpected exception (with the app's handler: 500 ``internal_error``) and then raises it again, for the server to
log; uvicorn closes the connection of an app that raised, so the client's next request on that connection was
reset. The handler has logged it: here it ends. An exception before any answer is answered here; one after a
response began and before it ended (a stream that broke) is raised on, since closing the connection is then the
only way to tell the client that the response is incomplete (the routes' streams end with an error event instead).
"""
from __future__ import annotations

import asyncio
import sys
import time
import types

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .asgi import send_error, send_json
from .errors import ApiError
from .metrics import RequestStats


class TooLarge(HTTPException):
    """Raised from ``receive`` mid-body; FastAPI lets HTTPExceptions through its body parsing."""


class SlowBody(HTTPException):
    """The client did not send its body in time (a slow or stalled upload holds a connection)."""


#: seconds a client may take between two pieces of its body
BODY_SECONDS = 30.0

if sys.version_info >= (3, 11):
    async def within(awaitable, seconds: float):
        """``await awaitable`` with a deadline, armed only if it has to wait: a body the server has already
        read (most are, with their headers) comes at once, and a deadline armed for it cost 8 us a request.
        Unlike ``wait_for`` (before 3.12), no task per call."""
        if not isinstance(awaitable, types.CoroutineType):
            async with asyncio.timeout(seconds):
                return await awaitable
        try:
            waiting_on = awaitable.send(None)  # its first step, up to where it waits
        except StopIteration as done:
            return done.value
        async with asyncio.timeout(seconds):
            return await _Rest(awaitable, waiting_on)

    class _Rest:
        """The rest of a coroutine that has taken its first step and waits on ``waiting_on``: awaiting it
        hands that future to the task, then passes what the task sends or throws on, as ``yield from``."""

        __slots__ = ("coro", "waiting_on")

        def __init__(self, coro, waiting_on):
            self.coro, self.waiting_on = coro, waiting_on

        def __await__(self):
            coro, waiting_on = self.coro, self.waiting_on
            while True:
                try:
                    sent = yield waiting_on
                except GeneratorExit:
                    coro.close()
                    raise
                except BaseException as exc:  # a cancellation (the deadline's, or the task's)
                    step, arg = coro.throw, exc
                else:
                    step, arg = coro.send, sent
                try:
                    waiting_on = step(arg)
                except StopIteration as done:
                    return done.value
else:  # pragma: no cover - Python 3.10
    within = asyncio.wait_for


class Guard:
    """``routes``: path -> (method, ASGI app) served here, ahead of the wrapped app (:mod:`.asgi`)."""

    def __init__(self, app: ASGIApp, *, max_body: int, stats: RequestStats, body_timeout: float = BODY_SECONDS,
                 routes: dict[str, tuple[str, ASGIApp]] | None = None) -> None:
        self.app, self.max_body, self.stats, self.body_timeout = app, max_body, stats, body_timeout
        self.routes = routes or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = 500  # what a crash before the response starts amounts to
        limit, seen, body_done = self.max_body, 0, False

        async def counted_receive() -> Message:
            nonlocal seen, body_done
            if body_done:  # after the body only a disconnect can come: no deadline for it
                return await receive()
            try:
                message = await within(receive(), self.body_timeout)
            except asyncio.TimeoutError:
                # closed after the answer (RFC 9110): a stalled client is not kept until the next deadline
                raise SlowBody(408, f"the request body did not arrive within {self.body_timeout:g} s",
                               headers={"connection": "close"}) from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise TooLarge(413, f"request body over {limit} bytes")
                body_done = not message.get("more_body", False)
            return message

        started = ended = False

        async def watched_send(message: Message) -> None:
            nonlocal status, started, ended
            if message["type"] == "http.response.start":
                status, started = message["status"], True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                ended = True
            await send(message)

        own = self.routes.get(scope["path"])
        try:
            if _declared_length(scope) > limit:
                await _refuse(watched_send, limit)
            elif own is None:
                await self.app(scope, counted_receive, watched_send)
            elif scope["method"] != own[0]:
                await _refuse_method(watched_send, own[0])
            else:
                await own[1](scope, counted_receive, watched_send)
        except Exception as exc:  # answered already, or answered here: the connection stays open (see above)
            if not started:
                await send_error(watched_send, exc)
            elif not ended:
                raise
        finally:
            # a route of its own by its path; another by its template, so that session ids stay out
            path = scope["path"] if own is not None else getattr(scope.get("route"), "path", None) or "unmatched"
            self.stats.record(scope["method"], path, status, time.perf_counter() - began)


def _declared_length(scope: Scope) -> int:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0  # the HTTP parser rejects it before us; nothing to add
    return 0


async def _refuse_method(send: Send, allowed: str) -> None:
    error = ApiError(405, "Method Not Allowed", code="method_not_allowed")
    await send_json(send, error.body(), 405, {"allow": allowed})


async def _refuse(send: Send, limit: int) -> None:
    error = ApiError(413, f"request body over {limit} bytes", code="request_too_large")
    # close the connection: the unread body must not be parsed as the next request
    await send_json(send, error.body(), 413, {"connection": "close"})
