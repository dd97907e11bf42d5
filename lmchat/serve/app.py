"""The FastAPI application: routes, OpenAI-shaped errors, the body limit and request metrics."""
from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Iterable

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.types import Message, Receive, Scope, Send

from ..errors import LmchatError
from ..manager import SessionManager
from . import chat, completions, conversations, interactive, llama_routes, page, responses, service
from .asgi import error_of
from .errors import ApiError
from .guard import BODY_SECONDS, Guard
from .idempotency import Inflight
from .metrics import RequestStats, registry

#: default request body limit: a long conversation with tools fits; a runaway upload does not
MAX_BODY = 8 * 1024 * 1024


class App(FastAPI):
    """FastAPI behind :class:`~.guard.Guard`: the guard is the outermost layer (body limit and deadline,
    request metrics) and serves the hottest routes itself (:mod:`.asgi`), before FastAPI's own layers."""

    guard: Guard
    #: the ``X-Lmchat-Replica`` header every response carries (None: none), naming the replica that answered
    replica_header: tuple[bytes, bytes] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        header = self.replica_header
        if header is None or scope["type"] != "http":
            await self.guard(scope, receive, send)
            return

        async def named(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), header]}
            await send(message)

        await self.guard(scope, receive, named)

    async def _framework(self, scope: Scope, receive: Receive, send: Send) -> None:
        await super().__call__(scope, receive, send)


def create_app(manager: SessionManager, *, api_keys: Iterable[str] | None = None, model_name: str = "lmchat",
               max_body: int = MAX_BODY, close_manager: bool = False, metrics_keys: Iterable[str] | None = None,
               body_timeout: float = BODY_SECONDS, strict_model: bool = False, replica: str | None = None) -> App:
    """An app serving ``manager``'s sessions. ``api_keys``: accepted Bearer keys (None or empty: no
    authentication); each key sees only the sessions it created. ``metrics_keys``: the keys ``/metrics``
    takes (default: the API keys). ``model_name``: what ``/v1/models`` lists and responses name; ``strict_model``:
    a request whose ``model`` names another is refused (404 ``model_not_found``), else any name is answered.
    ``replica``: the name every response gives in ``X-Lmchat-Replica`` (replicas behind a load balancer).
    ``body_timeout``: seconds a client may take to send its body. ``close_manager``: close it when the
    server shuts down (running turns get its grace period to save); otherwise the caller keeps
    ownership of ``manager``. The app is FastAPI's, behind the guard (:class:`App`): middleware added
    to it does not see ``/v1/chat/interactive``, which the guard serves itself."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # what a streamed answer opens: anyio loads its asyncio backend on first use, which cost the server's
        # first answer 9-14 ms between its first token and the client (docs/benchmarks.md, turn 1)
        async with anyio.create_task_group():
            pass
        yield
        if close_manager:
            # here, not after uvicorn.run(): uvicorn re-raises SIGTERM/SIGINT once it has shut down,
            # and the process would end before cancelled turns had saved their partial answers
            await run_in_threadpool(manager.close)

    app = App(title="lmchat", version="1", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.manager = manager
    app.state.inflight = Inflight()  # requests with an Idempotency-Key being answered (a retry waits for them)
    app.state.api_keys = tuple(api_keys or ())
    app.state.metrics_keys = tuple(metrics_keys or ())
    app.state.model_name = model_name
    app.state.strict_model = strict_model
    app.state.started = int(time.time())
    app.state.stats = RequestStats()
    app.state.metrics = registry(manager.metrics, app.state.stats)  # this app's own: see .metrics
    for module in (chat, completions, responses, conversations, service, llama_routes):
        app.include_router(module.router)
    app.include_router(page.router())  # the web chat page at / (docs/web.md): a client of the routes above
    # one mapping for every failure (.asgi.error_of): FastAPI's handlers and the plain ASGI routes
    for kind in (ApiError, LmchatError, RequestValidationError, HTTPException, RecursionError, Exception):
        app.add_exception_handler(kind, _respond)
    if replica is not None:
        app.replica_header = (b"x-lmchat-replica", replica.encode("ascii"))
    app.guard = Guard(app._framework, max_body=max_body, stats=app.state.stats, body_timeout=body_timeout,
                      routes={interactive.PATH: ("POST", interactive.Interactive(app.state))})
    return app


async def _respond(request: Request, exc: Exception) -> JSONResponse:
    error = error_of(exc)
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)
