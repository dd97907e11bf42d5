"""Typed errors. Each says what was wrong and where.

Everything lmchat raises on purpose derives from :class:`LmchatError`; errors
about bad input also derive from :class:`ValueError` so callers that only know
the standard library still catch them.
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable


class LmchatError(Exception):
    """Base class of every error lmchat raises on purpose."""


class InvalidMessages(LmchatError, ValueError):
    """A conversation is malformed: names the message index and the field.

    ``index`` counts the session's messages; ``first`` and ``added`` (set by the
    checks of a turn's new messages) say where the messages a request added
    begin and how many there are, so a server can name the request's own item
    (``input[0]``) instead of the session's message (``messages[6]``).
    ``index`` None: ``field`` is a field of the request, not of a message.
    """

    def __init__(self, reason: str, *, index: int | None = None, field: str | None = None):
        self.reason = reason
        self.index = index
        self.field = field
        self.first: int | None = None
        self.added: int | None = None
        where = []
        if index is not None:
            where.append(f"messages[{index}]")
        if field is not None:
            where.append(f"field {field!r}")
        prefix = (" ".join(where) + ": ") if where else ""
        super().__init__(prefix + reason)


class TextTooLong(InvalidMessages):
    """A text (message content, a system prompt, instructions) is over the size limit (``max_message_chars``)."""

    def __init__(self, size: int, limit: int, *, index: int | None = None, field: str | None = None):
        self.size, self.limit = size, limit
        super().__init__(f"{size} characters is over the limit of {limit}", index=index, field=field)


class TemplateRuleError(InvalidMessages):
    """The conversation breaks a rule of the model's official chat template.

    ``rule`` is a short stable identifier (e.g. ``'alternation'``,
    ``'system-unsupported'``); the message is the one the official template
    raises, so users see the same wording as with transformers.
    """

    def __init__(self, rule: str, reason: str, *, index: int | None = None, field: str | None = None):
        self.rule = rule
        super().__init__(f"{reason} [rule: {rule}]", index=index, field=field)


class UnknownTemplate(LmchatError, KeyError):
    """No template is registered under this name; lists the closest names."""

    def __init__(self, name: str, known: Iterable[str]):
        self.name = name
        known = sorted(set(known))
        self.suggestions = difflib.get_close_matches(name, known, n=5, cutoff=0.5)
        hint = f"; did you mean {', '.join(self.suggestions)}?" if self.suggestions else ""
        super().__init__(f"unknown chat template {name!r}{hint} (see `lmchat templates`)")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class ToolsUnsupported(LmchatError, ValueError):
    """Tools sent to a template that neither renders nor parses them (they would be silently ignored).

    ``template`` is the template's name, ``field`` the request field that carried the tools.
    """

    def __init__(self, template: str, *, field: str = "tools"):
        self.template = template
        self.field = field
        super().__init__(f"field {field!r}: the {template} template neither renders nor parses tools, so the "
                         f"model would never see them; use a template with tool syntax (see docs/tools.md and "
                         f"`lmchat templates`)")


class ConstraintUnsupported(LmchatError, ValueError):
    """A constraint on the answer (``response_format``, a JSON schema, a grammar) that is malformed, or that
    the backend cannot enforce; ``field`` names the request field."""

    def __init__(self, reason: str, *, field: str | None = None):
        self.reason = reason
        self.field = field
        super().__init__(f"field {field!r}: {reason}" if field else reason)


class ConfigError(LmchatError, ValueError):
    """A bad option: names the option (``field``) and where it came from (``source``)."""

    def __init__(self, reason: str, *, field: str | None = None, source: str | None = None):
        self.field = field
        self.source = source
        where = " ".join(p for p in (source, f"field {field!r}" if field else None) if p)
        super().__init__(f"{where}: {reason}" if where else reason)


class TemplateConfigError(ConfigError):
    """A template definition (overrides, config file) has a bad field."""


class SessionError(LmchatError, RuntimeError):
    """An operation does not fit the session's state (e.g. commit without a prompt)."""


class SnapshotError(SessionError, ValueError):
    """A session snapshot (a stored row, a saved file) cannot be read back: says which field is wrong."""


class SnapshotTemplateUnknown(SnapshotError, UnknownTemplate):
    """A snapshot names a template this lmchat does not know: an unreadable snapshot (a stored row names it:
    bad data, not a bad request) that is still an :class:`UnknownTemplate` to a caller that can offer one."""

    def __init__(self, error: UnknownTemplate):
        self.name, self.suggestions = error.name, error.suggestions
        Exception.__init__(self, str(error))


class ModelMatchError(LmchatError, LookupError):
    """A model could not be matched to exactly one template; lists candidates."""

    def __init__(self, model: str, reason: str, candidates: Iterable[str] = ()):
        self.model = model
        self.candidates = sorted(set(candidates))
        tail = f"; candidates: {', '.join(self.candidates)}" if self.candidates else ""
        super().__init__(f"{model!r}: {reason}{tail}")


class SessionLengthExceeded(LmchatError, ValueError):
    """A turn does not fit in ``session_len``: the tokens held, the new delta and the answer budget.

    Distinct from an answer cut short by ``max_new_tokens`` (a finish reason, not an error). ``field``: the
    request field that does not fit, when it is not a session's messages (a raw completion's ``prompt``).
    """

    def __init__(self, *, used: int, new: int, max_new_tokens: int, limit: int, unit: str = "tokens",
                 field: str | None = None):
        self.used, self.new, self.max_new_tokens, self.limit, self.unit = used, new, max_new_tokens, limit, unit
        self.field = field
        super().__init__(
            f"session length exceeded: {used} {unit} held + {new} new + {max_new_tokens} for the answer "
            f"= {used + new + max_new_tokens} > session_len {limit} ({unit})"
        )


class StoreError(LmchatError, RuntimeError):
    """A session store could not read or write (bad file, newer schema, unusable data).

    ``where``: the store's file, when the error names it: it leads ``str(exc)`` (for the operator: logs, the
    command line), while ``reason`` is the rest, all a server tells its clients (no server path in a response).
    """

    def __init__(self, reason: str = "", *, where: str | None = None):
        self.reason, self.where = reason, where
        super().__init__(f"{where}: {reason}" if where else reason)


class StoreCorrupt(StoreError):
    """A stored session's records are damaged (hand-edited, truncated, written by something else): the store
    answers, but what it holds for the session cannot be read back. Retrying does not help; deleting does."""


class StoreConflict(StoreError):
    """A compare-and-set save found another version than expected: someone else saved first."""

    def __init__(self, session_id: str, *, expected: int | None, actual: int):
        self.session_id, self.expected, self.actual = session_id, expected, actual
        super().__init__(
            f"session {session_id} is at version {actual}, not {expected}: it was saved elsewhere in the meantime"
        )


class StoreTimeout(StoreError):
    """A write to a remote store timed out: it may or may not have been applied (the outcome is unknown).

    Retrying the same write with the same ``token`` (idempotency key) is safe: a store that applied the first
    attempt answers with the version it wrote instead of a conflict.
    """

    def __init__(self, reason: str, *, server: str, seconds: float | None = None, where: str | None = None):
        self.server, self.seconds = server, seconds
        super().__init__(reason, where=where)


class SessionMoved(StoreConflict):
    """A turn asked to run on one version of a session (``expect``) found another: it moved on since."""

    def __init__(self, session_id: str, *, expected: int, actual: int):
        StoreError.__init__(self, f"session {session_id} is at version {actual}, not {expected}: it changed since "
                                  "the request read it")
        self.session_id, self.expected, self.actual = session_id, expected, actual


class BackendError(LmchatError, RuntimeError):
    """An inference backend failed: unreachable, an HTTP error, a busy session. Says which and where.

    ``url`` and ``status`` are set for remote servers (``status`` is None when no answer came).
    """

    def __init__(self, reason: str, *, url: str | None = None, status: int | None = None):
        self.url = url
        self.status = status
        self.reason = reason
        super().__init__(reason)


class SessionNotFound(LmchatError, KeyError):
    """No session with this id, or it belongs to another owner (the two are indistinguishable on purpose)."""

    def __init__(self, session_id: str):
        self.session_id = session_id
        super().__init__(f"no session {session_id!r}")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class EngineMismatch(LmchatError, RuntimeError):
    """A stored session was created for another engine (backend and model) than the one asked to continue it."""

    def __init__(self, session_id: str, *, stored: str, current: str):
        self.session_id, self.stored, self.current = session_id, stored, current
        super().__init__(
            f"session {session_id!r} was created with {stored}, and this server runs {current}: "
            "continue it on a server of that engine (its template and cache belong to that model)"
        )


class SessionExists(LmchatError, ValueError):
    """A session was created under an id that is already taken."""

    def __init__(self, session_id: str):
        self.session_id = session_id
        super().__init__(f"session {session_id!r} already exists")


class SessionBusy(LmchatError, RuntimeError):
    """A turn is already running on this session: one request at a time, never queued nor interleaved."""

    def __init__(self, session_id: str):
        self.session_id = session_id
        super().__init__(f"session {session_id!r} is busy with another request; retry when it has finished")


class SessionKindMismatch(LmchatError, RuntimeError):
    """A turn of one API on a session another API keeps records of (a Responses chain, a Conversation): it would
    change the session under those records, so it is refused and nothing changes."""

    APIS = {"responses": "the Responses API (a chain of responses): continue it with POST /v1/responses and "
                         "previous_response_id",
            "conversation": "the Conversations API: continue it with POST /v1/responses and conversation"}

    def __init__(self, session_id: str, *, kind: str | None, wanted: str | None):
        self.session_id, self.kind, self.wanted = session_id, kind, wanted
        owner = self.APIS.get(kind or "", f"sessions of kind {kind!r}" if kind else "chat and the interactive API")
        super().__init__(f"session {session_id!r} belongs to {owner}; this request cannot change it")


class RequestInProgress(LmchatError, RuntimeError):
    """A request with this Idempotency-Key is still being answered: its retry may not run it a second time.
    Retry after ``retry_after`` seconds: the first attempt's result is answered then."""

    def __init__(self, key: str, *, retry_after: int = 1):
        self.key, self.retry_after = key, retry_after
        super().__init__(f"a request with Idempotency-Key {key[:200]!r} is still in progress; retry it later to get "
                         "its result")


class CapacityExceeded(LmchatError, RuntimeError):
    """The manager runs as many turns as it may (``max_active``); retry later."""

    def __init__(self, limit: int):
        self.limit = limit
        super().__init__(f"at capacity: {limit} turns are running; retry later")


class MissingExtra(LmchatError, ImportError):
    """A feature needs an optional dependency that is not installed; names the extra that brings it."""

    def __init__(self, feature: str, extra: str, module: str | None):
        self.feature, self.extra, self.module = feature, extra, module
        missing = f" ({module} is not installed)" if module else ""
        super().__init__(f"{feature} needs the '{extra}' extra{missing}: pip install 'lmchat[{extra}]'")
