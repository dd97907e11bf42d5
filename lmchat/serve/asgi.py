"""Routes served as plain ASGI apps, in front of FastAPI's routing and dependency machinery.

A stateful turn does little work of its own (the engine keeps the context;
the session renders one delta and appends one record), so what a framework
spends per request shows: FastAPI's middleware layers, dependency solving
and response classes cost more CPU than the turn itself (``python -m bench
server`` measures the server's CPU per turn). The hottest route,
``/v1/chat/interactive``, is therefore served here: :class:`~.guard.Guard`
hands it its requests before FastAPI sees them. The contract is the same as
FastAPI's routes: the body is checked whole with the same pydantic model
before anything is touched, the API key is checked the same way, and every
failure has OpenAI's error shape (one mapping, :func:`error_of`, which the
FastAPI handlers use too).
"""
from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, TypeVar

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.types import Receive, Scope, Send

from .deps import bearer_owner
from .errors import ApiError, api_error

Model = TypeVar("Model", bound=BaseModel)

_JSON_HEADERS = [(b"content-type", b"application/json")]


async def read_body(receive: Receive) -> bytes:
    """The whole request body (the guard's ``receive`` enforces its size limit and deadline)."""
    parts = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ApiError(400, "the client closed the connection before sending its body", code="client_closed")
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


def parse(model: type[Model], body: bytes) -> Model:
    """``body`` as ``model``: a JSON object checked whole, or the 400 that names what is wrong."""
    if not body.strip():
        raise ApiError(400, "the body is empty: send a JSON object", code="invalid_json")
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ApiError(400, f"the body is not valid JSON: {exc.msg}", code="invalid_json") from None
    except UnicodeDecodeError:
        raise ApiError(400, "the body is not valid JSON: it is not UTF-8 text", code="invalid_json") from None
    return model.model_validate(data)


def owner(scope: Scope, keys: tuple[str, ...]) -> str | None:
    """The caller's API key from the request's headers (see :func:`~.deps.bearer_owner`)."""
    if not keys:
        return None
    header = ""
    for name, value in scope["headers"]:
        if name == b"authorization":
            header = value.decode("latin-1")
            break
    return bearer_owner(header, keys)


def header(scope: Scope, wanted: bytes) -> str | None:
    """A request header's value (``wanted``: its lower-case name), or None."""
    for name, value in scope["headers"]:
        if name == wanted:
            decoded: str = value.decode("latin-1")
            return decoded
    return None


def error_of(exc: BaseException) -> ApiError:
    """The response for whatever a route raised: validation errors name the field, HTTP errors keep
    their status, lmchat's errors map by :data:`~.errors.STATUSES`, anything else is a logged 500."""
    if isinstance(exc, (ValidationError, RequestValidationError)):
        return invalid_body(exc.errors())
    if isinstance(exc, HTTPException):
        return http_error(exc)
    if isinstance(exc, RecursionError):  # JSON nested beyond the parser's recursion
        return ApiError(400, "the body is nested too deeply", code="invalid_json")
    return api_error(exc)


# Any: pydantic's error details (pydantic_core.ErrorDetails and Starlette's dicts), read by key
def invalid_body(errors: Sequence[Any]) -> ApiError:
    """Pydantic's errors as OpenAI's 400, naming the first field at fault (``messages[0]``)."""
    first = errors[0]
    if first.get("type") == "json_invalid":
        detail = (first.get("ctx") or {}).get("error", "")
        return ApiError(400, f"the body is not valid JSON: {detail}".rstrip(": "), code="invalid_json")
    loc = [p for p in first.get("loc", ()) if p != "body"]
    if loc[:1] == ["query"]:  # a query parameter is named as OpenAI names it: ``limit``, not ``query.limit``
        loc = loc[1:]
    param = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or None
    return ApiError(400, f"{param or 'body'}: {first.get('msg', 'invalid value')}", param=param,
                    code="invalid_value")


_KINDS = {401: "authentication_error", 404: "not_found_error"}
_CODES = {404: "not_found", 405: "method_not_allowed", 408: "request_timeout", 413: "request_too_large"}


def http_error(exc: HTTPException) -> ApiError:
    return ApiError(exc.status_code, str(exc.detail), type=_KINDS.get(exc.status_code, "invalid_request_error"),
                    code=_CODES.get(exc.status_code), headers=dict(exc.headers or {}))


#: Starlette's ``JSONResponse`` encoding, built once; the server builds every body itself: trees, no cycle to check
_ENCODE = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"), check_circular=False).encode


async def send_json(send: Send, body: object, status: int = 200, headers: Mapping[str, object] | None = None
                    ) -> None:
    """One JSON response, encoded as Starlette's ``JSONResponse`` encodes it."""
    data = _ENCODE(body).encode()
    raw = [*_JSON_HEADERS, (b"content-length", str(len(data)).encode())]
    raw += [(k.lower().encode("latin-1"), str(v).encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})


async def send_error(send: Send, exc: BaseException) -> None:
    error = error_of(exc)
    await send_json(send, error.body(), error.status, error.headers)


async def send_lines(send: Send, lines: AsyncIterator[str], media_type: bytes) -> None:
    """A streamed response, one piece per item of ``lines``."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", media_type)]})
    async for line in lines:
        await send({"type": "http.response.body", "body": line.encode(), "more_body": True})
    await send({"type": "http.response.body", "body": b""})
