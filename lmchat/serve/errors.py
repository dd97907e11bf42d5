"""Every failure the server reports, as an HTTP status and OpenAI's error JSON.

``{"error": {"message", "type", "param", "code"}}`` is what the ``openai``
client parses into its exceptions, so clients of either protocol handle one
shape. The table maps lmchat's typed errors to statuses; order matters where
classes overlap (``SessionNotFound`` and ``UnknownTemplate`` are KeyErrors,
``StoreConflict`` is a ``StoreError``, a stored snapshot's unknown template is a ``SnapshotError``).
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from ..errors import (
    BackendError,
    CapacityExceeded,
    ConfigError,
    ConstraintUnsupported,
    EngineMismatch,
    InvalidMessages,
    LmchatError,
    RequestInProgress,
    SessionBusy,
    SessionExists,
    SessionKindMismatch,
    SessionLengthExceeded,
    SessionNotFound,
    SnapshotError,
    StoreConflict,
    StoreCorrupt,
    StoreError,
    StoreTimeout,
    TemplateRuleError,
    TextTooLong,
    ToolsUnsupported,
    UnknownTemplate,
)

log = logging.getLogger("lmchat.serve")

#: (error class, status, OpenAI error type, code), first match wins
STATUSES: list[tuple[type, int, str, str]] = [
    (SessionNotFound, 404, "not_found_error", "session_not_found"),
    (SessionExists, 409, "conflict_error", "session_exists"),
    (SessionBusy, 409, "conflict_error", "session_busy"),
    # another API keeps records of the session (a Responses chain, a Conversation): changing it would break them
    (SessionKindMismatch, 409, "conflict_error", "session_owned_by_other_api"),
    # a retry that arrived while its first attempt still runs, and waited longer than the server waits: Retry-After
    (RequestInProgress, 409, "conflict_error", "request_in_progress"),
    (EngineMismatch, 409, "conflict_error", "engine_mismatch"),
    (StoreConflict, 409, "conflict_error", "store_conflict"),
    (CapacityExceeded, 429, "rate_limit_error", "over_capacity"),
    # the write may have landed: the turn's Idempotency-Key makes a retry answer it instead of running it twice
    (StoreTimeout, 503, "server_error", "store_timeout"),
    # bad data on the server's side (a damaged or hand-edited row, a snapshot naming an unknown template): no
    # retry helps and it is not the request's fault; DELETE still removes the session
    (StoreCorrupt, 500, "server_error", "store_corrupt"),
    (SnapshotError, 500, "server_error", "store_corrupt"),
    (StoreError, 503, "server_error", "store_unavailable"),
    (BackendError, 502, "server_error", "backend_error"),
    # OpenAI's own code for a prompt that does not fit, so clients that handle it already work
    (SessionLengthExceeded, 400, "invalid_request_error", "context_length_exceeded"),
    (TemplateRuleError, 400, "invalid_request_error", "template_rule"),
    # OpenAI's code for a string over its maximum length: the same for content, instructions and a system prompt
    (TextTooLong, 400, "invalid_request_error", "string_above_max_length"),
    (InvalidMessages, 400, "invalid_request_error", "invalid_messages"),
    (UnknownTemplate, 400, "invalid_request_error", "unknown_template"),
    # tools the template would silently ignore (no tool syntax): param is the request's own field
    (ToolsUnsupported, 400, "invalid_request_error", "tools_unsupported"),
    # a format the backend cannot enforce (routes name the client's field first: see .formats)
    (ConstraintUnsupported, 400, "invalid_request_error", "unsupported_value"),
    (ConfigError, 400, "invalid_request_error", "invalid_value"),
    (LmchatError, 400, "invalid_request_error", "invalid_request"),
]


class ApiError(Exception):
    """An error response: ``status`` and the fields of OpenAI's error object."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        # every error has a code a client can branch on
        code = code or ("invalid_request" if status < 500 else "server_error")
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}

    def body(self) -> dict[str, dict[str, str | None]]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def naming(self, param: str | None, message: str | None = None) -> ApiError:
        """The same error naming another field (the request's own, where a session's was named)."""
        return ApiError(self.status, message or self.message, type=self.type, param=param, code=self.code,
                        headers=self.headers)


def api_error(exc: BaseException) -> ApiError:
    """The response for any exception a route lets through (unexpected ones: 500, logged)."""
    if isinstance(exc, ApiError):
        return exc
    for cls, status, kind, code in STATUSES:
        if isinstance(exc, cls):
            retry = getattr(exc, "retry_after", 1) if status == 429 or isinstance(exc, RequestInProgress) else None
            headers = None if retry is None else {"Retry-After": str(retry)}
            # a store's error names its file for the operator (logged below): the client gets the reason alone
            message = exc.reason if isinstance(exc, StoreError) else str(exc)
            if isinstance(exc, StoreError) and exc.where:
                log.warning("%s", exc)
            return ApiError(status, message, type=kind, param=_param(exc), code=code, headers=headers)
    log.exception("unexpected error", exc_info=exc)
    return ApiError(500, f"internal error: {type(exc).__name__}", type="server_error", code="internal_error")


def _param(exc: BaseException) -> str | None:
    """The request field at fault, as OpenAI names it (``messages[2].content``)."""
    if isinstance(exc, SnapshotError):
        return None  # the stored data is at fault, not the request
    if isinstance(exc, (SessionNotFound, SessionExists, SessionBusy, StoreConflict, EngineMismatch,
                        SessionKindMismatch)):
        return "session_id"
    if isinstance(exc, SessionLengthExceeded):
        return exc.field or "messages"
    if isinstance(exc, InvalidMessages):
        if exc.index is None:  # a field of the request itself (tools[0].function, system), not of a message
            return exc.field or "messages"
        return f"messages[{exc.index}].{exc.field}" if exc.field else f"messages[{exc.index}]"
    if isinstance(exc, UnknownTemplate):
        return "template"
    return getattr(exc, "field", None)


def sent_index(exc: InvalidMessages, n_sent: int) -> int | None:
    """Which of the ``n_sent`` messages a request sent an error names, or None (not one of them, or the check
    did not say where the turn's messages begin). They are the last ones the turn added: a session that
    already held some of them (a resent history) added only the rest."""
    if exc.index is None or exc.first is None or exc.added is None:
        return None
    k = exc.index - exc.first - (exc.added - n_sent)
    return k if 0 <= k < n_sent else None


def as_sent(exc: InvalidMessages | SessionLengthExceeded, n_sent: int,
            name: Callable[[int | None, str | None], str | None]) -> ApiError:
    """The error naming the request's own field. ``name(k, field)``: the param for the ``k``-th message the
    request sent (``field``: the message's own, ``content``, ``tool_calls[0].function.name``...); ``k`` None:
    for an error that names no message the request sent (a turn that does not fit, a rule of the template
    about the whole conversation). ``name`` returning None keeps the param the error had."""
    error = api_error(exc)
    if isinstance(exc, InvalidMessages) and exc.index is None and exc.field:
        return error  # a field of the request itself (tools[0].function): already its own name
    k = sent_index(exc, n_sent) if isinstance(exc, InvalidMessages) else None
    param = name(k, exc.field if k is not None else None)
    if param is None:
        return error
    # the message names the field as the param does (a session's messages[6] means nothing to the client)
    return error.naming(param, f"{param}: {exc.reason}" if k is not None and isinstance(exc, InvalidMessages) else None)
