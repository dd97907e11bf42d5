"""The FastAPI application: routes, OpenAI-shaped errors, the body limit and request metrics."""
from __future__ import annotations

import contextlib
import time
from typing import Iterable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from ..errors import LmchatError
from ..manager import SessionManager
from . import chat, completions, conversations, interactive, responses, service
from .errors import ApiError, api_error
from .guard import BODY_SECONDS, Guard
from .metrics import RequestStats

#: default request body limit: a long conversation with tools fits; a runaway upload does not
MAX_BODY = 8 * 1024 * 1024


def create_app(manager: SessionManager, *, api_keys: Iterable[str] | None = None, model_name: str = "lmchat",
               max_body: int = MAX_BODY, close_manager: bool = False, metrics_keys: Iterable[str] | None = None,
               body_timeout: float = BODY_SECONDS) -> FastAPI:
    """An app serving ``manager``'s sessions. ``api_keys``: accepted Bearer keys (None or empty: no
    authentication); each key sees only the sessions it created. ``metrics_keys``: the keys ``/metrics``
    takes (default: the API keys). ``model_name``: what ``/v1/models`` lists and responses name.
    ``body_timeout``: seconds a client may take to send its body. ``close_manager``: close it when the
    server shuts down (running turns get its grace period to save); otherwise the caller keeps
    ownership of ``manager``."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        if close_manager:
            # here, not after uvicorn.run(): uvicorn re-raises SIGTERM/SIGINT once it has shut down,
            # and the process would end before cancelled turns had saved their partial answers
            await run_in_threadpool(manager.close)

    app = FastAPI(title="lmchat", version="1", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.manager = manager
    app.state.api_keys = tuple(api_keys or ())
    app.state.metrics_keys = tuple(metrics_keys or ())
    app.state.model_name = model_name
    app.state.started = int(time.time())
    app.state.stats = RequestStats()
    for module in (interactive, chat, completions, responses, conversations, service):
        app.include_router(module.router)
    app.add_exception_handler(ApiError, _respond)
    app.add_exception_handler(LmchatError, _respond)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(HTTPException, _http)
    app.add_exception_handler(RecursionError, _too_deep)  # JSON nested beyond the parser's recursion
    app.add_exception_handler(Exception, _respond)  # last resort: a 500 in the same shape, logged
    app.add_middleware(Guard, max_body=max_body, stats=app.state.stats, body_timeout=body_timeout)
    return app


async def _respond(request: Request, exc: Exception) -> JSONResponse:
    error = api_error(exc)
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    """Pydantic's 422 becomes OpenAI's 400, naming the first field at fault (``messages[0]``)."""
    first = exc.errors()[0]
    if first.get("type") == "json_invalid":
        detail = (first.get("ctx") or {}).get("error", "")
        error = ApiError(400, f"the body is not valid JSON: {detail}".rstrip(": "), code="invalid_json")
    else:
        loc = [p for p in first.get("loc", ()) if p != "body"]
        param = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or None
        error = ApiError(400, f"{param or 'body'}: {first.get('msg', 'invalid value')}", param=param,
                         code="invalid_value")
    return await _respond(request, error)


async def _too_deep(request: Request, exc: RecursionError) -> JSONResponse:
    return await _respond(request, ApiError(400, "the body is nested too deeply", code="invalid_json"))


async def _http(request: Request, exc: HTTPException) -> JSONResponse:
    kinds = {401: "authentication_error", 404: "not_found_error", 405: "invalid_request_error",
             408: "invalid_request_error", 413: "invalid_request_error"}
    codes = {404: "not_found", 405: "method_not_allowed", 408: "request_timeout", 413: "request_too_large"}
    error = ApiError(exc.status_code, str(exc.detail), type=kinds.get(exc.status_code, "invalid_request_error"),
                     code=codes.get(exc.status_code), headers=dict(exc.headers or {}))
    return await _respond(request, error)
